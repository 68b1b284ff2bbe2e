"""What each cell of a qexport workbook holds, whichever library writes the file.

The export writer (writers/xlsx.py, SpreadsheetML made here) and the report writer
(reports/xlsx.py, XlsxWriter) both take a column's cells from `column_rule`, so a value is
the same cell in both:
- booleans are booleans; integers and decimals are numbers, a decimal shown with its
  column's scale, but an integer beyond ±2**53 is its text (a double, which is all a
  spreadsheet number is, would lose its last digits); floats are numbers, NaN and the
  infinities (a spreadsheet has no number for them) the text `NaN`, `Infinity` and
  `-Infinity`;
- dates and timestamps are Excel serial numbers with a date format; those outside Excel's
  calendar (1900-01-01 to 9999-12-31) are ISO 8601 text; an aware timestamp is its
  wall-clock time in its zone (Excel has no time zones); a time of day is the fraction of a
  day with a time format;
- anything else is text, the same text as in the other formats (jsonvalues.to_text: binary
  as base64, nested values as JSON, durations in ISO 8601), cut at Excel's 32,767 characters.
A number cell's value is the exact text its `<v>` element holds: a decimal's digits, a
float's shortest text that reads back to the same double. Text is never a formula; a writer
marks formula-looking text "quote prefix" (neutralize.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from qexport.writers.jsonvalues import iso_timestamps, to_text
from qexport.writers.textual import is_string_like, non_finite_labels, unwrap

# Excel's serial day 0 is 1899-12-30 in the 1900 date system; the Unix epoch is day 25569.
UNIX_EPOCH_SERIAL = 25_569
# Excel believes 1900 was a leap year: serials before 1 March 1900 (61) are one day lower.
FIRST_TRUE_SERIAL = 61
MIN_SERIAL = 2  # 1900-01-01 before the leap-year correction; earlier dates have no serial
MAX_SERIAL = 2_958_466  # 10000-01-01: Excel's calendar ends on 9999-12-31
MAX_CELL_CHARS = 32_767  # Excel refuses longer text in a cell
MAX_EXACT_INTEGER = 2**53  # every integer up to here is exactly a double; beyond, text
TICKS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
DATE_FORMAT = "yyyy-mm-dd"
DATETIME_FORMAT = "yyyy-mm-dd hh:mm:ss"
TIME_FORMAT = "hh:mm:ss"
# Widths (in Excel's units, about a character each) that show a whole formatted value
# rather than `####`; other columns keep a writer's own width.
DATE_WIDTH = 11
DATETIME_WIDTH = 20
TIME_WIDTH = 10

_NO_TEXT = pa.scalar(None, pa.string())
_EXACT_BITS = 53  # integer types this wide or narrower always fit (a double's mantissa)


@dataclass(frozen=True)
class Cells:
    """A column's cells: per row a number (the text of its value), a boolean or a text, at
    most one of them; no cell where none is set (NULL)."""

    numbers: pa.Array | None = None  # string
    booleans: pa.Array | None = None  # bool
    texts: pa.Array | None = None  # string, at most MAX_CELL_CHARS each


@dataclass(frozen=True)
class ColumnRule:
    """How the values of one Arrow type become cells, the number format of its number cells,
    and the width its formatted values need (None: the default width)."""

    cells: Callable[[pa.Array], Cells]
    number_format: str | None = None
    width: float | None = None


def column_rule(arrow_type: pa.DataType) -> ColumnRule:  # noqa: PLR0911 - one per type family
    """The rule for a column of `arrow_type`."""
    if isinstance(arrow_type, pa.BaseExtensionType) and is_string_like(arrow_type.storage_type):
        arrow_type = arrow_type.storage_type
    if pa.types.is_null(arrow_type):
        return ColumnRule(lambda column: Cells())
    if pa.types.is_boolean(arrow_type):
        return ColumnRule(lambda column: Cells(booleans=column))
    if pa.types.is_integer(arrow_type):
        return ColumnRule(_integer_cells)
    if pa.types.is_floating(arrow_type):
        return ColumnRule(_float_cells)
    if pa.types.is_decimal(arrow_type):
        scale = arrow_type.scale
        return ColumnRule(_number_cells, "0." + "0" * scale if scale > 0 else None)
    if pa.types.is_date(arrow_type):
        return ColumnRule(_serial_cells(_date_serials), DATE_FORMAT, DATE_WIDTH)
    if pa.types.is_timestamp(arrow_type):
        return ColumnRule(_serial_cells(_timestamp_serials), DATETIME_FORMAT, DATETIME_WIDTH)
    if pa.types.is_time(arrow_type):
        return ColumnRule(_time_cells, TIME_FORMAT, TIME_WIDTH)
    return ColumnRule(lambda column: Cells(texts=_truncated(to_text(column))))


def _number_cells(column: pa.Array) -> Cells:
    return Cells(numbers=unwrap(column).cast(pa.string()))


def _integer_cells(column: pa.Array) -> Cells:
    """Numbers, but the text of those a double cannot hold exactly (one min/max scan)."""
    text = column.cast(pa.string())
    if column.type.bit_width <= _EXACT_BITS:
        return Cells(numbers=text)
    bounds = pc.min_max(column).as_py()
    low, high = bounds["min"], bounds["max"]
    if low is None or (low >= -MAX_EXACT_INTEGER and high <= MAX_EXACT_INTEGER):
        return Cells(numbers=text)
    outside = pc.greater(column, pa.scalar(MAX_EXACT_INTEGER, column.type))
    if pa.types.is_signed_integer(column.type):
        outside = pc.or_(outside, pc.less(column, pa.scalar(-MAX_EXACT_INTEGER, column.type)))
    return Cells(
        numbers=pc.if_else(outside, _NO_TEXT, text), texts=pc.if_else(outside, text, _NO_TEXT)
    )


def _float_cells(column: pa.Array) -> Cells:
    """Numbers; NaN and the infinities as their labels."""
    column = unwrap(column)
    if pa.types.is_float16(column.type):
        column = column.cast(pa.float32())
    labels = non_finite_labels(column)
    if labels is None:
        return _number_cells(column)
    finite = pc.if_else(labels.is_valid(), pa.scalar(None, column.type), column)
    return Cells(numbers=finite.cast(pa.string()), texts=labels)


def _time_cells(column: pa.Array) -> Cells:
    """A time of day is the fraction of a day."""
    storage = pa.int64() if pa.types.is_time64(column.type) else pa.int32()
    ticks = column.cast(storage).cast(pa.float64(), safe=False)
    fraction = pc.divide(ticks, float(TICKS_PER_DAY[column.type.unit]))
    return Cells(numbers=fraction.cast(pa.string()))


def _serial_cells(
    serials: Callable[[pa.Array], tuple[pa.Array, pa.Array]],
) -> Callable[[pa.Array], Cells]:
    """Dates and timestamps as serial numbers; those Excel cannot represent as ISO text."""

    def cells(column: pa.Array) -> Cells:
        values, representable = serials(column)
        numbers = pc.if_else(representable, values.cast(pa.string()), _NO_TEXT)
        outside = pc.and_(column.is_valid(), pc.invert(representable))
        if not pc.any(outside).as_py():
            return Cells(numbers=numbers)
        texts = _iso_text(pc.if_else(outside, column, pa.scalar(None, column.type)))
        return Cells(numbers=numbers, texts=texts)

    return cells


def _date_serials(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    days = column.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    return _excel_serials(pc.add(days, UNIX_EPOCH_SERIAL))


def _timestamp_serials(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    # Excel has no time zones: an aware timestamp is shown as wall-clock time in its zone.
    wall = pc.local_timestamp(column) if column.type.tz is not None else column
    ticks = wall.cast(pa.int64()).cast(pa.float64(), safe=False)
    days = pc.divide(ticks, float(TICKS_PER_DAY[column.type.unit]))
    return _excel_serials(pc.add(days, float(UNIX_EPOCH_SERIAL)))


def _excel_serials(serials: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Apply Excel's 1900 leap-year quirk; also say which values Excel can represent."""
    early = pc.less(serials, FIRST_TRUE_SERIAL)
    shifted = pc.if_else(early, pc.subtract(serials, 1), serials)
    representable = pc.fill_null(
        pc.and_(pc.greater_equal(serials, MIN_SERIAL), pc.less(serials, MAX_SERIAL)), False
    )
    return shifted, representable


def _iso_text(column: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(column.type):
        return iso_timestamps(column)
    return column.cast(pa.date32()).cast(pa.string())


def _truncated(text: pa.Array) -> pa.Array:
    """At most Excel's 32,767 characters per cell; Excel reports longer text as corrupt."""
    too_long = pc.fill_null(pc.greater(pc.utf8_length(text), MAX_CELL_CHARS), False)
    if pc.any(too_long).as_py():
        return pc.utf8_slice_codeunits(text, 0, MAX_CELL_CHARS)
    return text
