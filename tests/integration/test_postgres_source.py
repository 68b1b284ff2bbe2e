"""The PostgreSQL source on a real server: row-level security per requester, exact numerics,
streaming, the statement timeout, the read-only transaction, bound parameters, formula
neutralisation in csv, and cancelling a running statement."""

from __future__ import annotations

import csv
import io
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import openpyxl
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from openpyxl.utils.escape import unescape

from qexport.domain.exports import Requester
from qexport.domain.failures import (
    FailureCode,
    LimitExceededError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
)
from qexport.ports import WriterOptions
from qexport.sources.postgres.source import PostgresSource
from qexport.writers.parquet import ParquetFileWriter
from qexport.writers.registry import get_writer
from tests.support.pg import server_url

ALICE = Requester("alice", "w1")
BOB = Requester("bob", "w1")
BIG = Decimal("12345678901234567890.0123456789")

_SETUP = """
CREATE TABLE docs (id int PRIMARY KEY, owner text, workspace text, body text);
INSERT INTO docs VALUES
    (1, 'alice', 'w1', 'alice in w1'), (2, 'bob', 'w1', 'bob in w1'),
    (3, 'alice', 'w2', 'alice in w2'), (4, 'bob', 'w1', 'bob again');
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
CREATE POLICY requester_rows ON docs USING (
    owner = current_setting('qexport.user_id', true)
    AND workspace = current_setting('qexport.workspace_id', true)
);
CREATE TABLE amounts (id int, exact numeric(38, 10), loose numeric, ratio float8);
INSERT INTO amounts VALUES
    (1, 12345678901234567890.0123456789, 1 / 3::numeric, 0.1),
    (2, -0.0000000001, 12345678901234567890123456789012345678901234567890.5, -1e300),
    (3, NULL, NULL, NULL);
CREATE TABLE texts (id int, s text, n int, flag bool);
INSERT INTO texts VALUES
    (1, 'plain', -5, true), (2, '=1+1', -1, false), (3, '+49 30 1234', 0, NULL),
    (4, '-x', 7, true), (5, '@SUM(A1)', 7, true), (6, E'\\tfoo', 7, true),
    (7, E'\\rbar', 7, true), (8, E'\\nbaz', 7, true),
    (9, E'comma, "quote"\\nnewline\\r\\nand tab\\t', 7, true), (10, '日本語 🚚', 7, true),
    (11, '', 7, true), (12, NULL, 7, true);
CREATE TABLE counters (n int);
INSERT INTO counters VALUES (0);
CREATE FUNCTION bump() RETURNS int LANGUAGE sql AS 'UPDATE counters SET n = n + 1 RETURNING n';
CREATE SEQUENCE ticket;
CREATE TABLE secrets (x int);
REVOKE EXECUTE ON FUNCTION set_config(text, text, boolean) FROM PUBLIC;
"""
_GRANTS = """
GRANT SELECT ON docs, amounts, texts TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON counters TO {role};
GRANT USAGE ON SEQUENCE ticket TO {role};
"""


@dataclass(frozen=True)
class Database:
    admin_url: str  # a superuser: sets up, and watches the server
    url: str  # a role with SELECT only, so that row-level security applies
    name: str

    def source(self, **kw: Any) -> PostgresSource:
        return PostgresSource("warehouse", self.url, **kw)

    def scalar(self, sql: str) -> Any:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
            return row[0] if row else None


