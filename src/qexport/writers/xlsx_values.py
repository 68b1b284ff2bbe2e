"""What a cell of a qexport workbook holds: Excel's serial dates and its limit on text.

Excel stores a date as a number of days since its epoch, in its own calendar (1900-01-01 to
9999-12-31, with the 29 February 1900 that never was), and at most 32,767 characters a cell.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from qexport.writers.jsonvalues import iso_timestamps

# Excel's serial day 0 is 1899-12-30 in the 1900 date system; the Unix epoch is day 25569.
UNIX_EPOCH_SERIAL = 25_569
# Excel believes 1900 was a leap year: serials before 1 March 1900 (61) are one day lower.
FIRST_TRUE_SERIAL = 61
MIN_SERIAL = 2  # 1900-01-01 before the leap-year correction; earlier dates have no serial
MAX_SERIAL = 2_958_466  # 10000-01-01: Excel's calendar ends on 9999-12-31
MAX_CELL_CHARS = 32_767  # Excel refuses longer text in a cell
TICKS_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def date_serials(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    days = column.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    return excel_serials(pc.add(days, UNIX_EPOCH_SERIAL))


def timestamp_serials(column: pa.Array) -> tuple[pa.Array, pa.Array]:
    # Excel has no time zones: an aware timestamp is shown as wall-clock time in its zone.
    wall = pc.local_timestamp(column) if column.type.tz is not None else column
    ticks = wall.cast(pa.int64()).cast(pa.float64(), safe=False)
    days = pc.divide(ticks, float(TICKS_PER_DAY[column.type.unit]))
    return excel_serials(pc.add(days, float(UNIX_EPOCH_SERIAL)))


def excel_serials(serials: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Apply Excel's 1900 leap-year quirk; also say which values Excel can represent."""
    early = pc.less(serials, FIRST_TRUE_SERIAL)
    shifted = pc.if_else(early, pc.subtract(serials, 1), serials)
    representable = pc.fill_null(
        pc.and_(pc.greater_equal(serials, MIN_SERIAL), pc.less(serials, MAX_SERIAL)), False
    )
    return shifted, representable


def iso_text(column: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(column.type):
        return iso_timestamps(column)
    return column.cast(pa.date32()).cast(pa.string())


def truncated(text: pa.Array) -> pa.Array:
    """At most Excel's 32,767 characters per cell; Excel reports longer text as corrupt."""
    too_long = pc.fill_null(pc.greater(pc.utf8_length(text), MAX_CELL_CHARS), False)
    if pc.any(too_long).as_py():
        return pc.utf8_slice_codeunits(text, 0, MAX_CELL_CHARS)
    return text
