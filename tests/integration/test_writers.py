"""The file writers, each read back with a real reader and compared row by row with DuckDB."""

from __future__ import annotations

import csv
import io
import json
import math
import threading
import zipfile
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import duckdb
import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from openpyxl.utils.escape import unescape

from qexport.domain.failures import InvalidRequestError, LimitExceededError
from qexport.domain.formats import QUERY_FORMATS as FORMATS
from qexport.ports import Writer, WriterOptions
from qexport.writers import xlsx as xlsx_writer
from qexport.writers.neutralize import looks_like_formula
from qexport.writers.parquet import ParquetFileWriter
from qexport.writers.registry import get_writer
from qexport.writers.xlsx import XlsxFileWriter

NEUTRAL = WriterOptions()
VERBATIM = WriterOptions(neutralize_formulas=False)
FORMULAS = ["=1+1", "+49 30", "-x", "@SUM(A1)", "\tfoo", "\rbar", "\nbaz"]
COLUMNS = ["id", "text", "big", "amount", "ratio", "flag", "day", "moment"]
SQL = "SELECT * FROM sample ORDER BY id"
# DOUBLE and REAL columns holding NaN, the infinities, a finite value and NULL.
NON_FINITE_SQL = (
    "SELECT d, r FROM (VALUES ('nan'::DOUBLE, 'nan'::REAL), ('inf', 'inf'), ('-inf', '-inf'),"
    " (1.25, 1.25), (NULL, NULL)) t(d, r)"
)
NON_FINITE_LABELS = ["NaN", "Infinity", "-Infinity"]

# id, text, big, amount DECIMAL(18,4), ratio, flag, day, moment (ms precision: Excel keeps ms)
ROWS: list[tuple[Any, ...]] = [
    (1, "plain", 1, Decimal("12345678901234.5678"), -1.5, True, date(2024, 2, 29),
     datetime(2024, 1, 2, 3, 4, 5, 678000)),
    (2, 'comma, "quoted"', -42, Decimal("-0.0001"), 0.1, False, date(1999, 12, 31),
     datetime(1999, 12, 31, 23, 59, 59)),
    (3, "line1\nline2", 9223372036854775807, Decimal("0"), 1e20, True, date(1900, 1, 15),
     datetime(1900, 3, 1, 12, 0)),
    (4, "cr\rhere", -9223372036854775808, Decimal("-99999999999999.9999"), 2.5e-8, None,
     date(1970, 1, 1), datetime(1970, 1, 1)),
    (5, "tab\there", None, None, None, None, None, None),
    (6, "😀 中文 café ñ", 0, Decimal("1.5"), 0.0, True, date(2000, 1, 1),
     datetime(2038, 1, 19, 3, 14, 7, 1000)),
    (7, "", -7, Decimal("-1"), -0.25, False, date(2024, 12, 31), datetime(2024, 12, 31, 23, 0)),
    (8, None, 8, Decimal("8"), 8.0, True, date(2008, 8, 8), datetime(2008, 8, 8, 8, 8, 8)),
    (9, "a & <b> > c", 9, Decimal("9.99"), 9.5, False, date(2009, 9, 9), datetime(2009, 9, 9)),
    *[
        (10 + i, text, -(10 + i), Decimal(f"-{10 + i}.5"), -(10.5 + i), i % 2 == 0,
         date(2010 + i, 1, 1), datetime(2010 + i, 6, 1, 12, 30))
        for i, text in enumerate(FORMULAS)
    ],
]  # fmt: skip


