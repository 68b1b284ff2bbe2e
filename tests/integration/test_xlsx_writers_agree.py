"""The export writer (writers/xlsx.py) and the report writer (reports/xlsx.py, XlsxWriter) make
the same cells of the same awkward values, read back with openpyxl.

Both take their cells from writers/xlsx_values.py; this pins that nothing either library does
on its own (XlsxWriter's number text, its date conversion, its string escaping) makes them
differ. Writing a report needs a temporary file, hence here rather than in tests/unit.
"""

from __future__ import annotations

import datetime as dt
import io
import math
from decimal import Decimal
from typing import Any

import openpyxl
import pyarrow as pa
from openpyxl.cell.cell import Cell
from openpyxl.utils.escape import unescape
from openpyxl.worksheet.worksheet import Worksheet

from qexport.domain.reports import Display
from qexport.ports import WriterOptions
from qexport.reports.model import DocumentInfo, SectionData
from qexport.reports.xlsx import XlsxDocument
from qexport.writers.xlsx import XlsxFileWriter
from qexport.writers.xlsx_parts import MAX_SHEET_NAME

DIGITS_38 = Decimal("12345678901234567890123456789012345678")
HEADING_40 = "Q3: revenue/cost [draft]? *all* regions\\"  # 40 characters, 8 of them forbidden
COLUMNS: dict[str, pa.Array] = {
    "=text": pa.array(
        [
            "=1+1", "+cmd", "@x", "-2", "a\x1b[31m\x00b\x07", "_x0041_\r\n",
            "<r><t>rich</t></r>", "plain",
        ],
        pa.string(),
    ),
    "float": pa.array(
        [math.nan, math.inf, -math.inf, 0.1 + 0.2, 1e300, -2.5e-8, 5e-324, None], pa.float64()
    ),
    "real": pa.array([0.1, math.nan, 1.5, None, None, None, None, None], pa.float32()),
    "int": pa.array(
        [2**60, -(2**63), 2**53, -(2**53), 2**53 + 1, -5, 0, None], pa.int64()
    ),
    "unsigned": pa.array([2**64 - 1, 7, None, None, None, None, None, None], pa.uint64()),
    "digits": pa.array(
        [DIGITS_38, -DIGITS_38, Decimal(0), None, None, None, None, None], pa.decimal128(38, 0)
    ),
    "scaled": pa.array(
        [
            Decimal("1234567890123456789012345678.0123456789"),
            Decimal("-0.0000000001"),
            Decimal("0E-10"),
            None, None, None, None, None,
        ],
        pa.decimal128(38, 10),
    ),
    "day": pa.array(
        [
            dt.date(1850, 1, 1),
            dt.date(1900, 2, 28),
            dt.date(1900, 3, 1),
            dt.date(9999, 12, 31),
            dt.date(2024, 2, 29),
            None, None, None,
        ],
        pa.date32(),
    ),
    "moment": pa.array(
        [
            dt.datetime(2024, 7, 1, 10, 30, tzinfo=dt.UTC),
            dt.datetime(1899, 12, 31, 22, 0, tzinfo=dt.UTC),
            None, None, None, None, None, None,
        ],
        pa.timestamp("us", tz="Europe/Berlin"),
    ),
    "clock": pa.array([dt.time(13, 45, 30), None, None, None, None, None, None, None]),
    "flag": pa.array([True, False, None, None, None, None, None, None]),
    "blob": pa.array([b"\x00\xff", None, None, None, None, None, None, None], pa.binary()),
    "list": pa.array([[1, 2], None, None, None, None, None, None, None], pa.list_(pa.int64())),
}  # fmt: skip
BATCH = pa.record_batch(list(COLUMNS.values()), names=list(COLUMNS))


class _Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.data += data
        return len(data)


def _export() -> openpyxl.Workbook:
    sink = _Sink()
    XlsxFileWriter().write(BATCH.schema, iter([BATCH]), sink, WriterOptions())
    return openpyxl.load_workbook(io.BytesIO(bytes(sink.data)))


