"""Worksheet rows as XML, built a column at a time with pyarrow.compute.

Each column turns into an array of `<c>` elements (NULL where the value is NULL: no cell),
then rows are joined element-wise and wrapped in `<row>`. Numbers stay numbers (NaN and the
infinities, which a spreadsheet has no number for, become the strings `NaN`, `Infinity` and
`-Infinity`), dates and times become Excel serial numbers with a date format, strings are
inline strings and never formulas; formula-looking strings get a quote-prefixed style when
neutralisation is on. Every string is stored exactly: markup is escaped, and characters XML
cannot carry (C0 controls but TAB, LF, CR) become SpreadsheetML's `_xHHHH_` escapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from qexport.writers.jsonvalues import to_text
from qexport.writers.neutralize import formula_mask, looks_like_formula
from qexport.writers.textual import (
    is_string_like,
    matches_anywhere,
    non_finite_labels,
    unwrap,
    utf8,
)
from qexport.writers.xlsx_parts import CONTROL_ESCAPES, Styles, column_letter, escape_text
from qexport.writers.xlsx_values import (
    TICKS_PER_DAY,
    date_serials,
    iso_text,
    timestamp_serials,
    truncated,
)

CellEncoder = Callable[[pa.Array, pa.Array], pa.Array]

_NO_TEXT = pa.scalar(None, pa.string())
_COUNTING = pa.array(range(65_536), pa.int64())  # 0, 1, 2...: row numbers without a Python loop
_INLINE = ' t="inlineStr"><is><t xml:space="preserve">'
_INLINE_END = "</t></is></c>"
# Characters XML 1.0 cannot carry, stored as `_xHHHH_` (xlsx_parts.CONTROL_ESCAPES; RE2).
_CONTROL_RE2 = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x{FFFE}\x{FFFF}]"
# Characters to escape: those above, markup, CR, and an underscore that starts `_xHHHH`.
_SPECIAL_RE2 = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x{FFFE}\x{FFFF}&<>\r]|_x[0-9A-Fa-f]{4}"


@dataclass(frozen=True)
class SheetColumns:
    """Per column: how its cells are encoded, and a width when the default would be too narrow."""

    header: str
    encoders: list[CellEncoder]
    widths: dict[int, float]


def plan_columns(schema: pa.Schema, styles: Styles, *, neutralize: bool) -> SheetColumns:
    """Choose each column's cell encoder from its Arrow type; register the styles it uses."""
    quote_style = styles.xf(quote=True) if neutralize else None
    encoders: list[CellEncoder] = []
    widths: dict[int, float] = {}
    for index, field in enumerate(schema):
        encoder, width = _encoder(field.type, column_letter(index), styles, quote_style)
        encoders.append(encoder)
        if width:
            widths[index] = width
    return SheetColumns(_header_row(schema, styles, neutralize=neutralize), encoders, widths)


def rows_xml(batch: pa.RecordBatch, first_row: int, columns: SheetColumns) -> pa.Array:
    """The `<row>` elements for a batch whose first row is worksheet row `first_row`."""
    rows = _row_numbers(first_row, batch.num_rows)
    cells = [
        encode(column, rows) for encode, column in zip(columns.encoders, batch.columns, strict=True)
    ]
    return pc.binary_join_element_wise(
        '<row r="', rows, '">', *cells, "</row>", "", null_handling="replace", null_replacement=""
    )


def _row_numbers(first: int, count: int) -> pa.Array:
    counting = _COUNTING if count <= len(_COUNTING) else pa.array(range(count), pa.int64())
    return pc.add(counting.slice(0, count), first).cast(pa.string())


def _header_row(schema: pa.Schema, styles: Styles, *, neutralize: bool) -> str:
    cells = []
    for index, name in enumerate(schema.names):
        style = styles.xf(bold=True, quote=neutralize and looks_like_formula(name))
        cells.append(
            f'<c r="{column_letter(index)}1" s="{style}"{_INLINE}{escape_text(name)}{_INLINE_END}'
        )
    return f'<row r="1">{"".join(cells)}</row>'


def _encoder(  # noqa: PLR0911 - one branch per Arrow type family
    arrow_type: pa.DataType, letter: str, styles: Styles, quote_style: int | None
) -> tuple[CellEncoder, float | None]:
    opening = f'<c r="{letter}'
    if isinstance(arrow_type, pa.BaseExtensionType) and is_string_like(arrow_type.storage_type):
        arrow_type = arrow_type.storage_type
    if pa.types.is_null(arrow_type):
        return (lambda column, rows: pa.nulls(len(column), pa.string())), None
    if pa.types.is_boolean(arrow_type):
        return _bool_cells(opening), None
    if pa.types.is_integer(arrow_type):
        return _number_cells(opening, None), None
    if pa.types.is_floating(arrow_type):
        return _float_cells(opening, quote_style), None
    if pa.types.is_decimal(arrow_type):
        scale = arrow_type.scale
        style = styles.xf("0." + "0" * scale) if scale > 0 else None
        return _number_cells(opening, style), None
    if pa.types.is_date(arrow_type):
        return _serial_cells(opening, styles.xf("yyyy-mm-dd"), date_serials), 11
    if pa.types.is_timestamp(arrow_type):
        return _serial_cells(opening, styles.xf("yyyy-mm-dd hh:mm:ss"), timestamp_serials), 20
    if pa.types.is_time(arrow_type):
        return _time_cells(opening, styles.xf("hh:mm:ss")), 10
    text = utf8 if is_string_like(arrow_type) else to_text
    return _text_cells(opening, text, quote_style), None