class MemorySink:
    """Collects what a writer emits, and how it was cut into writes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.writes: list[int] = []

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.data += data
        self.writes.append(len(memoryview(data).cast("B")))
        return len(self.writes)


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE sample (id INTEGER, text VARCHAR, big BIGINT, amount DECIMAL(18,4),"
        " ratio DOUBLE, flag BOOLEAN, day DATE, moment TIMESTAMP)"
    )
    con.executemany("INSERT INTO sample VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ROWS)
    yield con
    con.close()


@pytest.fixture(scope="module")
def expected(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return con.sql(SQL).fetchall()


def write(
    writer: Writer,
    con: duckdb.DuckDBPyConnection,
    sql: str = SQL,
    options: WriterOptions = NEUTRAL,
    batch_rows: int = 4,
) -> tuple[int, MemorySink]:
    cursor = con.cursor()  # its own result: a test that stops early leaves others unaffected
    reader = cursor.sql(sql).to_arrow_reader(batch_rows)
    sink = MemorySink()
    rows = writer.write(reader.schema, iter(reader), sink, options)
    cursor.close()
    return rows, sink


def shown(text: str | None, options: WriterOptions) -> str | None:
    """What a CSV cell holds for a string: quote-prefixed when it looks like a formula."""
    if text and options.neutralize_formulas and text[0] in "=+-@\t\r\n":
        return "'" + text
    return text


# ---------------------------------------------------------------- CSV and TSV


def read_delimited(data: bytes, delimiter: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline=""), delimiter=delimiter))


@pytest.mark.parametrize(("fmt", "delimiter"), [("csv", ","), ("tsv", "\t")])
@pytest.mark.parametrize("options", [NEUTRAL, VERBATIM], ids=["neutralized", "verbatim"])
def test_delimited_round_trip(
    con: duckdb.DuckDBPyConnection,
    expected: list[tuple[Any, ...]],
    fmt: str,
    delimiter: str,
    options: WriterOptions,
) -> None:
    """Every value reads back with the csv module as the text of the source value."""
    rows, sink = write(get_writer(fmt), con, options=options)
    records = read_delimited(bytes(sink.data), delimiter)
    assert rows == len(expected)
    assert records[0] == COLUMNS
    assert len(records) == len(expected) + 1
    for record, source in zip(records[1:], expected, strict=True):
        id_, text, big, amount, ratio, flag, day, moment = source
        assert record[0] == str(id_)
        assert record[1] == (shown(text, options) or "")
        assert record[2] == ("" if big is None else str(big))
        assert record[3] == ("" if amount is None else str(amount))
        assert (float(record[4]) if record[4] else None) == ratio
        assert record[5] == ("" if flag is None else str(flag).lower())
        assert record[6] == ("" if day is None else day.isoformat())
        assert (datetime.fromisoformat(record[7]) if record[7] else None) == moment


def test_csv_is_rfc4180_utf8_with_crlf(con: duckdb.DuckDBPyConnection) -> None:
    """CSV: UTF-8 without BOM, CRLF after every record, embedded quotes doubled."""
    _, sink = write(get_writer("csv"), con)
    data = bytes(sink.data)
    assert data.startswith(b'"id","text","big"')
    assert data.endswith(b"\r\n")
    assert b'"comma, ""quoted"""' in data
    assert "😀 中文 café ñ".encode() in data
    assert data.count(b"\r\n") >= len(ROWS) + 1


def test_tsv_uses_tabs_and_lf(con: duckdb.DuckDBPyConnection) -> None:
    """TSV: tab-delimited, LF line endings, tabs inside values quoted."""
    _, sink = write(get_writer("tsv"), con)
    data = bytes(sink.data)
    header, _ = data.split(b"\n", 1)
    assert header == b'"' + b'"\t"'.join(name.encode() for name in COLUMNS) + b'"'
    assert b'"tab\there"' in data
    assert data.endswith(b"\n")
    assert not data.endswith(b"\r\n")


def test_csv_null_is_empty_and_unquoted(con: duckdb.DuckDBPyConnection) -> None:
    """NULL is an empty unquoted field, distinct from an empty string (a quoted empty field)."""
    _, sink = write(get_writer("csv"), con, "SELECT NULL::VARCHAR a, ''::VARCHAR b, NULL::INT c")
    assert bytes(sink.data) == b'"a","b","c"\r\n,"",\r\n'


def test_csv_neutralizes_formula_strings_but_not_numbers(
    con: duckdb.DuckDBPyConnection,
) -> None:
    """Formula-looking strings get a leading quote by default; negative numbers never do."""
    _, sink = write(get_writer("csv"), con, "SELECT '-5' s, -5 n, -5.25::DECIMAL(5,2) d, -1e3 f")
    assert bytes(sink.data) == b'"s","n","d","f"\r\n"\'-5",-5,-5.25,-1000\r\n'


def test_csv_opt_out_writes_strings_exactly(con: duckdb.DuckDBPyConnection) -> None:
    """With neutralisation off, formula-looking strings are written exactly as they are."""
    _, sink = write(get_writer("csv"), con, "SELECT '=1+1' s, '@x' t", options=VERBATIM)
    assert bytes(sink.data) == b'"s","t"\r\n"=1+1","@x"\r\n'


def test_csv_neutralizes_formula_looking_column_names(con: duckdb.DuckDBPyConnection) -> None:
    """A header cell is a string cell too: a formula-looking column name is neutralised."""
    _, sink = write(get_writer("csv"), con, 'SELECT 1 AS "=cmd"')
    assert bytes(sink.data) == b'"\'=cmd"\r\n1\r\n'


