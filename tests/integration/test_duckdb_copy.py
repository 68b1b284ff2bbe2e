"""DuckDB's own writers through a pipe: the same file contract as the Arrow writers."""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import threading
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import LimitExceededError, QueryInvalidError, QueryTimeoutError
from qexport.sources.duckdb.copy import has_order_by
from qexport.sources.duckdb.source import DuckDBSource

ALICE = Requester("alice", "w1")
VALUES = [
    (1, "plain", Decimal("12345678901234.5678"), dt.date(2024, 2, 29), -5, True),
    (2, "=1+1", Decimal("-0.0001"), None, -1, False),
    (3, "+49 30 1234", None, dt.date(1999, 12, 31), 0, None),
    (4, "-x", Decimal("1.0000"), dt.date(2024, 1, 1), 7, True),
    (5, "@SUM(A1)", Decimal("2.0000"), dt.date(2024, 1, 1), 7, True),
    (6, "\tfoo", Decimal("3.0000"), dt.date(2024, 1, 1), 7, True),
    (7, "\rbar", Decimal("4.0000"), dt.date(2024, 1, 1), 7, True),
    (8, "\nbaz", Decimal("5.0000"), dt.date(2024, 1, 1), 7, True),
    (9, 'comma, "quote"\nnewline\r\nand tab\t', Decimal("6.0000"), dt.date(2024, 1, 1), 7, True),
    (10, "日本語 🚚 Grüße", Decimal("7.0000"), dt.date(2024, 1, 1), 7, True),
    (11, "", Decimal("8.0000"), dt.date(2024, 1, 1), 7, True),
    (12, None, Decimal("9.0000"), dt.date(2024, 1, 1), 7, True),
]
FORMULA_TEXT = {"=1+1", "+49 30 1234", "-x", "@SUM(A1)", "\tfoo", "\rbar", "\nbaz"}
SQL = 'SELECT id, s AS "=name", amount, day, n, flag FROM t ORDER BY id'


class MemorySink:
    def __init__(self, fail_after: int | None = None) -> None:
        self.buffer = io.BytesIO()
        self.fail_after = fail_after

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.buffer.write(data)
        if self.fail_after is not None and self.buffer.tell() > self.fail_after:
            raise LimitExceededError("byte limit")
        return len(data)


@pytest.fixture(scope="module")
def copy_source(tmp_path_factory: pytest.TempPathFactory) -> DuckDBSource:
    path = tmp_path_factory.mktemp("copy") / "data.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE t (id INTEGER, s VARCHAR, amount DECIMAL(18,4), day DATE, n INTEGER,"
        " flag BOOLEAN)"
    )
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", VALUES)
    con.execute("CREATE TABLE big AS SELECT i FROM range(3000000) r(i)")
    con.execute("CREATE TYPE mood AS ENUM ('=SUM(1)', 'ok')")
    con.execute("CREATE TABLE moods AS SELECT unnest(['=SUM(1)', 'ok'])::mood AS m")
    con.close()
    return DuckDBSource("data", path)


def _copy(source: DuckDBSource, fmt: str, *, neutralize: bool = True, sql: str = SQL) -> bytes:
    sink = MemorySink()
    rows = source.copy(
        sql,
        {},
        ALICE,
        fmt=fmt,
        neutralize_formulas=neutralize,
        sink=sink,
        timeout_seconds=30,
        max_rows=10**9,
    )
    assert rows == (len(VALUES) if sql == SQL else rows)
    return sink.buffer.getvalue()


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@pytest.mark.parametrize(("fmt", "delimiter", "eol"), [("csv", ",", b"\r\n"), ("tsv", "\t", b"\n")])
def test_text_formats_match_the_query_and_neutralise(
    copy_source: DuckDBSource, fmt: str, delimiter: str, eol: bytes
) -> None:
    """Read back with the csv module: every cell equals the query's, formula-looking strings
    (and the header) carry a leading quote, numbers are untouched, NULL is an empty field."""
    data = _copy(copy_source, fmt)
    header = delimiter.join(["id", "'=name", "amount", "day", "n", "flag"]).encode() + eol
    assert data.startswith(header)
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline=""), delimiter=delimiter))
    assert rows[0] == ["id", "'=name", "amount", "day", "n", "flag"]
    assert len(rows) == len(VALUES) + 1
    for got, want in zip(rows[1:], VALUES, strict=True):
        s = want[1]
        expected_s = "'" + s if s in FORMULA_TEXT else _text(s)
        assert got == [
            _text(want[0]),
            expected_s,
            _text(want[2]),
            _text(want[3]),
            _text(want[4]),
            _text(want[5]),
        ]
    # NULL is an empty unquoted field, an empty string is "".
    assert f'{delimiter}""{delimiter}'.encode() in data


