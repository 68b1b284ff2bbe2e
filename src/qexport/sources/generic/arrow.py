"""Rows of a SQLAlchemy result as Arrow record batches, each column typed exactly or refused.

A DB-API cursor says little about its columns (SQLite nothing but their names), so a column's
Arrow type comes, in this order, from what the dialect reads in the cursor's description
(generic/dialects.py: MySQL's TIMESTAMP is an instant, its DECIMAL(p,s) a decimal128 with that
scale), else from the Python values of the first batch: one kind of value, or integers mixed
with floats (SQLite's NUMERIC), gives the type; a column all NULL there is text. The schema is
then fixed: a later value that does not fit it exactly (a text in an integer column, a decimal
with more digits than the scale, an integer past int64) fails the export `query_invalid`
naming the column, never a silently rounded or retyped value. pyarrow checks every value as
it converts (it refuses to truncate a float or rescale a decimal), and its messages, which
quote the value, are not passed on.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from qexport.domain.failures import QueryInvalidError, bounded_detail

Converter = Callable[[Sequence[Any]], pa.Array]
_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)
MAX_DECIMAL128_DIGITS = 38
MAX_DECIMAL_DIGITS = 76


@dataclass(frozen=True)
class Described:
    """One result column as the cursor's description gives it (PEP 249's seven items)."""

    name: str
    type_code: Any
    precision: int | None
    scale: int | None

    @classmethod
    def of(cls, item: Sequence[Any]) -> Described:
        padded = [*item, None, None, None, None, None, None][:7]
        precision, scale = padded[4], padded[5]
        return cls(
            str(padded[0]),
            padded[1],
            precision if isinstance(precision, int) else None,
            scale if isinstance(scale, int) else None,
        )


def decimal_type(precision: int | None, scale: int) -> pa.DataType:
    """The Arrow decimal for `scale` digits after the point and `precision` in all (the
    widest decimal128 when the driver gives no precision)."""
    digits = max(precision or MAX_DECIMAL128_DIGITS, scale, 1)
    if digits <= MAX_DECIMAL128_DIGITS:
        return pa.decimal128(digits, scale)
    return pa.decimal256(min(digits, MAX_DECIMAL_DIGITS), scale)


def _kind(value: Any) -> str:
    """A value's kind, as the column's type is chosen from it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dt.datetime):
        return "timestamptz" if value.tzinfo is not None else "timestamp"
    for kinds, name in (
        (int, "int"),
        (float, "float"),
        (Decimal, "decimal"),
        (str, "text"),
        ((bytes, bytearray, memoryview), "binary"),
        (dt.date, "date"),
        (dt.time, "time"),
        (dt.timedelta, "duration"),
        ((dict, list), "json"),
        (uuid.UUID, "uuid"),
    ):
        if isinstance(value, kinds):
            return name
    return type(value).__name__


_BY_KIND: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int": pa.int64(),
    "float": pa.float64(),
    "text": pa.string(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "duration": pa.duration("us"),
    "json": pa.string(),
    "uuid": pa.string(),
}


def type_from_values(column: Described, values: Sequence[Any]) -> pa.DataType:
    """The column's type from the first batch's values; QueryInvalidError when they mix
    kinds that no one type holds exactly, or are of a kind Arrow has no type for."""
    kinds = {_kind(value) for value in values if value is not None}
    if kinds == {"int", "float"}:
        return pa.float64()  # pyarrow refuses an integer a double cannot hold exactly
    if kinds <= {"int", "decimal"} and "decimal" in kinds:
        if column.scale is None:
            raise QueryInvalidError(
                bounded_detail(
                    f"the column {column.name!r} holds decimals of no declared scale:"
                    " CAST it to DECIMAL(p, s) (or to text) in the query"
                )
            )
        return decimal_type(column.precision, column.scale)
    if len(kinds) > 1:
        raise QueryInvalidError(
            bounded_detail(
                f"the column {column.name!r} mixes values of different types"
                f" ({', '.join(sorted(kinds))}): CAST it to one type in the query"
            )
        )
    if not kinds:
        return pa.string()  # all NULL so far: the driver said no more
    (kind,) = kinds
    if kind not in _BY_KIND:
        raise QueryInvalidError(
            bounded_detail(
                f"the column {column.name!r} holds {kind} values, which cannot be exported"
                " exactly: CAST it to text or to a number in the query"
            )
        )
    return _BY_KIND[kind]


def _json_text(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value) if isinstance(value, uuid.UUID) else value


def _plain_bytes(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview | bytearray) else value


def converter(column: Described, target: pa.DataType) -> Converter:
    """What turns one batch's values of `column` into an Arrow array of `target`.

    Values go to pyarrow as they came; only when it refuses them, in a text or binary column,
    are they turned first (JSON documents and UUIDs into text, memoryviews into bytes): doing
    that to every value cost a quarter of the time of reading a SQLite table.
    """
    if pa.types.is_string(target):
        prepare: Callable[[Any], Any] | None = _json_text
    elif pa.types.is_binary(target):
        prepare = _plain_bytes
    else:
        prepare = None

    def refused() -> QueryInvalidError:
        return QueryInvalidError(
            bounded_detail(
                f"the column {column.name!r} ({target}) has a value that does not fit"
                f" {target} exactly: CAST it to one type in the query"
            )
        )

    def convert(values: Sequence[Any]) -> pa.Array:
        try:
            return pa.array(values, type=target)
        except _CONVERSION_ERRORS:
            if prepare is None:
                raise refused() from None
        try:
            return pa.array([prepare(value) for value in values], type=target)
        except _CONVERSION_ERRORS:
            raise refused() from None

    return convert


class BatchBuilder:
    """Turns lists of rows into record batches of one fixed schema."""

    def __init__(self, columns: Sequence[Described], types: Sequence[pa.DataType]) -> None:
        self.schema = pa.schema(
            [pa.field(column.name, kind) for column, kind in zip(columns, types, strict=True)]
        )
        self._converters = [
            converter(column, kind) for column, kind in zip(columns, types, strict=True)
        ]

    def batch(self, rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        if not rows:
            return _empty(self.schema)
        columns = list(zip(*rows, strict=True))
        pairs = zip(self._converters, columns, strict=True)
        arrays = [convert(values) for convert, values in pairs]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
