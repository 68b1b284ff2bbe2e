"""Arrow values as JSON-safe cells, for a preview that a person reads as a table: exact, and
within a size a page can show.

- NULL is null; booleans are true and false.
- Integers are JSON numbers within ±(2^53 - 1), the range every JSON reader (JavaScript's
  included) holds exactly, and their text beyond it.
- Decimals are their exact text, never a float (`12.50`, `0.00000010`: no exponent).
- Floats are JSON numbers in their shortest exact form; NaN and the infinities, which JSON has
  no number for, the strings `NaN`, `Infinity` and `-Infinity` (as the jsonl writer).
- Dates `2024-05-01`, times `12:30:00`, timestamps in ISO 8601 with their zone's offset when
  they have one (`2024-05-01T12:30:00.000000+00:00`).
- Binary is `\\x` and its hex digits, as PostgreSQL prints bytea.
- Intervals and durations are ISO 8601 durations; lists, structs and maps their JSON text;
  anything else its text.

A text longer than `max_chars` is cut there and ends with CUT_MARK; rows stop once the cells
shown reach about `max_bytes` of text (the first row is always shown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from qexport.ports import Cell as Cell  # noqa: PLC0414 - re-exported, as the pages name it
from qexport.writers.jsonvalues import iso_timestamps, to_text
from qexport.writers.textual import (
    fallback_strings,
    is_binary_like,
    is_span,
    is_string_like,
    non_finite_label,
    span_text,
    unwrap,
    utf8,
)

CUT_MARK = "…[cut]"
# The integers every JSON reader holds exactly (IEEE doubles: Number.MAX_SAFE_INTEGER).
MAX_SAFE_INTEGER = 2**53 - 1


@dataclass(frozen=True)
class Cells:
    """The rows as cells, how many cells were cut, and whether rows were left out to stay
    within the size bound."""

    rows: list[list[Cell]]
    cut: int
    dropped: bool


def preview_cells(table: pa.Table, *, max_chars: int, max_bytes: int) -> Cells:
    """Every row of `table` as JSON-safe cells, long texts cut, at most about `max_bytes`."""
    arrays = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    columns = [(column_cells(array), _cuttable(array.type)) for array in arrays]
    rows: list[list[Cell]] = []
    cut = size = 0
    for index in range(table.num_rows):
        row: list[Cell] = []
        row_cut = row_size = 0
        for values, cuttable in columns:
            cell = values[index]
            if cuttable and isinstance(cell, str) and len(cell) > max_chars:
                cell = cell[:max_chars] + CUT_MARK
                row_cut += 1
            row_size += _size(cell)
            row.append(cell)
        if rows and size + row_size > max_bytes:
            return Cells(rows, cut, dropped=True)
        rows.append(row)
        cut, size = cut + row_cut, size + row_size
    return Cells(rows, cut, dropped=False)


def _cuttable(kind: pa.DataType) -> bool:
    """Whether values of this type may be long: text, binary, nested, anything unknown; not
    numbers, dates and times, whose text is short and only whole makes sense."""
    fixed = (
        pa.types.is_null,
        pa.types.is_boolean,
        pa.types.is_integer,
        pa.types.is_decimal,
        pa.types.is_floating,
        pa.types.is_temporal,
    )
    return not any(check(kind) for check in fixed)


def _size(cell: Cell) -> int:
    if isinstance(cell, str):
        return len(cell.encode("utf-8", "surrogatepass"))
    return 4 if cell is None else len(str(cell))


def column_cells(array: pa.Array) -> list[Cell]:  # noqa: PLR0911 - one branch per type family
    """The values of one column as cells (see the module docstring)."""
    array = _plain(array)
    kind = array.type
    if pa.types.is_null(kind):
        return [None] * len(array)
    if is_string_like(kind):
        return _texts(utf8(array))
    if pa.types.is_boolean(kind):
        return _values(array)
    if pa.types.is_integer(kind):
        return [_integer(v) for v in _values(array)]
    if pa.types.is_decimal(kind):
        return [None if v is None else _decimal(v) for v in _values(array)]
    if pa.types.is_floating(kind):
        return [None if v is None else _float(v) for v in _values(array)]
    if pa.types.is_date(kind):
        return _texts(array.cast(pa.date32()).cast(pa.string()))
    if pa.types.is_timestamp(kind):
        return _texts(iso_timestamps(array))
    if pa.types.is_time(kind):
        return _texts(array.cast(pa.string()))
    if is_binary_like(kind):
        return [None if v is None else "\\x" + bytes(v).hex() for v in _values(array)]
    if is_span(kind):
        return _texts(span_text(array))
    if isinstance(kind, pa.BaseExtensionType) or pa.types.is_union(kind):
        return list(fallback_strings(array))
    return _texts(to_text(array))  # lists, structs and maps as their JSON text


def _plain(array: pa.Array) -> pa.Array:
    """Text extension types as their text, other dictionaries decoded, half floats widened."""
    array = unwrap(array)
    if pa.types.is_dictionary(array.type) and not is_string_like(array.type):
        array = array.dictionary_decode()
    if pa.types.is_float16(array.type):
        array = array.cast(pa.float32())
    return array


def _values(array: pa.Array) -> list[Any]:
    values: list[Any] = array.to_pylist()
    return values


def _texts(array: pa.Array) -> list[Cell]:
    return list(_values(array))


def _integer(value: int | None) -> Cell:
    if value is None or -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    return str(value)


def _decimal(value: Decimal) -> str:
    return format(value, "f")


def _float(value: float) -> Cell:
    return value if math.isfinite(value) else non_finite_label(value)