def url_for(base: str, **parts: str) -> str:
    return sa.make_url(base).set(**parts).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def database(pg_template: str) -> Iterator[Database]:
    """A database with test tables and a reader role, for this module (dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_pgsrc_{suffix}", f"qexport_reader_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    admin_url = url_for(server_url(), database=name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(_SETUP)
        conn.execute(_GRANTS.format(role=f'"{role}"'))
    yield Database(admin_url, url_for(admin_url, username=role), name)
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')


class MemorySink:
    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.writes = 0

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.writes += 1
        return self.buffer.write(data)


def rows_of(
    source: PostgresSource,
    sql: str,
    parameters: dict[str, Any] | None = None,
    requester: Requester = ALICE,
) -> list[dict[str, Any]]:
    stream = source.execute(sql, parameters or {}, requester, timeout_seconds=30)
    try:
        return pa.Table.from_batches(list(stream), schema=stream.schema).to_pylist()
    finally:
        stream.close()


def csv_of(
    source: PostgresSource,
    sql: str,
    parameters: dict[str, Any] | None = None,
    requester: Requester = ALICE,
    *,
    fmt: str = "csv",
    neutralize: bool = True,
    max_rows: int = 10**9,
) -> bytes:
    sink = MemorySink()
    source.copy(
        sql,
        parameters or {},
        requester,
        fmt=fmt,
        neutralize_formulas=neutralize,
        sink=sink,
        timeout_seconds=30,
        max_rows=max_rows,
    )
    return sink.buffer.getvalue()


def read_csv(data: bytes, delimiter: str = ",") -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(), newline=""), delimiter=delimiter))


# ---------------------------------------------------------------- requester context


def test_row_level_security_gives_each_requester_their_own_rows(database: Database) -> None:
    """The same query returns alice's rows to alice and bob's to bob, in both paths: the
    policy reads current_setting('qexport.user_id') and ('qexport.workspace_id')."""
    source = database.source()
    sql = "SELECT id, body FROM docs ORDER BY id"
    assert rows_of(source, sql, requester=ALICE) == [{"id": 1, "body": "alice in w1"}]
    assert rows_of(source, sql, requester=BOB) == [
        {"id": 2, "body": "bob in w1"},
        {"id": 4, "body": "bob again"},
    ]
    assert rows_of(source, sql, requester=Requester("alice", "w2")) == [
        {"id": 3, "body": "alice in w2"}
    ]
    assert csv_of(source, sql, requester=ALICE) == b"id,body\r\n1,alice in w1\r\n"
    assert csv_of(source, sql, requester=BOB) == b"id,body\r\n2,bob in w1\r\n4,bob again\r\n"


def test_the_requester_context_is_readable_as_settings_and_parameters(database: Database) -> None:
    """current_setting() and the $user_id / $workspace_id parameters both carry the requester."""
    sql = (
        "SELECT current_setting('qexport.user_id') AS u,"
        " current_setting('qexport.workspace_id') AS w, $user_id AS pu, $workspace_id AS pw"
    )
    assert rows_of(database.source(), sql, requester=BOB) == [
        {"u": "bob", "w": "w1", "pu": "bob", "pw": "w1"}
    ]


def test_a_query_cannot_take_another_requesters_identity(database: Database) -> None:
    """With EXECUTE on set_config revoked from PUBLIC (the setup the README recommends), a
    query that tries to switch to bob's identity is refused, and the context is still set:
    qexport sets it with SET LOCAL, which needs no function."""
    sql = "SELECT set_config('qexport.user_id', 'bob', true) AS s, id FROM docs"
    with pytest.raises(QueryInvalidError, match="permission denied for function set_config"):
        rows_of(database.source(), sql)
    assert rows_of(database.source(), "SELECT id FROM docs") == [{"id": 1}]


# ---------------------------------------------------------------- exact values


def test_numerics_are_exact_in_parquet_and_csv(database: Database) -> None:
    """numeric(38,10) is decimal128(38, 10) with every digit kept, in Arrow, in a Parquet file
    read back, and in csv; an unconstrained numeric keeps its digits as text; floats print
    in their shortest exact form."""
    source = database.source()
    sql = "SELECT id, exact, loose, ratio FROM amounts ORDER BY id"
    stream = source.execute(sql, {}, ALICE, timeout_seconds=30)
    try:
        assert stream.schema.field("exact").type == pa.decimal128(38, 10)
        assert stream.schema.field("loose").type == pa.string()
        sink = MemorySink()
        ParquetFileWriter().write(stream.schema, iter(stream), sink, WriterOptions())
    finally:
        stream.close()
    table = pq.read_table(io.BytesIO(sink.buffer.getvalue()))
    assert table.schema.field("exact").type == pa.decimal128(38, 10)
    assert table.column("exact").to_pylist() == [BIG, Decimal("-0.0000000001"), None]
    assert table.column("loose").to_pylist() == [
        "0.33333333333333333333",
        "12345678901234567890123456789012345678901234567890.5",
        None,
    ]
    assert table.column("ratio").to_pylist() == [0.1, -1e300, None]
    assert read_csv(csv_of(source, sql)) == [
        ["id", "exact", "loose", "ratio"],
        ["1", str(BIG), "0.33333333333333333333", "0.1"],
        ["2", "-0.0000000001", "12345678901234567890123456789012345678901234567890.5", "-1e+300"],
        ["3", "", "", ""],
    ]


def test_common_types_map_to_their_arrow_types(database: Database) -> None:
    """Integers, floats, booleans, dates and timestamps keep their types; uuid, json, interval
    and arrays arrive as PostgreSQL's text; timestamptz is UTC; bytea is binary."""
    sql = """
        SELECT 1::int2 AS i2, 2::int4 AS i4, 3::int8 AS i8, 1.5::float4 AS f4,
               true AS b, DATE '2024-02-29' AS d, TIME '12:34:56.789' AS t,
               TIMESTAMP '2024-01-02 03:04:05.678901' AS ts,
               TIMESTAMPTZ '2024-01-02 03:04:05+02' AS tstz,
               '6f1c1e9e-0b6c-4d5e-9c3a-6b1f5d2c7a10'::uuid AS id,
               '{"a": [1, 2]}'::jsonb AS doc, INTERVAL '1 day 2 hours' AS span,
               ARRAY[1, 2] AS arr, '\\x0102'::bytea AS raw, 'x'::varchar(3) AS v,
               12.50::numeric(70, 2) AS wide, 1234567::numeric(5, -2) AS hundreds
    """
    source = database.source()
    stream = source.execute(sql, {}, ALICE, timeout_seconds=30)
    try:
        types = {field.name: field.type for field in stream.schema}
        row = pa.Table.from_batches(list(stream), schema=stream.schema).to_pylist()[0]
    finally:
        stream.close()
    assert types == {
        "i2": pa.int16(),
        "i4": pa.int32(),
        "i8": pa.int64(),
        "f4": pa.float32(),
        "b": pa.bool_(),
        "d": pa.date32(),
        "t": pa.time64("us"),
        "ts": pa.timestamp("us"),
        "tstz": pa.timestamp("us", tz="UTC"),
        "id": pa.string(),
        "doc": pa.string(),
        "span": pa.string(),
        "arr": pa.string(),
        "raw": pa.binary(),
        "v": pa.string(),
        "wide": pa.decimal256(70, 2),
        "hundreds": pa.decimal128(7, 0),
    }
    assert row["tstz"] == datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)
    assert row["d"] == date(2024, 2, 29)
    assert (row["doc"], row["span"], row["arr"]) == ('{"a": [1, 2]}', "P1DT2H", "{1,2}")
    assert (row["raw"], row["wide"], row["hundreds"]) == (b"\x01\x02", Decimal("12.50"), 1234600)
    header, values = read_csv(csv_of(source, sql))
    assert dict(zip(header, values, strict=True)) == {
        "i2": "1",
        "i4": "2",
        "i8": "3",
        "f4": "1.5",
        "b": "true",
        "d": "2024-02-29",
        "t": "12:34:56.789",
        "ts": "2024-01-02 03:04:05.678901",
        "tstz": "2024-01-02 01:04:05+00",
        "id": "6f1c1e9e-0b6c-4d5e-9c3a-6b1f5d2c7a10",
        "doc": '{"a": [1, 2]}',
        "span": "P1DT2H",
        "arr": "{1,2}",
        "raw": "AQI=",
        "v": "x",
        "wide": "12.50",
        "hundreds": "1234600",
    }


