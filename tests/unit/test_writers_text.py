"""Properties of the vectorised text encoders: JSON values, the formula rule, XLSX text."""

from __future__ import annotations

import io
import json
import math
from decimal import Context, Decimal

import openpyxl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from openpyxl.utils.escape import unescape

from qexport.ports import WriterOptions
from qexport.writers.jsonvalues import json_fragments
from qexport.writers.neutralize import formula_mask, looks_like_formula
from qexport.writers.textual import decimal_text
from qexport.writers.xlsx import XlsxFileWriter


class _Bytes:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.data += data
        return len(self.data)


@given(st.lists(st.one_of(st.none(), st.text())))
def test_json_strings_read_back_exactly(texts: list[str | None]) -> None:
    """Any string, control characters and quotes included, reads back from its JSON text."""
    fragments = json_fragments(pa.array(texts, pa.string())).to_pylist()
    assert [json.loads(fragment) for fragment in fragments] == texts


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False)))
def test_json_floats_read_back_exactly(values: list[float]) -> None:
    """Every finite double's JSON text is a JSON number that reads back as the same double."""
    fragments = json_fragments(pa.array(values, pa.float64())).to_pylist()
    assert [float(json.loads(fragment)) for fragment in fragments] == values


@given(
    st.lists(
        st.decimals(
            min_value=Decimal("-99999999999999.9999"),
            max_value=Decimal("99999999999999.9999"),
            places=4,
        )
    )
)
def test_json_decimals_keep_their_digits(values: list[Decimal]) -> None:
    """Decimal JSON numbers carry the exact decimal value, never a float approximation."""
    fragments = json_fragments(pa.array(values, pa.decimal128(18, 4))).to_pylist()
    assert [json.loads(f, parse_float=Decimal, parse_int=Decimal) for f in fragments] == values


@given(st.lists(st.text(max_size=5)))
def test_formula_rule_is_the_same_in_python_and_arrow(texts: list[str]) -> None:
    """The vectorised formula mask and the Python rule (used for headers) always agree."""
    mask = formula_mask(pa.array(texts, pa.string())).to_pylist()
    assert mask == [looks_like_formula(text) for text in texts]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=20))
def test_xlsx_text_reads_back_exactly(texts: list[str]) -> None:
    """Any text, control characters and `_xHHHH_` lookalikes included, reads back from XLSX
    exactly once SpreadsheetML's `_xHHHH_` escapes are decoded (as Excel and LibreOffice do;
    openpyxl leaves them to `unescape`); formula-looking text is quote-prefixed."""
    batch = pa.record_batch([pa.array(texts, pa.string())], names=["t"])
    sink = _Bytes()
    XlsxFileWriter().write(batch.schema, iter([batch]), sink, WriterOptions())
    sheet = openpyxl.load_workbook(io.BytesIO(bytes(sink.data)))["Sheet1"]
    cells = [row[0] for row in sheet.iter_rows(min_row=2, max_row=len(texts) + 1)]
    assert [unescape(cell.value or "") for cell in cells] == texts
    assert [cell.quotePrefix for cell in cells] == [looks_like_formula(t) for t in texts]


_LOOKALIKES = st.lists(
    st.sampled_from(["_", "x", "0041", "x00e9", "_x0041_", "\x1b", "\x00", "a"]), max_size=12
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LOOKALIKES, min_size=1, max_size=10))
def test_xlsx_escape_lookalikes_read_back_exactly(texts: list[str]) -> None:
    """Text built from underscores, hex digits, `_x0041_` and controls (where escapes meet and
    share underscores) reads back exactly, in the header and in the cells."""
    batch = pa.record_batch([pa.array(texts, pa.string())], names=["".join(texts)])
    sink = _Bytes()
    XlsxFileWriter().write(batch.schema, iter([batch]), sink, WriterOptions())
    sheet = openpyxl.load_workbook(io.BytesIO(bytes(sink.data)))["Sheet1"]
    assert unescape(sheet["A1"].value or "") == "".join(texts)
    cells = [row[0] for row in sheet.iter_rows(min_row=2, max_row=len(texts) + 1)]
    assert [unescape(cell.value or "") for cell in cells] == texts


@given(st.lists(st.one_of(st.none(), st.floats(width=64)), max_size=20))
def test_json_floats_of_any_value_read_back(values: list[float | None]) -> None:
    """Finite doubles are JSON numbers that read back exactly; NaN and infinities are the
    strings "NaN", "Infinity" and "-Infinity"; NULL is null."""
    fragments = json_fragments(pa.array(values, pa.float64())).to_pylist()
    decoded = [json.loads(fragment) for fragment in fragments]
    for value, got in zip(values, decoded, strict=True):
        if value is None:
            assert got is None
        elif math.isnan(value):
            assert got == "NaN"
        elif math.isinf(value):
            assert got == ("Infinity" if value > 0 else "-Infinity")
        else:
            assert float(got) == value


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=-4, max_value=38).flatmap(
        lambda scale: st.tuples(
            st.just(scale),
            st.lists(
                st.one_of(
                    st.none(),
                    st.integers(min_value=-(10**36) + 1, max_value=10**36 - 1),
                    st.integers(min_value=-(10**7), max_value=10**7),
                ),
                max_size=20,
            ),
        )
    ),
    st.booleans(),
)
def test_decimal_text_is_plain_notation_with_the_columns_scale(
    case: tuple[int, list[int | None]], wide: bool
) -> None:
    """Any decimal (unscaled integer, scale -4 to 38, 128 or 256 bits, sliced or not) reads
    as Python's plain notation of its value at that scale: no exponent, every digit of the
    scale written (`0E-10` is `0.0000000000`)."""
    scale, unscaled = case
    exact = Context(prec=100)  # the default 28 digits would round a 36-digit value
    values = [None if u is None else Decimal(u).scaleb(-scale, exact) for u in unscaled]
    arrow_type = pa.decimal256(76, scale) if wide else pa.decimal128(38, scale)
    array = pa.array(values, arrow_type)
    for part in (array, array.slice(1)):
        shown = decimal_text(part).to_pylist()
        assert shown == [None if v is None else format(v, "f") for v in part.to_pylist()]
        assert not any("E" in text for text in shown if text is not None)