def _attributes(style: int | None) -> str:
    return f' s="{style}"' if style is not None else ""


def _bool_cells(opening: str) -> CellEncoder:
    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        values = pc.if_else(column, "1", "0")
        return pc.binary_join_element_wise(opening, rows, '" t="b"><v>', values, "</v></c>", "")

    return encode


def _number_cells(opening: str, style: int | None) -> CellEncoder:
    middle = f'"{_attributes(style)}><v>'

    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        values = unwrap(column).cast(pa.string())
        return pc.binary_join_element_wise(opening, rows, middle, values, "</v></c>", "")

    return encode


def _float_cells(opening: str, quote_style: int | None) -> CellEncoder:
    """Number cells; NaN and infinities as text cells (`-Infinity` is quote-prefixed like any
    text starting with `-` when neutralisation is on)."""
    numbers = _number_cells(opening, None)
    labels_as_text = _text_cells(opening, _same_text, quote_style)

    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        column = unwrap(column)
        if pa.types.is_float16(column.type):
            column = column.cast(pa.float32())
        labels = non_finite_labels(column)
        if labels is None:
            return numbers(column, rows)
        finite = pc.if_else(labels.is_valid(), pa.scalar(None, column.type), column)
        return pc.coalesce(numbers(finite, rows), labels_as_text(labels, rows))

    return encode


def _same_text(column: pa.Array) -> pa.Array:
    return column


def _time_cells(opening: str, style: int) -> CellEncoder:
    """A time of day is the fraction of a day, shown with a time format."""
    middle = f'"{_attributes(style)}><v>'

    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        storage = pa.int64() if pa.types.is_time64(column.type) else pa.int32()
        ticks = column.cast(storage).cast(pa.float64(), safe=False)
        fraction = pc.divide(ticks, float(TICKS_PER_DAY[column.type.unit]))
        values = fraction.cast(pa.string())
        return pc.binary_join_element_wise(opening, rows, middle, values, "</v></c>", "")

    return encode


def _serial_cells(
    opening: str, style: int, serials: Callable[[pa.Array], tuple[pa.Array, pa.Array]]
) -> CellEncoder:
    """Dates and timestamps as serial numbers; those Excel cannot represent as ISO text."""
    middle = f'"{_attributes(style)}><v>'
    text_cells = _text_cells(opening, iso_text, None)

    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        values, representable = serials(column)
        numbers = pc.if_else(representable, values.cast(pa.string()), _NO_TEXT)
        cells = pc.binary_join_element_wise(opening, rows, middle, numbers, "</v></c>", "")
        outside = pc.and_(column.is_valid(), pc.invert(representable))
        if not pc.any(outside).as_py():
            return cells
        return pc.coalesce(
            cells, text_cells(pc.if_else(outside, column, pa.scalar(None, column.type)), rows)
        )

    return encode


def _text_cells(
    opening: str, to_string: Callable[[pa.Array], pa.Array], quote_style: int | None
) -> CellEncoder:
    quoted = f'" s="{quote_style}"{_INLINE}'

    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        text = truncated(to_string(column))
        middle: str | pa.Array = f'"{_INLINE}'
        if quote_style is not None:
            mask = formula_mask(text)
            if pc.any(mask).as_py():
                middle = pc.if_else(mask, quoted, middle)
        # Most columns hold nothing to escape: one scan of the bytes proves it.
        special = _special_rows(text)
        if special is not None:
            text = pc.replace_with_mask(text, special, _escape(text.filter(special)))
        return pc.binary_join_element_wise(opening, rows, middle, text, _INLINE_END, "")

    return encode


def _special_rows(text: pa.Array) -> pa.Array | None:
    """Rows holding characters to escape, or None when there are none."""
    if not matches_anywhere(text, _SPECIAL_RE2):
        return None
    special = pc.fill_null(pc.match_substring_regex(text, _SPECIAL_RE2), False)
    return special if pc.any(special).as_py() else None


def _escape(text: pa.Array) -> pa.Array:
    """Values (no NULLs) as element text that reads back exactly; see xlsx_parts.escape_text."""
    subset = pc.replace_substring(text, "&", "&amp;")
    subset = pc.replace_substring(subset, "<", "&lt;")
    subset = pc.replace_substring(subset, ">", "&gt;")
    # A raw CR would be normalised to LF by every XML parser; the reference keeps it.
    subset = pc.replace_substring(subset, "\r", "&#13;")
    # Before the controls, whose own escapes must stay as they are.
    subset = pc.replace_substring_regex(subset, r"_(x[0-9A-Fa-f]{4})", r"_x005F_\1")
    if not matches_anywhere(subset, _CONTROL_RE2):
        return subset
    # Control characters are rare: the values holding them are escaped in Python.
    controls = pc.match_substring_regex(subset, _CONTROL_RE2)
    escaped = [value.translate(CONTROL_ESCAPES) for value in subset.filter(controls).to_pylist()]
    return pc.replace_with_mask(subset, controls, pa.array(escaped, pa.string()))