def test_nan_in_a_decimal_column_fails_with_a_clear_reason(database: Database) -> None:
    """A numeric(p, s) NaN has no exact decimal: query_invalid, naming the column (where the
    column is numeric without (p, s), NaN is its text "NaN", see below)."""
    with pytest.raises(QueryInvalidError, match=r"column 'x'.*cast it"):
        rows_of(database.source(), "SELECT 'NaN'::numeric(10, 2) AS x")


# float8, float4 and unconstrained numeric holding NaN, the infinities, a finite value, NULL;
# and a string with an escape character (ESC).
NON_FINITE_SQL = """
SELECT d, r, n, 'a' || chr(27) || '[31mred' AS s FROM (VALUES
    ('NaN'::float8, 'NaN'::float4, 'NaN'::numeric), ('Infinity', 'Infinity', 'Infinity'),
    ('-Infinity', '-Infinity', '-Infinity'), (1.25, 1.25, 1.25), (NULL, NULL, NULL)
) AS t(d, r, n)
"""
NON_FINITE_LABELS = ["NaN", "Infinity", "-Infinity"]


def written(source: PostgresSource, sql: str, fmt: str) -> bytes:
    """The file a writer makes of the source's Arrow batches (the jsonl and xlsx path)."""
    stream = source.execute(sql, {}, ALICE, timeout_seconds=30)
    sink = MemorySink()
    try:
        get_writer(fmt).write(stream.schema, iter(stream), sink, WriterOptions())
    finally:
        stream.close()
    return sink.buffer.getvalue()