def test_csv_aware_timestamps_carry_their_offset() -> None:
    """A TIMESTAMPTZ in CSV is wall-clock time in its zone with the offset: the same instant."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Europe/Berlin'")
    reader = con.sql("SELECT TIMESTAMPTZ '2024-07-01 10:00:00+00' t").to_arrow_reader(1)
    sink = MemorySink()
    get_writer("csv").write(reader.schema, iter(reader), sink, NEUTRAL)
    (value,) = read_delimited(bytes(sink.data), ",")[1]
    assert value == "2024-07-01 12:00:00.000000+02:00"
    assert datetime.fromisoformat(value) == datetime.fromisoformat("2024-07-01T10:00:00+00:00")


def test_csv_writes_nested_and_binary_values_as_text(con: duckdb.DuckDBPyConnection) -> None:
    """Values with no CSV form are text: lists and structs as JSON, binary as base64."""
    sql = "SELECT [1, 2] l, {'k': 'v'} s, '\\xFF\\x00'::BLOB b"
    _, sink = write(get_writer("csv"), con, sql)
    assert read_delimited(bytes(sink.data), ",")[1] == ["[1,2]", '{"k":"v"}', "/wA="]


# ---------------------------------------------------------------- JSON Lines


def read_jsonl(data: bytes) -> list[dict[str, Any]]:
    text = data.decode("utf-8")
    assert text == "" or text.endswith("\n")
    return [json.loads(line, parse_float=Decimal) for line in text.splitlines()]


def test_jsonl_round_trip(con: duckdb.DuckDBPyConnection, expected: list[tuple[Any, ...]]) -> None:
    """One object per row, keys in column order, every value exact (no neutralisation)."""
    rows, sink = write(get_writer("jsonl"), con)
    objects = read_jsonl(bytes(sink.data))
    assert rows == len(objects) == len(expected)
    for obj, source in zip(objects, expected, strict=True):
        assert list(obj) == COLUMNS
        id_, text, big, amount, ratio, flag, day, moment = source
        assert (obj["id"], obj["text"], obj["big"], obj["flag"]) == (id_, text, big, flag)
        assert obj["amount"] == amount  # parsed as Decimal: exact digits, no float detour
        assert (None if obj["ratio"] is None else float(obj["ratio"])) == ratio
        assert obj["day"] == (None if day is None else day.isoformat())
        assert (None if obj["moment"] is None else datetime.fromisoformat(obj["moment"])) == moment


def test_jsonl_writes_decimals_as_exact_numbers(con: duckdb.DuckDBPyConnection) -> None:
    """A DECIMAL is a JSON number with its exact decimal text, never rounded through a float."""
    _, sink = write(get_writer("jsonl"), con, "SELECT 12345678901234.5678::DECIMAL(18,4) amount")
    assert bytes(sink.data) == b'{"amount":12345678901234.5678}\n'


def test_jsonl_writes_non_finite_floats_as_strings(con: duckdb.DuckDBPyConnection) -> None:
    """NaN and infinities, which JSON has no number for, are the strings "NaN", "Infinity" and
    "-Infinity" in DOUBLE and REAL columns and inside lists; NULL stays null."""
    _, sink = write(get_writer("jsonl"), con, NON_FINITE_SQL)
    finite = Decimal("1.25")
    assert read_jsonl(bytes(sink.data)) == [
        *({"d": label, "r": label} for label in NON_FINITE_LABELS),
        {"d": finite, "r": finite},
        {"d": None, "r": None},
    ]
    _, sink = write(get_writer("jsonl"), con, "SELECT ['nan'::DOUBLE, 2.5, '-inf'] l")
    assert read_jsonl(bytes(sink.data)) == [{"l": ["NaN", Decimal("2.5"), "-Infinity"]}]


def test_jsonl_aware_timestamps_carry_their_offset() -> None:
    """A TIMESTAMPTZ is ISO 8601 wall-clock time in its zone, with the zone's offset."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Europe/Berlin'")
    reader = con.sql(
        "SELECT TIMESTAMPTZ '2024-07-01 10:00:00+00' summer, TIMESTAMPTZ '2024-01-01 10:00:00+00' w"
    ).to_arrow_reader(1)
    sink = MemorySink()
    get_writer("jsonl").write(reader.schema, iter(reader), sink, NEUTRAL)
    (obj,) = read_jsonl(bytes(sink.data))
    assert obj["summer"].startswith("2024-07-01T12:00:00")
    assert obj["summer"].endswith("+02:00")
    assert obj["w"].startswith("2024-01-01T11:00:00")
    assert obj["w"].endswith("+01:00")
    assert datetime.fromisoformat(obj["summer"]) == datetime.fromisoformat("2024-07-01T10:00Z")


def test_jsonl_nested_binary_and_escapes(con: duckdb.DuckDBPyConnection) -> None:
    """Lists, structs and maps are JSON; binary is base64; control characters are escaped."""
    sql = (
        "SELECT [1, NULL, 3] l, {'a': 'x', 'b': NULL, 'c': [true]} s, MAP {'k': 1.5} m,"
        " '\\xFF'::BLOB b, 'q\"\\' || chr(1) || chr(10) s2, []::INT[] e, NULL::INT[] n"
    )
    _, sink = write(get_writer("jsonl"), con, sql)
    (obj,) = read_jsonl(bytes(sink.data))
    assert obj == {
        "l": [1, None, 3],
        "s": {"a": "x", "b": None, "c": [True]},
        "m": {"k": Decimal("1.5")},
        "b": "/w==",
        "s2": 'q"\\\x01\n',
        "e": [],
        "n": None,
    }