def test_opting_out_keeps_strings_exact(copy_source: DuckDBSource) -> None:
    """Without neutralisation every string is written exactly as stored."""
    rows = list(
        csv.reader(io.StringIO(_copy(copy_source, "csv", neutralize=False).decode(), newline=""))
    )
    assert rows[0][1] == "=name"
    assert [r[1] for r in rows[1:]] == [_text(v[1]) for v in VALUES]


NON_FINITE_SQL = (
    "SELECT d, r FROM (VALUES ('nan'::DOUBLE, 'nan'::REAL), ('inf', 'inf'), ('-inf', '-inf'),"
    " (1.25, 1.25), (NULL, NULL)) t(d, r)"
)


def test_non_finite_floats_keep_duckdbs_text_and_parquet_floats(copy_source: DuckDBSource) -> None:
    """DuckDB's csv and tsv write NaN and infinities as `nan`, `inf`, `-inf` (the same text as
    the Arrow csv writer, never neutralised); its parquet keeps them as floats."""
    for fmt, delimiter in (("csv", ","), ("tsv", "\t")):
        data = _copy(copy_source, fmt, sql=NON_FINITE_SQL).decode()
        rows = list(csv.reader(io.StringIO(data, newline=""), delimiter=delimiter))
        assert rows == [
            ["d", "r"],
            ["nan", "nan"],
            ["inf", "inf"],
            ["-inf", "-inf"],
            ["1.25", "1.25"],
            ["", ""],
        ]
    table = pq.read_table(io.BytesIO(_copy(copy_source, "parquet", sql=NON_FINITE_SQL)))
    for column in table.columns:
        values = column.to_pylist()
        assert math.isnan(values[0])
        assert values[1:] == [math.inf, -math.inf, 1.25, None]


def test_parquet_keeps_types_and_values_exactly(copy_source: DuckDBSource) -> None:
    """Parquet read back with pyarrow: decimals, dates, NULLs and strings exact, unneutralised."""
    table = pq.read_table(io.BytesIO(_copy(copy_source, "parquet")))
    assert table.column_names == ["id", "=name", "amount", "day", "n", "flag"]
    assert [tuple(r.values()) for r in table.to_pylist()] == VALUES
    assert str(table.schema.field("amount").type) == "decimal128(18, 4)"


def test_parquet_keeps_the_order_by_of_a_large_result(copy_source: DuckDBSource) -> None:
    """DuckDB encodes row groups on several threads, yet a query's ORDER BY holds across all
    3 million rows of the file; without ORDER BY every row is there exactly once."""
    ordered = pq.read_table(
        io.BytesIO(
            _copy(copy_source, "parquet", sql="SELECT i FROM big ORDER BY (i * 7919) % 3000017")
        )
    )
    keys = [(i * 7919) % 3000017 for i in ordered.column("i").to_pylist()]
    assert len(keys) == 3_000_000
    assert keys == sorted(keys)
    unordered = pq.read_table(io.BytesIO(_copy(copy_source, "parquet", sql=BIG)))
    assert sorted(unordered.column("i").to_pylist()) == list(range(3_000_000))


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT * FROM t", False),
        ("SELECT * FROM t WHERE n = $n", False),
        ("SELECT n, count(*) FROM t GROUP BY n", False),
        ("SELECT row_number() OVER (ORDER BY id) AS r FROM t", False),
        ("SELECT * FROM t ORDER BY id", True),
        ("SELECT * FROM (SELECT * FROM t ORDER BY id) AS s", True),
        ("WITH s AS (SELECT * FROM t ORDER BY 1 LIMIT 3) SELECT * FROM s", True),
        ("SELECT string_agg(s ORDER BY id) FROM t", True),
        ("SELECT * FROM t -- ORDER BY id", False),
        ("SELECT 'ORDER BY' AS words", False),
    ],
)
def test_order_by_is_found_wherever_it_is(sql: str, ordered: bool) -> None:
    """Parquet keeps row order exactly when the statement has an ORDER BY anywhere; comments
    and strings that merely say ORDER BY do not count."""
    with duckdb.connect() as con:
        assert has_order_by(con, sql) is ordered