def test_non_finite_numbers_are_labelled_strings_in_jsonl(database: Database) -> None:
    """NaN and infinities in double precision, real and numeric columns are the JSON strings
    "NaN", "Infinity" and "-Infinity", the same rule as for a DuckDB source."""
    lines = written(database.source(), NON_FINITE_SQL, "jsonl").decode().splitlines()
    rows = [json.loads(line, parse_float=Decimal) for line in lines]
    assert [(row["d"], row["r"], row["n"]) for row in rows] == [
        *((label, label, label) for label in NON_FINITE_LABELS),
        (Decimal("1.25"), Decimal("1.25"), "1.25"),  # an unconstrained numeric is exact text
        (None, None, None),
    ]
    assert {row["s"] for row in rows} == {"a\x1b[31mred"}


def test_non_finite_numbers_are_labelled_text_cells_in_xlsx(database: Database) -> None:
    """In xlsx, NaN and infinities are the text cells "NaN", "Infinity" and "-Infinity" in
    double precision, real and numeric columns; finite floats stay numbers; text is exact."""
    data = written(database.source(), NON_FINITE_SQL, "xlsx")
    sheet = openpyxl.load_workbook(io.BytesIO(data))["Sheet1"]
    rows = list(sheet.iter_rows(min_row=2, values_only=True))
    assert [row[:3] for row in rows] == [
        *((label, label, label) for label in NON_FINITE_LABELS),
        (1.25, 1.25, "1.25"),
        (None, None, None),
    ]
    assert {unescape(row[3]) for row in rows} == {"a\x1b[31mred"}


