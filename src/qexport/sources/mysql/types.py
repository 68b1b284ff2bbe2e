"""MySQL/MariaDB result columns as Arrow: the type of each from the result's metadata, and the
batch built from the server's own text.

The text protocol sends every value as text (binary strings and BIT as their bytes). The
connection is told to hand every value over as the raw bytes it came in (`RAW_CONVERSIONS`):
no Python int, Decimal or datetime is ever made. A batch is one `pa.array` of binary over all
its cells, cut into columns with `take`, and each column cast by Arrow (C speed, and strict: a
value that does not fit its type exactly fails the cast, never rounds). Measured on 5M rows
of (BIGINT, DECIMAL(12,2), DOUBLE, VARCHAR, DATETIME), on 2 busy cores: the fetch alone
1.5 s of CPU, these batches 3.5-4.1 s in all (pa.array 1.0, take 0.35, the casts 0.8); one
list per column (zip of the rows) took 5.2 s, and mysqlclient's SSCursor making Python values
(int, Decimal, datetime) 10.6 s for the fetch alone, before any conversion to Arrow.

| MySQL                          | Arrow                                              |
|--------------------------------|----------------------------------------------------|
| TINYINT..BIGINT (signed)       | int64                                              |
| any integer UNSIGNED           | int64, BIGINT UNSIGNED: uint64                     |
| DECIMAL(p,s)                   | decimal128(p,s), decimal256 past 38 digits         |
| FLOAT, DOUBLE                  | float32, float64 (the server's shortest exact text)|
| DATE, DATETIME(n)              | date32, timestamp[us] (a wall-clock time, no zone) |
| TIMESTAMP(n)                   | timestamp[us, UTC] (the session is in UTC)         |
| TIME(n)                        | duration[us] (-838:59:59 to 838:59:59)             |
| YEAR                           | int16                                              |
| BIT(n)                         | int64 (BIT(64): uint64), the bits as a number      |
| CHAR, VARCHAR, TEXT, ENUM, SET, JSON | string (utf8mb4)                             |
| BINARY, VARBINARY, BLOB        | binary                                             |
| a NULL literal                 | string, all NULL                                   |
| GEOMETRY                       | refused: ST_AsText() or ST_AsBinary() it           |

Dates no calendar has are NULL: the zero date `0000-00-00` (and `0000-00-00 00:00:00`), a
zero month or day (`2024-00-10`, `2024-05-00`) or a day past the month's end (`2024-02-30`),
which MySQL stores under a lax sql_mode (no NO_ZERO_DATE / NO_ZERO_IN_DATE, or
ALLOW_INVALID_DATES). They are found only when a batch's cast fails, so valid data pays
nothing. YEAR's zero year is the number 0.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from qexport.domain.failures import QueryInvalidError, bounded_detail
from qexport.sources.generic.arrow import MAX_DECIMAL128_DIGITS, MAX_DECIMAL_DIGITS

# include/mysql_com.h: enum_field_types and the field flags.
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT = range(10, 17)
TIMESTAMP2, DATETIME2, TIME2 = 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = range(249, 256)
UNSIGNED_FLAG = 32
BINARY_FLAG = 128
ENUM_FLAG = 256
SET_FLAG = 2048

_INTEGERS = frozenset({TINY, SHORT, LONG, LONGLONG, INT24})
_DECIMALS = frozenset({DECIMAL, NEWDECIMAL})
_STRINGS = frozenset(
    {VARCHAR, VAR_STRING, STRING, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, ENUM, SET}
)
_DATES = frozenset({DATE, NEWDATE})
_DATETIMES = frozenset({DATETIME, DATETIME2})
_TIMESTAMPS = frozenset({TIMESTAMP, TIMESTAMP2})
_TIMES = frozenset({TIME, TIME2})

# The connection's decoders (mysqlclient's `conv`): every type arrives as bytes. For the string
# types the entry is a list of (flag, decoder) that mysqlclient matches against the column's
# flags, with BINARY_FLAG set only for the binary character set: both decoders are the bytes
# fast path, and which one was chosen (the result's `converter`) tells text from binary.
RAW_CONVERSIONS: dict[Any, Any] = {
    **{code: [(BINARY_FLAG, bytes), (None, None)] for code in (*_STRINGS, GEOMETRY)},
}

_TYPE_NAMES = {
    DECIMAL: "DECIMAL",
    NEWDECIMAL: "DECIMAL",
    TINY: "TINYINT",
    SHORT: "SMALLINT",
    INT24: "MEDIUMINT",
    LONG: "INT",
    LONGLONG: "BIGINT",
    FLOAT: "FLOAT",
    DOUBLE: "DOUBLE",
    NULL: "NULL",
    TIMESTAMP: "TIMESTAMP",
    TIMESTAMP2: "TIMESTAMP",
    DATE: "DATE",
    NEWDATE: "DATE",
    TIME: "TIME",
    TIME2: "TIME",
    DATETIME: "DATETIME",
    DATETIME2: "DATETIME",
    YEAR: "YEAR",
    BIT: "BIT",
    JSON: "JSON",
    GEOMETRY: "GEOMETRY",
}
_BLOBS = frozenset({TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB})
_BIT64 = 64


@dataclass(frozen=True)
class Column:
    """One result column as the server describes it."""

    name: str
    type_code: int
    length: int  # the display width (characters, or bytes times the charset's width)
    decimals: int
    flags: int
    binary: bool  # the binary character set: bytes, not text

    @property
    def unsigned(self) -> bool:
        return bool(self.flags & UNSIGNED_FLAG)

    @property
    def type_name(self) -> str:
        """The type as MySQL writes it, for describe and preview (`DECIMAL(12,2)`)."""
        code = self.type_code
        if code in _DECIMALS:
            return f"DECIMAL({self.decimal_digits},{self.decimals})"
        if code in _BLOBS:
            name = "BLOB" if self.binary else "TEXT"
        elif self.flags & ENUM_FLAG or code == ENUM:
            name = "ENUM"
        elif self.flags & SET_FLAG or code == SET:
            name = "SET"
        elif code == STRING:
            name = "BINARY" if self.binary else "CHAR"
        elif code in (VARCHAR, VAR_STRING):
            name = "VARBINARY" if self.binary else "VARCHAR"
        else:
            name = _TYPE_NAMES.get(code, f"TYPE {code}")
        if code == BIT:
            name = f"BIT({self.length})"
        if self.unsigned and (code in _INTEGERS or code in (FLOAT, DOUBLE)):
            name += " UNSIGNED"
        return name

    @property
    def decimal_digits(self) -> int:
        """A DECIMAL's precision: its display width less the point and the sign."""
        digits = self.length - (self.decimals > 0) - (not self.unsigned)
        return max(digits, self.decimals, 1)

    def arrow_type(self) -> pa.DataType:  # noqa: PLR0911 - one return per kind of type
        """The column's Arrow type; QueryInvalidError for a type with no exact one."""
        code = self.type_code
        if code in _INTEGERS:
            return pa.uint64() if code == LONGLONG and self.unsigned else pa.int64()
        if code in _DECIMALS:
            digits = self.decimal_digits
            if digits <= MAX_DECIMAL128_DIGITS:
                return pa.decimal128(digits, self.decimals)
            return pa.decimal256(min(digits, MAX_DECIMAL_DIGITS), self.decimals)
        simple = _SIMPLE.get(code)
        if simple is not None:
            return simple
        if code == BIT:
            return pa.uint64() if self.length >= _BIT64 else pa.int64()
        if code in (JSON, NULL):
            return pa.string()
        if code in _STRINGS:
            return pa.binary() if self.binary else pa.string()
        raise QueryInvalidError(
            bounded_detail(
                f"the column {self.name!r} is of type {self.type_name}, which cannot be"
                " exported exactly: convert it in the query (ST_AsText() for a geometry,"
                " CAST(... AS CHAR) otherwise)"
            )
        )