def test_a_failing_sink_stops_the_copy(copy_source: DuckDBSource) -> None:
    """An error in the sink (byte limit, lost lease) ends the COPY and is the error raised."""
    sink = MemorySink(fail_after=100_000)
    with pytest.raises(LimitExceededError):
        copy_source.copy(
            "SELECT i FROM big",
            {},
            ALICE,
            fmt="csv",
            neutralize_formulas=True,
            sink=sink,
            timeout_seconds=30,
            max_rows=10**9,
        )
    assert not [t for t in threading.enumerate() if t.name == "qexport-copy-pipe"]


def test_row_limit_and_errors_are_translated(copy_source: DuckDBSource) -> None:
    """Row limit -> limit_exceeded; bad SQL -> query_invalid; too slow -> query_timeout."""

    def run(sql: str, **kw: object) -> int:
        args = {
            "fmt": "csv",
            "neutralize_formulas": True,
            "sink": MemorySink(),
            "timeout_seconds": 30,
            "max_rows": 10**9,
            **kw,
        }
        return copy_source.copy(sql, {}, ALICE, **args)  # type: ignore[arg-type]

    with pytest.raises(LimitExceededError):
        run("SELECT i FROM big", max_rows=1000)
    with pytest.raises(QueryInvalidError, match=r"(?i)syntax"):
        run("SELEC 1")
    with pytest.raises(QueryInvalidError):
        run("COPY t TO '/tmp/qexport-copy-escape.csv'")
    with pytest.raises(QueryTimeoutError):
        run("SELECT count(*) FROM range(100000000000) a", timeout_seconds=0.3)
    assert not Path("/tmp/qexport-copy-escape.csv").exists()  # noqa: S108 - the path it tried


def test_the_requester_context_is_bound(copy_source: DuckDBSource) -> None:
    """$user_id and $workspace_id reach the query through the pipe path too."""
    data = _copy(copy_source, "csv", sql="SELECT $user_id AS u, $workspace_id AS w")
    assert data == b"u,w\r\nalice,w1\r\n"


def test_enum_strings_are_neutralised_too(copy_source: DuckDBSource) -> None:
    """An ENUM is text in the file, so its formula-looking values are neutralised as well."""
    data = _copy(copy_source, "csv", sql="SELECT m FROM moods ORDER BY m")
    assert data == b"m\r\n'=SUM(1)\r\nok\r\n"


BIG = "SELECT i FROM big ORDER BY i"


class StealingSink(MemorySink):
    """On its first write, while COPY still writes into its named pipe, another query on the
    same source tries to list the pipes folder and to read that pipe."""

    def __init__(self, source: DuckDBSource) -> None:
        super().__init__()
        self.source = source
        self.pipes: list[Path] = []
        self.refusals: list[str] = []
        self.were_fifos = False

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        if not self.pipes:
            root = self.source.scratch_root
            assert root is not None
            self.pipes = sorted((root / "pipes").iterdir())
            self.were_fifos = all(pipe.is_fifo() for pipe in self.pipes)
            for pipe in self.pipes:
                for sql in (
                    f"SELECT * FROM glob('{pipe.parent}/*')",
                    f"SELECT * FROM read_blob('{pipe}')",
                    f"SELECT * FROM read_csv('{pipe}')",
                    f"SELECT * FROM '{pipe}'",
                ):
                    try:
                        self.source.execute(sql, {}, ALICE, timeout_seconds=5).close()
                    except QueryInvalidError as exc:
                        self.refusals.append(exc.detail)
        return super().write(data)


def test_another_query_cannot_read_a_running_exports_pipe(copy_source: DuckDBSource) -> None:
    """While an export streams through its named pipe, a query listing or reading that pipe is
    refused, and the export's file is whole."""
    expected = _copy(copy_source, "csv", sql=BIG)
    sink = StealingSink(copy_source)
    rows = copy_source.copy(
        BIG,
        {},
        ALICE,
        fmt="csv",
        neutralize_formulas=True,
        sink=sink,
        timeout_seconds=30,
        max_rows=10**9,
    )

    assert len(sink.pipes) == 1
    assert sink.were_fifos
    assert len(sink.refusals) == 4
    assert all("is not allowed" in detail for detail in sink.refusals)
    assert (rows, sink.buffer.getvalue()) == (3_000_000, expected)