def test_non_finite_numbers_stay_numbers_in_csv_and_parquet(database: Database) -> None:
    """csv (PostgreSQL's own COPY) writes PostgreSQL's NaN, Infinity and -Infinity unquoted;
    parquet keeps NaN and infinities as floats, and the numeric column as its text."""
    rows = read_csv(csv_of(database.source(), NON_FINITE_SQL))
    assert [row[:3] for row in rows] == [
        ["d", "r", "n"],
        *([label] * 3 for label in NON_FINITE_LABELS),
        ["1.25", "1.25", "1.25"],
        ["", "", ""],
    ]
    table = pq.read_table(io.BytesIO(written(database.source(), NON_FINITE_SQL, "parquet")))
    assert table.schema.types[:3] == [pa.float64(), pa.float32(), pa.string()]
    for name in ("d", "r"):
        values = table.column(name).to_pylist()
        assert math.isnan(values[0])
        assert values[1:] == [math.inf, -math.inf, 1.25, None]
    assert table.column("n").to_pylist() == [*NON_FINITE_LABELS, "1.25", None]


# ---------------------------------------------------------------- streaming


def _batches(source: PostgresSource, sql: str) -> list[pa.RecordBatch]:
    stream = source.execute(sql, {}, ALICE, timeout_seconds=60)
    try:
        return list(stream)
    finally:
        stream.close()


def test_a_large_result_arrives_in_bounded_batches(database: Database) -> None:
    """Three million rows arrive as many batches, each about the batch size, not one big
    table: memory stays flat whatever the row count."""
    sql = "SELECT i, i * 2 AS j FROM generate_series(1, 3000000) AS s(i)"
    batches = _batches(database.source(batch_bytes=1024 * 1024), sql)
    assert sum(batch.num_rows for batch in batches) == 3_000_000
    assert len(batches) >= 30
    assert max(batch.nbytes for batch in batches) <= 1024 * 1024
    assert batches[-1].column("j")[-1].as_py() == 6_000_000


def test_wide_rows_make_batches_of_fewer_rows(database: Database) -> None:
    """Batches are cut by bytes, not rows: rows of 100 kB each come a few at a time."""
    sql = "SELECT i, repeat('x', 100000) AS blob FROM generate_series(1, 200) AS s(i)"
    batches = _batches(database.source(batch_bytes=1024 * 1024), sql)
    assert sum(batch.num_rows for batch in batches) == 200
    assert max(batch.num_rows for batch in batches) <= 11


def test_a_row_larger_than_a_batch_is_read_whole(database: Database) -> None:
    """A 5 MB value in a stream of 64 kB batches arrives intact, in a batch of its own."""
    sql = (
        "SELECT i, CASE WHEN i = 2 THEN repeat('y', 5000000) ELSE 'z' END AS v"
        " FROM generate_series(1, 3) AS s(i)"
    )
    batches = _batches(database.source(batch_bytes=64 * 1024), sql)
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [len(row["v"]) for row in rows] == [1, 5_000_000, 1]


def test_null_and_empty_text_stay_apart(database: Database) -> None:
    """In the Arrow batches too, NULL is None and '' is '', even as the only column."""
    sql = "SELECT s FROM (VALUES (NULL), (''), ('a'), (NULL)) AS t(s)"
    assert [row["s"] for row in rows_of(database.source(), sql)] == [None, "", "a", None]


FAILS_LATE = (
    "SELECT i, 1 / (300000 - i) AS x FROM generate_series(1, 400000) AS s(i)"  # fails at i=300000
)


def test_batches_arrive_before_the_server_has_the_whole_result(database: Database) -> None:
    """A query that fails at row 300,000 has already delivered batches of its first rows:
    the result is read as the server produces it, not gathered first."""
    source = database.source(batch_bytes=64 * 1024)
    stream = source.execute(FAILS_LATE, {}, ALICE, timeout_seconds=60)
    sizes: list[int] = []
    with pytest.raises(QueryInvalidError, match="division by zero"):
        sizes.extend(batch.num_rows for batch in stream)
    stream.close()
    assert 0 < sum(sizes) < 300_000