# ---------------------------------------------------------------- Parquet


def test_parquet_round_trip_keeps_the_schema(
    con: duckdb.DuckDBPyConnection, expected: list[tuple[Any, ...]]
) -> None:
    """Parquet reads back with the exact Arrow schema (decimals, dates) and the same rows."""
    rows, sink = write(get_writer("parquet"), con)
    table = pq.read_table(io.BytesIO(bytes(sink.data)))
    assert rows == table.num_rows == len(expected)
    assert table.schema.remove_metadata() == con.sql(SQL).to_arrow_reader(4).schema
    assert table.schema.field("amount").type == pa.decimal128(18, 4)
    assert table.schema.field("day").type == pa.date32()
    assert [tuple(row.values()) for row in table.to_pylist()] == expected


def test_parquet_gathers_small_batches_into_row_groups(con: duckdb.DuckDBPyConnection) -> None:
    """Small source batches do not become tiny row groups; the row group size is respected."""
    sql = "SELECT i FROM range(1000) t(i)"
    _, sink = write(get_writer("parquet"), con, sql, batch_rows=10)
    assert pq.ParquetFile(io.BytesIO(bytes(sink.data))).metadata.num_row_groups == 1
    _, sink = write(ParquetFileWriter(row_group_rows=300), con, sql, batch_rows=10)
    metadata = pq.ParquetFile(io.BytesIO(bytes(sink.data))).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sum(sizes) == 1000
    assert max(sizes) <= 300
    assert len(sizes) <= 5


def test_parquet_writes_intervals_as_text(con: duckdb.DuckDBPyConnection) -> None:
    """Parquet has no Arrow interval type: intervals are ISO 8601 durations instead of an error."""
    _, sink = write(get_writer("parquet"), con, "SELECT INTERVAL '1 month 2 days 3 seconds' iv")
    assert pq.read_table(io.BytesIO(bytes(sink.data))).to_pylist() == [{"iv": "P1M2DT3S"}]


# ---------------------------------------------------------------- XLSX


def open_xlsx(data: bytes) -> openpyxl.Workbook:
    return openpyxl.load_workbook(io.BytesIO(data))


