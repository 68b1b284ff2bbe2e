"""Worksheet rows as XML, built a column at a time with pyarrow.compute.

Each column turns into an array of `<c>` elements (NULL where the value is NULL: no cell),
then rows are joined element-wise and wrapped in `<row>`. What each cell holds (a number, a
boolean or a text, and the number format) is `xlsx_values`' rule, shared with the report
writer; here it is written out. Text is an inline string, never a formula; formula-looking
text gets a quote-prefixed style when neutralisation is on. Every string is stored exactly:
markup is escaped, and characters XML cannot carry (C0 controls but TAB, LF, CR) become
SpreadsheetML's `_xHHHH_` escapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from qexport.writers.neutralize import formula_mask, looks_like_formula
from qexport.writers.textual import matches_anywhere
from qexport.writers.xlsx_parts import CONTROL_ESCAPES, Styles, column_letter, escape_text
from qexport.writers.xlsx_values import column_rule

CellEncoder = Callable[[pa.Array, pa.Array], pa.Array]

_COUNTING = pa.array(range(65_536), pa.int64())  # 0, 1, 2...: row numbers without a Python loop
_INLINE = ' t="inlineStr"><is><t xml:space="preserve">'
_INLINE_END = "</t></is></c>"
# Characters XML 1.0 cannot carry, stored as `_xHHHH_`: xlsx_parts.CONTROL_ESCAPES in RE2.
_CONTROLS_RE2 = "".join(f"\\x{{{code:X}}}" for code in CONTROL_ESCAPES)
_CONTROL_RE2 = f"[{_CONTROLS_RE2}]"
# Characters to escape: those above, markup, CR, and an underscore that starts `_xHHHH`.
_SPECIAL_RE2 = f"[{_CONTROLS_RE2}&<>\\r]|_x[0-9A-Fa-f]{{4}}"


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


def _encoder(
    arrow_type: pa.DataType, letter: str, styles: Styles, quote_style: int | None
) -> tuple[CellEncoder, float | None]:
    """The column's cells as `xlsx_values` decides them, each written as its XML element."""
    rule = column_rule(arrow_type)
    style = styles.xf(rule.number_format) if rule.number_format else None
    opening = f'<c r="{letter}'
    number_middle = f'"{_attributes(style)}><v>'
    texts_xml = _text_cells(opening, quote_style)

    def encode(column: pa.Array, rows: pa.Array) -> pa.Array:
        cells = rule.cells(column)
        parts = []
        if cells.numbers is not None:
            parts.append(
                pc.binary_join_element_wise(
                    opening, rows, number_middle, cells.numbers, "</v></c>", ""
                )
            )
        if cells.booleans is not None:
            values = pc.if_else(cells.booleans, "1", "0")
            parts.append(
                pc.binary_join_element_wise(opening, rows, '" t="b"><v>', values, "</v></c>", "")
            )
        if cells.texts is not None:
            parts.append(texts_xml(cells.texts, rows))
        if not parts:
            return pa.nulls(len(column), pa.string())
        return parts[0] if len(parts) == 1 else pc.coalesce(*parts)

    return encode, rule.width


def _attributes(style: int | None) -> str:
    return f' s="{style}"' if style is not None else ""


def _text_cells(opening: str, quote_style: int | None) -> CellEncoder:
    """Inline string cells, escaped to read back exactly; formula-looking text is quote-
    prefixed when `quote_style` is given."""
    quoted = f'" s="{quote_style}"{_INLINE}'

    def encode(text: pa.Array, rows: pa.Array) -> pa.Array:
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