def test_csv_bytes_reach_the_sink_before_the_server_has_the_whole_result(
    database: Database,
) -> None:
    """Through COPY too: the first rows are in the file before the failing row is computed."""
    sink = MemorySink()
    with pytest.raises(QueryInvalidError, match="division by zero"):
        database.source().copy(
            FAILS_LATE,
            {},
            ALICE,
            fmt="csv",
            neutralize_formulas=True,
            sink=sink,
            timeout_seconds=60,
            max_rows=10**9,
        )
    written = sink.buffer.getvalue()
    assert written.startswith(b"i,x\r\n1,0\r\n")
    assert sink.writes >= 2


class FailingSink(MemorySink):
    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        if self.buffer.tell() > 100_000:
            raise LimitExceededError("byte limit")
        return super().write(data)


def test_a_failing_sink_stops_the_statement(database: Database) -> None:
    """An error in the sink (byte limit, lost lease) is the error raised, and the server
    stops producing the rest of a large result."""
    # Ten billion rows, starting at once (each series alone is materialised first).
    sql = "SELECT a, b FROM generate_series(1, 100000) AS a, generate_series(1, 100000) AS b"
    with pytest.raises(LimitExceededError, match="byte limit"):
        database.source().copy(
            sql,
            {},
            ALICE,
            fmt="csv",
            neutralize_formulas=True,
            sink=FailingSink(),
            timeout_seconds=0,
            max_rows=10**9,
        )
    assert (
        database.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'active' AND query LIKE '%generate_series(1, 100000) AS b%'"
            " AND pid <> pg_backend_pid()"
        )
        == 0
    )


def test_the_row_limit_stops_a_csv_export(database: Database) -> None:
    """More rows than max_rows: limit_exceeded."""
    with pytest.raises(LimitExceededError):
        csv_of(database.source(), "SELECT i FROM generate_series(1, 1000) AS s(i)", max_rows=999)
    assert csv_of(database.source(), "SELECT 1 AS i", max_rows=1) == b"i\r\n1\r\n"


# ---------------------------------------------------------------- timeout and cancel


def run_to_the_end(
    source: PostgresSource,
    path: str,
    sql: str,
    *,
    timeout_seconds: float,
    on_interrupt: Callable[[Callable[[], None]], None] | None = None,
) -> None:
    """Run `sql` through `execute` (reading every batch) or through `copy`."""
    if path == "execute":
        stream = source.execute(
            sql, {}, ALICE, timeout_seconds=timeout_seconds, on_interrupt=on_interrupt
        )
        try:
            list(stream)
        finally:
            stream.close()
    else:
        source.copy(
            sql,
            {},
            ALICE,
            fmt="csv",
            neutralize_formulas=True,
            sink=MemorySink(),
            timeout_seconds=timeout_seconds,
            max_rows=10,
            on_interrupt=on_interrupt,
        )


@pytest.mark.parametrize("path", ["execute", "copy"])
def test_the_statement_timeout_ends_in_query_timeout(database: Database, path: str) -> None:
    """A statement running past the timeout is stopped by the server: query_timeout."""
    with pytest.raises(QueryTimeoutError, match=r"statement timeout of 0\.5 s") as caught:
        run_to_the_end(database.source(), path, "SELECT pg_sleep(30)", timeout_seconds=0.5)
    assert caught.value.code is FailureCode.QUERY_TIMEOUT


def _running(database: Database) -> int:
    return int(
        database.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'active' AND query LIKE '%pg_sleep(600)%'"
            " AND pid <> pg_backend_pid()"
        )
    )


@pytest.mark.parametrize("path", ["execute", "copy"])
def test_on_interrupt_cancels_the_running_statement(database: Database, path: str) -> None:
    """The function handed to on_interrupt stops a statement that would run for ten minutes
    (no statement timeout): the call ends with 'interrupted' and the server runs nothing."""
    source = database.source()
    stops: list[Callable[[], None]] = []

    def stop_when_running() -> None:
        while not stops or _running(database) == 0:
            time.sleep(0.05)
        stops[0]()

    stopper = threading.Thread(target=stop_when_running, daemon=True)
    stopper.start()
    with pytest.raises(QExportError, match="interrupted") as caught:
        run_to_the_end(
            source, path, "SELECT pg_sleep(600)", timeout_seconds=0, on_interrupt=stops.append
        )
    stopper.join()
    assert caught.value.code is FailureCode.INTERNAL  # not a timeout: the caller stopped it
    assert _running(database) == 0