def sheet_xml(data: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return "".join(
            archive.read(name).decode()
            for name in archive.namelist()
            if name.startswith("xl/worksheets/")
        )


@pytest.mark.parametrize("options", [NEUTRAL, VERBATIM], ids=["neutralized", "verbatim"])
def test_xlsx_round_trip_with_typed_cells(
    con: duckdb.DuckDBPyConnection, expected: list[tuple[Any, ...]], options: WriterOptions
) -> None:
    """openpyxl reads typed cells back: numbers as numbers (integers beyond ±2**53 as their
    text), dates as dates, strings exact."""
    rows, sink = write(get_writer("xlsx"), con, options=options)
    sheet = open_xlsx(bytes(sink.data))["Sheet1"]
    values = list(sheet.iter_rows())
    assert rows == len(expected) == len(values) - 1
    assert [cell.value for cell in values[0]] == COLUMNS
    for cells, source in zip(values[1:], expected, strict=True):
        id_, text, big, amount, ratio, flag, day, moment = source
        got = dict(zip(COLUMNS, cells, strict=True))
        assert got["id"].value == id_
        assert got["id"].data_type == "n"
        assert got["text"].value == text
        assert got["text"].quotePrefix is (options.neutralize_formulas and text in FORMULAS)
        # Beyond ±2**53 an integer is its text: a spreadsheet number would lose digits.
        exact = big is None or abs(big) <= 2**53
        assert got["big"].value == (big if exact else str(big))
        assert got["big"].data_type == ("n" if exact else "s")
        assert got["big"].quotePrefix is (not exact and options.neutralize_formulas and big < 0)
        assert got["amount"].value == (None if amount is None else float(amount))
        assert got["ratio"].value == ratio
        assert got["flag"].value is flag
        assert (None if day is None else got["day"].value.date()) == day
        assert got["moment"].value == moment
        for name in ("amount", "ratio", "day", "moment"):
            assert got[name].value is None or got[name].data_type in {"n", "d"}
            assert not got[name].quotePrefix


def test_xlsx_keeps_decimal_text_exact(con: duckdb.DuckDBPyConnection) -> None:
    """A DECIMAL cell holds its exact decimal text, which a float would have corrupted."""
    _, sink = write(get_writer("xlsx"), con)
    xml = sheet_xml(bytes(sink.data))
    assert "<v>12345678901234.5678</v>" in xml
    assert "<v>-99999999999999.9999</v>" in xml


def test_xlsx_never_writes_formulas(con: duckdb.DuckDBPyConnection) -> None:
    """Strings are always string cells, never formulas, with or without neutralisation."""
    for options in (NEUTRAL, VERBATIM):
        _, sink = write(get_writer("xlsx"), con, options=options)
        data = bytes(sink.data)
        assert "<f" not in sheet_xml(data)
        sheet = open_xlsx(data)["Sheet1"]
        assert all(cell.data_type != "f" for row in sheet.iter_rows() for cell in row)


def test_xlsx_negative_numbers_are_untouched(con: duckdb.DuckDBPyConnection) -> None:
    """Negative numbers stay numbers without a quote prefix; only the string '-5' gets one."""
    _, sink = write(get_writer("xlsx"), con, "SELECT -5 n, -5.25::DECIMAL(5,2) d, '-5' s")
    n, d, s = next(open_xlsx(bytes(sink.data))["Sheet1"].iter_rows(min_row=2))
    assert (n.value, n.data_type, n.quotePrefix) == (-5, "n", False)
    assert (d.value, d.data_type, d.quotePrefix) == (-5.25, "n", False)
    assert (s.value, s.data_type, s.quotePrefix) == ("-5", "s", True)


def test_xlsx_header_is_frozen_and_bold(con: duckdb.DuckDBPyConnection) -> None:
    """The header row is frozen (panes at A2) and bold."""
    _, sink = write(get_writer("xlsx"), con)
    sheet = open_xlsx(bytes(sink.data))["Sheet1"]
    assert sheet.freeze_panes == "A2"
    assert all(cell.font.b for cell in sheet[1])


def test_xlsx_dates_outside_excel_calendar_are_iso_text(con: duckdb.DuckDBPyConnection) -> None:
    """Excel has no serial for dates before 1900: those are written as ISO text."""
    sql = "SELECT DATE '1850-06-01' d, TIMESTAMP '1899-12-31 23:00:00' t, DATE '1900-01-01' f"
    _, sink = write(get_writer("xlsx"), con, sql)
    d, t, f = next(open_xlsx(bytes(sink.data))["Sheet1"].iter_rows(min_row=2))
    assert (d.value, t.value) == ("1850-06-01", "1899-12-31T23:00:00.000000")
    assert f.value == datetime(1900, 1, 1)


# Every C0 control alone and together, text that looks like SpreadsheetML's `_xHHHH_` escapes
# (alone, sharing an underscore, meeting an escaped control), markup, rich-text lookalikes,
# the XML non-characters, and controls after a formula start (TAB, CR, LF) or before one.
EXACT_TEXTS = [
    "a\x1b[31mred",
    *(f"<{chr(code)}>" for code in range(32)),
    "".join(chr(code) for code in range(32)),
    "_x0041_",
    "_x0041_x0042_",
    "_x0041\x1b",
    "_x005F_",
    "__x00e9_ _xZZZZ_ _x12",
    "a&b<c>d\"'",
    "<r><t>rich</t></r>",
    "\ufffe\uffff",
    "\t\x07",
    "\r\x1b=1",
    "\n_x0041_",
    "\x1b=1",
    "plain",
]


def xlsx_text(cell: Any) -> str | None:
    """The string a cell holds: openpyxl gives the stored text, still carrying SpreadsheetML's
    `_xHHHH_` escapes, which Excel and LibreOffice decode (as openpyxl's `unescape` does)."""
    return None if cell.value is None else unescape(cell.value)


def test_xlsx_stores_every_string_exactly(con: duckdb.DuckDBPyConnection) -> None:
    """Control characters (ESC, BS, BEL, every C0 one), markup, and text that looks like an
    `_xHHHH_` escape read back exactly, in cells and in the header; formula-looking text is
    quote-prefixed, a control before `=` is not formula-looking."""
    batch = pa.record_batch([pa.array(EXACT_TEXTS, pa.string())], names=["h\x1b_x0041_\x07"])
    sink = MemorySink()
    XlsxFileWriter().write(batch.schema, iter([batch]), sink, NEUTRAL)
    sheet = open_xlsx(bytes(sink.data))["Sheet1"]
    assert xlsx_text(sheet["A1"]) == "h\x1b_x0041_\x07"
    cells = [row[0] for row in sheet.iter_rows(min_row=2)]
    assert [xlsx_text(cell) for cell in cells] == EXACT_TEXTS
    assert [cell.quotePrefix for cell in cells] == [looks_like_formula(t) for t in EXACT_TEXTS]
    _, sink = write(get_writer("xlsx"), con, "SELECT 'a' || chr(27) || '[31mred' s")
    (cell,) = next(open_xlsx(bytes(sink.data))["Sheet1"].iter_rows(min_row=2))
    assert xlsx_text(cell) == "a\x1b[31mred"
    assert "a_x001B_[31mred" in sheet_xml(bytes(sink.data))


@pytest.mark.parametrize("options", [NEUTRAL, VERBATIM], ids=["neutralized", "verbatim"])
def test_xlsx_writes_non_finite_floats_as_text(
    con: duckdb.DuckDBPyConnection, options: WriterOptions
) -> None:
    """NaN and infinities are the text cells "NaN", "Infinity" and "-Infinity" in DOUBLE and REAL
    columns, other values stay numbers; "-Infinity" is quote-prefixed when neutralising, like
    any text that starts with "-"."""
    _, sink = write(get_writer("xlsx"), con, NON_FINITE_SQL, options)
    rows = list(open_xlsx(bytes(sink.data))["Sheet1"].iter_rows(min_row=2))
    for label, row in zip(NON_FINITE_LABELS, rows, strict=False):
        for cell in row:
            assert (cell.value, cell.data_type) == (label, "s")
            assert cell.quotePrefix == (options.neutralize_formulas and label == "-Infinity")
    assert [(cell.value, cell.data_type) for cell in rows[3]] == [(1.25, "n"), (1.25, "n")]
    assert len(rows) == 4  # the all-NULL row has no cells: openpyxl sees no fifth row


def test_csv_tsv_and_parquet_keep_non_finite_floats(con: duckdb.DuckDBPyConnection) -> None:
    """csv and tsv write NaN and infinities as `nan`, `inf`, `-inf` (never quoted nor
    neutralised); parquet keeps them as floats."""
    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        _, sink = write(get_writer(fmt), con, NON_FINITE_SQL)
        assert read_delimited(bytes(sink.data), delimiter) == [
            ["d", "r"],
            ["nan", "nan"],
            ["inf", "inf"],
            ["-inf", "-inf"],
            ["1.25", "1.25"],
            ["", ""],
        ]
    _, sink = write(get_writer("parquet"), con, NON_FINITE_SQL)
    table = pq.read_table(io.BytesIO(bytes(sink.data)))
    assert table.schema.types == [pa.float64(), pa.float32()]
    for column in table.columns:
        values = column.to_pylist()
        assert math.isnan(values[0])
        assert values[1:] == [math.inf, -math.inf, 1.25, None]


def test_xlsx_rolls_over_to_new_sheets(
    con: duckdb.DuckDBPyConnection, expected: list[tuple[Any, ...]]
) -> None:
    """Past the per-sheet row limit rows go on Sheet2, Sheet3..., each with the header row."""
    rows, sink = write(XlsxFileWriter(rows_per_sheet=5), con)
    book = open_xlsx(bytes(sink.data))
    assert book.sheetnames == ["Sheet1", "Sheet2", "Sheet3", "Sheet4"]
    ids: list[int] = []
    for sheet in book.worksheets:
        assert [cell.value for cell in sheet[1]] == COLUMNS
        assert sheet.freeze_panes == "A2"
        ids += [row[0] for row in sheet.iter_rows(min_row=2, values_only=True)]
    assert [len(list(sheet.iter_rows(min_row=2))) for sheet in book.worksheets] == [5, 5, 5, 1]
    assert ids == [row[0] for row in expected]
    assert rows == len(expected)


def test_xlsx_exactly_full_sheet_adds_no_empty_sheet(con: duckdb.DuckDBPyConnection) -> None:
    """A result that exactly fills its sheets makes no extra, empty sheet."""
    _, sink = write(
        XlsxFileWriter(rows_per_sheet=4), con, "SELECT i FROM range(8) t(i)", batch_rows=3
    )
    book = open_xlsx(bytes(sink.data))
    assert book.sheetnames == ["Sheet1", "Sheet2"]
    assert [r[0] for r in book["Sheet2"].iter_rows(values_only=True)] == ["i", 4, 5, 6, 7]


# ---------------------------------------------------------------- every format


EMPTY_SQL = "SELECT * FROM sample WHERE id < 0"


def test_empty_result_writes_only_the_header(con: duckdb.DuckDBPyConnection) -> None:
    """An empty result is a valid file: a header row for CSV, TSV and XLSX, nothing for JSONL."""
    results = {fmt: write(get_writer(fmt), con, EMPTY_SQL) for fmt in FORMATS}
    assert all(rows == 0 for rows, _ in results.values())
    header = ",".join(f'"{name}"' for name in COLUMNS).encode()
    assert bytes(results["csv"][1].data) == header + b"\r\n"
    assert bytes(results["tsv"][1].data) == header.replace(b",", b"\t") + b"\n"
    assert bytes(results["jsonl"][1].data) == b""
    table = pq.read_table(io.BytesIO(bytes(results["parquet"][1].data)))
    assert (table.num_rows, table.column_names) == (0, COLUMNS)
    sheet = open_xlsx(bytes(results["xlsx"][1].data))["Sheet1"]
    assert [[cell.value for cell in row] for row in sheet.iter_rows()] == [COLUMNS]


@pytest.mark.parametrize("fmt", FORMATS)
def test_large_results_reach_the_sink_in_large_chunks(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    """Output is handed over in chunks of at least 1 MiB (but the last), never row by row."""
    sql = "SELECT i, 'row number ' || i AS label, i / 3 AS third FROM range(300000) t(i)"
    rows, sink = write(get_writer(fmt), con, sql, batch_rows=2048)
    assert rows == 300_000
    assert len(sink.writes) >= 2
    assert min(sink.writes[:-1]) >= 1024 * 1024


@pytest.mark.parametrize("fmt", FORMATS)
def test_source_errors_propagate_unchanged(con: duckdb.DuckDBPyConnection, fmt: str) -> None:
    """A failing source surfaces its own error, and no reader thread is left behind."""
    reader = con.cursor().sql("SELECT i FROM range(10) t(i)").to_arrow_reader(5)

    def failing() -> Iterator[pa.RecordBatch]:
        yield reader.read_next_batch()
        raise LimitExceededError("the result has more than 5 rows")

    with pytest.raises(LimitExceededError, match="more than 5 rows"):
        get_writer(fmt).write(reader.schema, failing(), MemorySink(), NEUTRAL)
    assert not [t for t in threading.enumerate() if t.name.startswith("qexport-")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_sink_errors_propagate_unchanged(con: duckdb.DuckDBPyConnection, fmt: str) -> None:
    """An error raised by the sink (a byte limit) stops the writer and is the error raised."""

    class FullSink:
        def write(self, data: bytes | bytearray | memoryview, /) -> int:
            raise LimitExceededError("the file grew past the byte limit")

    reader = con.cursor().sql("SELECT i FROM range(300000) t(i)").to_arrow_reader(1000)
    with pytest.raises(LimitExceededError, match="byte limit"):
        get_writer(fmt).write(reader.schema, iter(reader), FullSink(), NEUTRAL)


def unusual_types() -> pa.RecordBatch:
    """Arrow types DuckDB rarely sends but other sources (PostgreSQL via ADBC) may."""
    columns = {
        "time32": pa.array([time(1, 2, 3), None], pa.time32("s")),
        "date64": pa.array([date(2020, 1, 2), None], pa.date64()),
        "half": pa.array([1.5, None], pa.float32()).cast(pa.float16()),
        "large": pa.array(["=a", None], pa.large_string()),
        "view": pa.array(["-b", None], pa.string_view()),
        "enum": pa.array(["@x", None]).dictionary_encode(),
        "blob": pa.array([b"\x00\x01", None], pa.large_binary()),
        "dec256": pa.array([Decimal("1.23"), None], pa.decimal256(40, 2)),
        "u64": pa.array([2**64 - 1, None], pa.uint64()),
        "span": pa.array([timedelta(seconds=90), None], pa.duration("us")),
        "pair": pa.array([[1, 2], None], pa.list_(pa.int64(), 2)),
        "nothing": pa.nulls(2),
        "nanos": pa.array([1_600_000_000_123_456_789, None], pa.timestamp("ns")),
        "fixed": pa.array([datetime(2020, 1, 2, 3, 4, 5), None], pa.timestamp("us", tz="+05:30")),
    }
    return pa.record_batch(list(columns.values()), names=list(columns))


def test_unusual_arrow_types_are_written_by_every_writer() -> None:
    """Every writer handles the wider Arrow type zoo and the files read back."""
    batch = unusual_types()
    for fmt in FORMATS:
        sink = MemorySink()
        assert get_writer(fmt).write(batch.schema, iter([batch]), sink, NEUTRAL) == 2
        data = bytes(sink.data)
        if fmt in {"csv", "tsv"}:
            first = read_delimited(data, "," if fmt == "csv" else "\t")[1]
            assert first[3:6] == ["'=a", "'-b", "'@x"]
            assert first[9:11] == ["PT90S", "[1,2]"]
        elif fmt == "jsonl":
            assert read_jsonl(data)[0]["fixed"] == "2020-01-02T08:34:05.000000+05:30"
        elif fmt == "parquet":
            assert pq.read_table(io.BytesIO(data)).num_rows == 2
        else:
            row = [cell.value for cell in open_xlsx(data)["Sheet1"][2]]
            assert row[:3] == [time(1, 2, 3), datetime(2020, 1, 2), 1.5]
            assert row[-1] == datetime(2020, 1, 2, 8, 34, 5)


def _with_amount(value: Decimal) -> pa.RecordBatch:
    """The type zoo, texts that need quoting, and a DECIMAL(38,10) of `value` and NULL."""
    batch = unusual_types()
    extra = {
        "texts": pa.array(['comma, "quoted"\r\nnewline\ttab', ""], pa.string()),
        "flag": pa.array([True, None]),
        "whole": pa.array([-7, None], pa.int8()),
        "ratio": pa.array([-1e-20, None], pa.float64()),
        "micros": pa.array([time(1, 2, 3, 4), None], pa.time64("us")),
        "at": pa.array([datetime(2024, 2, 29, 23, 59, 59, 999999), None], pa.timestamp("us")),
        "price": pa.array([Decimal("-0.01"), None], pa.decimal128(10, 2)),
        "amount": pa.array([value, None], pa.decimal128(38, 10)),
    }
    return pa.record_batch([*batch.columns, *extra.values()], names=[*batch.schema.names, *extra])


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
@pytest.mark.parametrize("options", [NEUTRAL, VERBATIM], ids=["neutralized", "verbatim"])
def test_rows_with_a_tiny_decimal_are_pyarrows_bytes_with_the_decimal_plain(
    fmt: str, options: WriterOptions
) -> None:
    """A batch whose DECIMAL(38,10) holds a value pyarrow would print as `0E-10` is encoded
    by qexport's own rows: every other value is the bytes pyarrow's encoder writes (the same
    batch holding 1.5 goes through pyarrow), and the decimal is `0.0000000000`."""
    written = {}
    for value in (Decimal("1.5"), Decimal("0")):
        batch = _with_amount(value)
        sink = MemorySink()
        assert get_writer(fmt).write(batch.schema, iter([batch]), sink, options) == 2
        written[value] = bytes(sink.data)
    assert b"E-10" not in written[Decimal("0")]
    assert written[Decimal("0")] == written[Decimal("1.5")].replace(
        b"1.5000000000", b"0.0000000000"
    )


def test_every_text_format_writes_decimals_in_plain_notation() -> None:
    """csv, tsv and jsonl write the decimals Arrow prints with an exponent (`1E-10`, `0E-10`,
    a negative scale's `1.23E+4`) as DuckDB does, with the column's scale; xlsx keeps them
    numbers."""
    batch = pa.record_batch(
        [
            pa.array([Decimal(v) for v in ("1E-10", "-1E-10", "0")], pa.decimal128(38, 10)),
            pa.array([Decimal(v) for v in ("12300", "0", "-100")], pa.decimal128(5, -2)),
        ],
        names=["small", "hundreds"],
    )
    plain = [("0.0000000001", "12300"), ("-0.0000000001", "0"), ("0.0000000000", "-100")]
    for fmt in ("csv", "tsv"):
        sink = MemorySink()
        get_writer(fmt).write(batch.schema, iter([batch]), sink, NEUTRAL)
        rows = read_delimited(bytes(sink.data), "," if fmt == "csv" else "\t")[1:]
        assert [tuple(row) for row in rows] == plain
        assert b'"0.' not in sink.data  # numbers, not quoted text
    sink = MemorySink()
    get_writer("jsonl").write(batch.schema, iter([batch]), sink, NEUTRAL)
    assert bytes(sink.data).decode().splitlines() == [
        f'{{"small":{small},"hundreds":{hundreds}}}' for small, hundreds in plain
    ]
    sink = MemorySink()
    get_writer("xlsx").write(batch.schema, iter([batch]), sink, NEUTRAL)
    cells = [[c.value for c in row] for row in open_xlsx(bytes(sink.data))["Sheet1"]][1:]
    assert cells == [[1e-10, 12300], [-1e-10, 0], [0, -100]]


# ---------------------------------------------------------------- registry


def test_registry_knows_the_five_formats() -> None:
    """The registry offers csv, tsv, jsonl, parquet and xlsx, each with its own extension."""
    assert FORMATS == ("csv", "tsv", "jsonl", "parquet", "xlsx")
    assert [get_writer(fmt).extension for fmt in FORMATS] == list(FORMATS)


def test_registry_refuses_unknown_formats() -> None:
    """An unknown format is an invalid request on `format`, naming it and the valid ones."""
    with pytest.raises(InvalidRequestError) as refused:
        get_writer("xls")
    assert refused.value.field == "format"
    message = str(refused.value)
    assert "'xls'" in message
    assert all(fmt in message for fmt in FORMATS)


def test_xlsx_rolls_over_when_a_sheet_reaches_its_byte_budget(
    con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sheet also ends at its XML byte budget (zip entries stay under 4 GiB): no row lost."""
    monkeypatch.setattr(xlsx_writer, "task_rows", lambda schema: 500)  # many small tasks
    sql = "SELECT i FROM range(10000) t(i)"
    rows, sink = write(XlsxFileWriter(sheet_bytes=1), con, sql, batch_rows=1000)
    book = open_xlsx(bytes(sink.data))
    assert len(book.sheetnames) > 1
    ids: list[int] = []
    for sheet in book.worksheets:
        values = [row[0] for row in sheet.iter_rows(values_only=True)]
        assert values[0] == "i"
        ids += values[1:]
    assert ids == list(range(10_000))
    assert rows == 10_000