def _report(*headings: str) -> openpyxl.Workbook:
    sink = _Sink()
    info = DocumentInfo("Agree", "", "alice@example.com", dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
    rows = list(zip(*(column.to_pylist() for column in BATCH.columns), strict=True))
    document = XlsxDocument(info, sink)
    try:
        for heading in headings:
            document.add(
                SectionData(
                    heading, Display.TABLE, tuple(BATCH.schema.names), tuple(BATCH.schema.types),
                    rows, truncated=False,
                )
            )  # fmt: skip
        document.finish()
    finally:
        document.close()
    return openpyxl.load_workbook(io.BytesIO(bytes(sink.data)))


def _cell(cell: Cell) -> tuple[Any, ...]:
    """What a reader sees: the value (SpreadsheetML's `_xHHHH_` escapes decoded, as Excel and
    LibreOffice do), its type, its number format and whether it is marked as text."""
    value = unescape(cell.value) if isinstance(cell.value, str) else cell.value
    return value, cell.data_type, cell.number_format, bool(cell.quotePrefix)


def _cells(sheet: Worksheet) -> list[list[tuple[Any, ...]]]:
    return [[_cell(cell) for cell in row] for row in sheet.iter_rows()]


def test_both_writers_make_the_same_cells_of_awkward_values() -> None:
    """Every cell, header included, has the same value, type, number format and quote-prefix
    flag in an exported xlsx and in a report's."""
    exported = _cells(_export()["Sheet1"])
    reported = _cells(_report("Data")["Data"])
    assert len(exported) == len(reported) == 1 + BATCH.num_rows
    for number, (ours, theirs) in enumerate(zip(exported, reported, strict=True), start=1):
        assert ours == theirs, f"row {number}"


def test_awkward_values_are_the_cells_the_rules_say() -> None:
    """The shared rules, as read back: formula-like text stays text, quote-prefixed; NaN and
    infinities are their labels; integers beyond 2**53 are text; a 38-digit decimal keeps its
    digits; dates outside Excel's calendar are ISO text; an aware timestamp is its wall-clock
    time in its zone; control characters read back exactly."""
    for book, name in ((_export(), "Sheet1"), (_report("Data"), "Data")):
        sheet = book[name]
        assert _cell(sheet[1][0]) == ("=text", "s", "General", True)

        def at(header: str, row: int, sheet: Worksheet = sheet) -> tuple[Any, ...]:
            """The cell of column `header` in data row `row` (0-based)."""
            return _cell(sheet.cell(row + 2, list(COLUMNS).index(header) + 1))

        assert [at("=text", row)[::3] for row in range(4)] == [
            ("=1+1", True), ("+cmd", True), ("@x", True), ("-2", True)
        ]  # fmt: skip
        assert at("=text", 4)[:2] == ("a\x1b[31m\x00b\x07", "s")
        assert at("=text", 5)[:2] == ("_x0041_\r\n", "s")
        assert at("=text", 6)[:2] == ("<r><t>rich</t></r>", "s")
        assert [at("float", row)[:2] for row in range(3)] == [
            ("NaN", "s"), ("Infinity", "s"), ("-Infinity", "s")
        ]  # fmt: skip
        assert at("float", 3)[:2] == (0.1 + 0.2, "n")  # 17 digits, not XlsxWriter's 16
        assert at("real", 0)[:2] == (0.1, "n")  # the float32's own shortest text
        assert [at("int", row)[:2] for row in range(5)] == [
            (str(2**60), "s"), (str(-(2**63)), "s"), (2**53, "n"), (-(2**53), "n"),
            (str(2**53 + 1), "s"),
        ]  # fmt: skip
        assert at("unsigned", 0)[:2] == (str(2**64 - 1), "s")
        assert at("digits", 0)[:2] == (int(DIGITS_38), "n")
        assert at("scaled", 0)[:3] == (
            float("1234567890123456789012345678.0123456789"), "n", "0.0000000000"
        )  # fmt: skip
        assert at("day", 0)[:2] == ("1850-01-01", "s")
        assert at("day", 1)[:3] == (dt.datetime(1900, 2, 28), "d", "yyyy-mm-dd")
        assert at("day", 3)[0] == dt.datetime(9999, 12, 31)
        assert at("moment", 0)[:3] == (dt.datetime(2024, 7, 1, 12, 30), "d", "yyyy-mm-dd hh:mm:ss")
        assert at("moment", 1)[:2] == ("1899-12-31T23:00:00.000000+01:00", "s")
        assert at("clock", 0)[0] == dt.time(13, 45, 30)
        assert at("flag", 0)[:2] == (True, "b")
        assert at("blob", 0)[0] == "AP8="  # base64, as in every export format
        assert at("list", 0)[0] == "[1,2]"


def test_report_sheet_names_are_valid_and_unique() -> None:
    """A 40-character heading with characters Excel forbids becomes a name of at most 31
    characters without them; a reserved name and a repeated one get a number."""
    names = _report(HEADING_40, HEADING_40, "History", "history").sheetnames
    assert names == [
        "Q3- revenue-cost -draft-- -all-",
        "Q3- revenue-cost -draft-- - (2)",
        "History (2)",
        "history (3)",
    ]
    assert all(len(name) <= MAX_SHEET_NAME for name in names)
    assert not any(set(name) & set("[]:*?/\\") for name in names)