# ---------------------------------------------------------------- read-only, one statement


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("WITH gone AS (DELETE FROM counters RETURNING n) SELECT * FROM gone", "WITH"),
        ("SELECT bump()", "read-only transaction"),
        ("SELECT nextval('ticket')", "read-only transaction"),
        ("SELECT * FROM counters FOR UPDATE", "read-only transaction"),
        ("UPDATE counters SET n = 99", "only a single SELECT statement is allowed; got UPDATE"),
        ("SELECT 1; UPDATE counters SET n = 99", "got 2 statements"),
        ("SELECT 1 AS x) AS a; UPDATE counters SET n = 99; SELECT (1", "got 3 statements"),
        ("COMMIT; UPDATE counters SET n = 99", "only a single SELECT"),
    ],
)
def test_writes_are_refused(database: Database, sql: str, message: str) -> None:
    """Data-modifying CTEs, writing functions, locks and extra statements: query_invalid, and
    the table is unchanged (the source's role itself may write to it)."""
    for run in (rows_of, csv_of):
        with pytest.raises(QueryInvalidError, match=message):
            run(database.source(), sql)
    assert database.scalar("SELECT n FROM counters") == 0


def test_a_trailing_semicolon_and_comment_are_accepted(database: Database) -> None:
    """The text as people write it: a final `;` and a comment after it are fine."""
    sql = "SELECT 1 AS one -- the answer\n; -- done"
    assert rows_of(database.source(), sql) == [{"one": 1}]
    assert csv_of(database.source(), sql) == b"one\r\n1\r\n"


# ---------------------------------------------------------------- parameters


HOSTILE = "x'); DROP TABLE docs; -- \" \\ $$ %s"


def test_parameter_values_are_data_never_sql(database: Database) -> None:
    """A value full of quotes, `'; DROP TABLE`, backslashes and dollar quotes comes back as
    the same string and matches nothing in a WHERE; the table is still there."""
    source = database.source()
    assert rows_of(source, "SELECT $p AS p", {"p": HOSTILE}) == [{"p": HOSTILE}]
    assert read_csv(csv_of(source, "SELECT $p AS p", {"p": HOSTILE}))[1] == [HOSTILE]
    assert rows_of(source, "SELECT id FROM docs WHERE body = $p", {"p": HOSTILE}) == []
    assert database.scalar("SELECT count(*) FROM docs") == 4


def test_typed_parameters_keep_their_types(database: Database) -> None:
    """Integers, numbers, dates and booleans arrive typed; `$n::text` binds like a parameter."""
    sql = (
        "SELECT $n + 1 AS n, $amount * 2 AS amount, $day + 1 AS day, NOT $flag AS flag,"
        " $n::text AS n_text, $missing::text AS missing"
    )
    parameters = {
        "n": -5,
        "amount": Decimal("0.1"),
        "day": date(2024, 2, 28),
        "flag": True,
        "missing": None,
    }
    assert rows_of(database.source(), sql, parameters) == [
        {
            "n": -4,
            "amount": "0.2",  # unconstrained numeric arithmetic: exact text
            "day": date(2024, 2, 29),
            "flag": False,
            "n_text": "-5",
            "missing": None,
        }
    ]


def test_placeholders_in_strings_comments_and_identifiers_are_left_alone(
    database: Database,
) -> None:
    """Only real `$name` tokens are parameters: not inside strings, dollar quotes, quoted
    identifiers or comments."""
    sql = """SELECT '$a' AS s, $$ $a $$ AS d, $tag$ it's $a $tag$ AS t, E'\\' $a' AS e,
                    $a AS "$a" -- $b
                    /* $c /* $d */ */"""
    assert rows_of(database.source(), sql, {"a": "A"}) == [
        {"s": "$a", "d": " $a ", "t": " it's $a ", "e": "' $a", "$a": "A"}
    ]