_SIMPLE: dict[int, pa.DataType] = {
    FLOAT: pa.float32(),
    DOUBLE: pa.float64(),
    YEAR: pa.int16(),
    **dict.fromkeys(_DATES, pa.date32()),
    **dict.fromkeys(_DATETIMES, pa.timestamp("us")),
    **dict.fromkeys(_TIMESTAMPS, pa.timestamp("us", tz="UTC")),
    **dict.fromkeys(_TIMES, pa.duration("us")),
}


def columns_of(result: Any) -> list[Column]:
    """The columns of a mysqlclient result (its description, flags and chosen decoders)."""
    described = result.describe()
    flags = result.field_flags()
    decoders = result.converter
    return [
        Column(
            name=str(item[0]),
            type_code=int(item[1]),
            length=int(item[3]),
            decimals=int(item[5]),
            flags=int(flag),
            binary=decoder is bytes or int(item[1]) == BIT,
        )
        for item, flag, decoder in zip(described, flags, decoders, strict=True)
    ]


Cast = Callable[[pa.Array], pa.Array]
_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError)


class RawBatches:
    """Builds record batches of one fixed schema from rows of raw bytes (or None)."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self.schema = pa.schema([pa.field(c.name, c.arrow_type()) for c in self.columns])
        self._casts = [_cast_for(c, f.type) for c, f in zip(self.columns, self.schema, strict=True)]
        self._indices: dict[int, list[pa.Array]] = {}

    def batch(self, cells: list[Any], rows: int) -> pa.RecordBatch:
        """The batch of `rows` rows whose cells, row after row, are `cells`."""
        width = len(self.columns)
        if rows == 0:
            return _empty(self.schema)
        flat = pa.array(cells, pa.binary())
        indices = self._indices.get(rows)
        if indices is None:
            # The same few batch sizes come again and again: their indices are kept.
            indices = [pa.array(range(i, rows * width, width), pa.int32()) for i in range(width)]
            if len(self._indices) < _KEPT_INDICES:
                self._indices[rows] = indices
        arrays = [cast(flat.take(index)) for cast, index in zip(self._casts, indices, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


_KEPT_INDICES = 8


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def _refused(column: Column, target: pa.DataType) -> QueryInvalidError:
    # Arrow's message quotes the value: row data stays out of failure details.
    return QueryInvalidError(
        bounded_detail(
            f"the column {column.name!r} ({column.type_name}) has a value that does not fit"
            f" {target} exactly: CAST it in the query"
        )
    )


def _cast_for(column: Column, target: pa.DataType) -> Cast:
    """How a column of raw bytes becomes `target`."""
    code = column.type_code
    if pa.types.is_binary(target):
        return _identity
    if code == BIT:
        return _per_value(column, target, _bits)
    if code in _TIMES:
        return _per_value(column, target, _microseconds)
    if pa.types.is_string(target):
        return _checked(column, target, lambda text: text, check_utf8=True)
    if code in _DATES or code in _DATETIMES or code in _TIMESTAMPS:
        return _dates(column, target)
    return _checked(column, target, lambda text: text.cast(target))


def _identity(raw: pa.Array) -> pa.Array:
    return raw


def _checked(
    column: Column, target: pa.DataType, convert: Cast, *, check_utf8: bool = False
) -> Cast:
    """`convert` over the column as text: checked to be UTF-8 (a text column), or only seen
    as text (numbers and dates: their parse refuses anything else)."""

    def cast(raw: pa.Array) -> pa.Array:
        try:
            text = raw.cast(pa.string()) if check_utf8 else raw.view(pa.string())
            return convert(text)
        except _CAST_ERRORS:
            raise _refused(column, target) from None

    return cast


def _dates(column: Column, target: pa.DataType) -> Cast:
    """DATE, DATETIME, TIMESTAMP: Arrow's ISO parser (strict: it refuses 2024-02-30); only
    when it refuses a batch are its impossible dates found and made NULL."""
    naive = pa.timestamp("us") if pa.types.is_timestamp(target) else target

    def parse(text: pa.Array) -> pa.Array:
        try:
            parsed = text.cast(naive)
        except pa.ArrowInvalid:
            parsed = _calendar_dates_only(text).cast(naive)
        return parsed.cast(target)  # naive -> UTC: the same numbers, the zone added

    return _checked(column, target, parse)


_DATE_PART = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def _is_calendar_date(text: str) -> bool:
    found = _DATE_PART.match(text)
    if found is None:
        return False
    try:
        dt.date(*(int(part) for part in found.groups()))
    except ValueError:
        return False
    return True


def _calendar_dates_only(text: pa.Array) -> pa.Array:
    """`text` with every value that is no calendar date (0000-00-00, 2024-02-30) NULL."""
    values = text.to_pylist()
    return pa.array(
        [v if v is not None and _is_calendar_date(v) else None for v in values], pa.string()
    )


def _per_value(column: Column, target: pa.DataType, convert: Callable[[bytes], int]) -> Cast:
    """For the rare types Arrow cannot parse (TIME past 24 h, BIT's bytes): one by one."""

    def cast(raw: pa.Array) -> pa.Array:
        try:
            return pa.array([None if v is None else convert(v) for v in raw.to_pylist()], target)
        except (*_CAST_ERRORS, pa.ArrowException):
            raise _refused(column, target) from None

    return cast


def _bits(value: bytes) -> int:
    return int.from_bytes(value, "big")


_TIME = re.compile(rb"(-?)(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")


def _microseconds(value: bytes) -> int:
    """`-838:59:59.000000` as microseconds."""
    found = _TIME.fullmatch(value)
    if found is None:
        raise ValueError("not a TIME")
    sign, hours, minutes, seconds, fraction = found.groups()
    total = (int(hours) * 3600 + int(minutes) * 60 + int(seconds)) * 1_000_000
    total += int((fraction or b"0").ljust(6, b"0"))
    return -total if sign else total