@pytest.mark.parametrize(
    ("sql", "parameters", "message"),
    [
        ("SELECT $1", {}, r"positional parameters \(\$1, \?\) are not supported"),
        ("SELECT $x", {}, r"the SQL uses \$x, but the query declares no such parameter"),
        ("SELECT $user_id", {"user_id": "mallory"}, "reserved for the requester context"),
        ("SELECT 'open", {}, "unterminated string"),
        ("  -- nothing\n", {}, "the query is empty"),
    ],
)
def test_bad_parameters_and_texts_are_query_invalid(
    database: Database, sql: str, parameters: dict[str, Any], message: str
) -> None:
    """Refused before anything runs, with the reason."""
    with pytest.raises(QueryInvalidError, match=message):
        rows_of(database.source(), sql, parameters)


# ---------------------------------------------------------------- csv and tsv


FORMULA_TEXT = {"=1+1", "+49 30 1234", "-x", "@SUM(A1)", "\tfoo", "\rbar", "\nbaz"}


@pytest.mark.parametrize(("fmt", "delimiter", "eol"), [("csv", ",", b"\r\n"), ("tsv", "\t", b"\n")])
def test_text_formats_neutralise_formulas_and_keep_values(
    database: Database, fmt: str, delimiter: str, eol: bytes
) -> None:
    """Formula-looking strings (and header names) gain a leading quote, negative numbers are
    untouched, booleans read true/false, NULL is an empty field and '' is "", line feeds
    inside values survive while rows end with the format's line end."""
    sql = 'SELECT id, s AS "=s", n, flag FROM texts ORDER BY id'
    data = csv_of(database.source(), sql, fmt=fmt)
    assert data.startswith(delimiter.join(["id", "'=s", "n", "flag"]).encode() + eol)
    assert data.endswith(eol)
    rows = read_csv(data, delimiter)
    assert len(rows) == 13
    with psycopg.connect(database.admin_url) as conn:
        expected = conn.execute("SELECT id, s, n, flag FROM texts ORDER BY id").fetchall()
    for got, (id_, s, n, flag) in zip(rows[1:], expected, strict=True):
        text = "" if s is None else ("'" + s if s in FORMULA_TEXT else s)
        assert got == [str(id_), text, str(n), "" if flag is None else str(flag).lower()]
    assert f'{delimiter}""{delimiter}'.encode() in data  # the empty string
    assert f"12{delimiter}{delimiter}7".encode() in data  # NULL


def test_opting_out_keeps_strings_exact(database: Database) -> None:
    """Without neutralisation every string is written as stored."""
    sql = 'SELECT id, s AS "=s" FROM texts ORDER BY id'
    rows = read_csv(csv_of(database.source(), sql, neutralize=False))
    assert rows[0] == ["id", "=s"]
    with psycopg.connect(database.admin_url) as conn:
        stored = [r[0] for r in conn.execute("SELECT s FROM texts ORDER BY id").fetchall()]
    assert [r[1] for r in rows[1:]] == ["" if s is None else s for s in stored]


def test_repeated_and_unnamed_columns_are_written(database: Database) -> None:
    """Columns with the same name, or none (`?column?`), do not clash."""
    sql = "SELECT 1 AS a, 2 AS a, 3, 4"
    assert csv_of(database.source(), sql) == b"a,a,?column?,?column?\r\n1,2,3,4\r\n"
    stream = database.source().execute(sql, {}, ALICE, timeout_seconds=30)
    try:
        (batch,) = list(stream)
    finally:
        stream.close()
    assert stream.schema.names == ["a", "a", "?column?", "?column?"]
    assert [column.to_pylist() for column in batch.columns] == [[1], [2], [3], [4]]
