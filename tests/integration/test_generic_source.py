"""The generic SQLAlchemy source on real SQLite files: types, streaming, read-only, binding,
timeout, bad SQL, describe, preview, a missing dialect or driver, and the worker's path."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import (
    InvalidRequestError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.services.source_urls import check_source_url
from qexport.sources.generic.source import SAMPLE_ROWS, GenericSource, engine_for
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of

ALICE = Requester("alice", "w1")
# Runs until interrupted: SQLite counts a recursive CTE without end.
ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE orders (id INTEGER PRIMARY KEY, owner TEXT, total REAL, note TEXT,
                             raw BLOB, doc TEXT, empty TEXT);
        INSERT INTO orders VALUES
            (1, 'alice', 12.5, 'first: 10:30', x'00ff', '{"a": [1, 2]}', NULL),
            (2, 'bob', 3.0, NULL, NULL, NULL, NULL),
            (3, 'alice', 0.1, 'x'' OR ''1''=''1', x'', '[]', NULL);
        CREATE TABLE mixed (id INTEGER, v);
        INSERT INTO mixed VALUES (1, 1), (2, 2.5), (3, 'three');
        """
    )
    con.commit()
    con.close()
    return path


@pytest.fixture
def generic_sqlite_source(sqlite_path: Path) -> GenericSource:
    return GenericSource("shop", engine_for(f"sqlalchemy+sqlite:///{sqlite_path}"))


def _table(source: GenericSource, sql: str, parameters: dict[str, Any] | None = None) -> pa.Table:
    stream = source.execute(sql, parameters or {}, ALICE, timeout_seconds=30)
    try:
        return pa.Table.from_batches(list(stream), schema=stream.schema)
    finally:
        stream.close()


def test_types_come_out_exact(generic_sqlite_source: GenericSource) -> None:
    """Integers, floats, text, blobs and NULLs keep their values and get Arrow types; a JSON
    text stays text."""
    table = _table(
        generic_sqlite_source, "SELECT id, total, note, raw, doc, empty FROM orders ORDER BY id"
    )
    assert [str(f.type) for f in table.schema] == [
        "int64",
        "double",
        "string",
        "binary",
        "string",
        "string",
    ]
    assert table.to_pylist()[0] == {
        "id": 1,
        "total": 12.5,
        "note": "first: 10:30",
        "raw": b"\x00\xff",
        "doc": '{"a": [1, 2]}',
        "empty": None,
    }


def test_integers_and_floats_together_are_doubles(generic_sqlite_source: GenericSource) -> None:
    """SQLite's NUMERIC values of one column may be integers and floats: one double column."""
    table = _table(generic_sqlite_source, "SELECT v FROM mixed WHERE id < 3 ORDER BY id")
    assert table.schema.field("v").type == pa.float64()
    assert table.column("v").to_pylist() == [1.0, 2.5]


def test_a_column_of_mixed_types_is_refused_naming_it(
    generic_sqlite_source: GenericSource, sqlite_path: Path
) -> None:
    """Text and numbers in one column have no one exact type: query_invalid naming the
    column, whether the rows its type is chosen from show it or a later batch does, and no
    value in the message."""
    with pytest.raises(QueryInvalidError, match="'v'"):
        _table(generic_sqlite_source, "SELECT v FROM mixed ORDER BY id")
    con = sqlite3.connect(sqlite_path)
    con.execute("CREATE TABLE late (id INTEGER, v)")
    con.executemany("INSERT INTO late VALUES (?, ?)", [(i, i) for i in range(SAMPLE_ROWS)])
    con.execute("INSERT INTO late VALUES (?, 'secret text')", (SAMPLE_ROWS,))
    con.commit()
    con.close()
    stream = generic_sqlite_source.execute(
        "SELECT v FROM late ORDER BY id", {}, ALICE, timeout_seconds=5
    )
    assert stream.schema.field("v").type == pa.int64()
    with pytest.raises(QueryInvalidError, match="'v'") as caught:
        list(stream)
    assert "secret" not in str(caught.value)


def test_parameters_are_bound_never_written_into_the_sql(
    generic_sqlite_source: GenericSource,
) -> None:
    """A value that looks like SQL is compared as data; the requester is $user_id; a colon in
    the query's own text is no placeholder."""
    hostile = "x' OR '1'='1"
    table = _table(
        generic_sqlite_source,
        "SELECT id FROM orders WHERE note = $note OR owner = $who",
        {
            "note": hostile,
            "who": "nobody",
        },
    )
    assert table.column("id").to_pylist() == [3]
    mine = _table(
        generic_sqlite_source,
        "SELECT id, '12:30' AS t FROM orders WHERE owner = $user_id ORDER BY id",
    )
    assert mine.to_pylist() == [{"id": 1, "t": "12:30"}, {"id": 3, "t": "12:30"}]
    assert _table(generic_sqlite_source, "SELECT $workspace_id AS w").to_pylist() == [{"w": "w1"}]
    with pytest.raises(QueryInvalidError, match=r"\$missing"):
        _table(generic_sqlite_source, "SELECT $missing AS m")


def test_a_million_rows_stream_in_bounded_batches(tmp_path: Path) -> None:
    """A million rows arrive as batches of at most the batch size, and Arrow never holds
    more than a few of them: memory stays flat whatever the row count."""
    path = tmp_path / "big.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE big (id INTEGER, label TEXT)")
    con.execute(
        "INSERT INTO big WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
        " WHERE i < 1000000) SELECT i, 'row number ' || i FROM n"
    )
    con.commit()
    con.close()
    source = GenericSource("big", engine_for(f"sqlalchemy+sqlite:///{path}"), batch_rows=10_000)
    stream = source.execute("SELECT id, label FROM big", {}, ALICE, timeout_seconds=120)
    rows = batches = peak = 0
    before = pa.total_allocated_bytes()
    total = 0
    for batch in stream:
        assert batch.num_rows <= 10_000
        rows, batches = rows + batch.num_rows, batches + 1
        total += sum(batch.column("id").to_pylist()[:1])
        peak = max(peak, pa.total_allocated_bytes() - before)
    assert (rows, batches) == (1_000_000, 100)
    whole = 1_000_000 * (8 + len("row number 1000000"))  # what the result takes in Arrow
    assert peak < whole / 10


def test_writes_are_refused_before_the_server_and_by_it(
    generic_sqlite_source: GenericSource, sqlite_path: Path
) -> None:
    """Anything but a query is refused before it is sent; a write hidden behind WITH reaches
    SQLite, which refuses it (read-only file, PRAGMA query_only); nothing changes."""
    for sql in (
        "DELETE FROM orders",
        "INSERT INTO orders (id) VALUES (9)",
        "ATTACH DATABASE '/tmp/other.db' AS other",
        "PRAGMA query_only = OFF",
        "SELECT 1; DELETE FROM orders",
    ):
        with pytest.raises(QueryInvalidError, match="only a single SELECT"):
            _table(generic_sqlite_source, sql)
    with pytest.raises(QueryInvalidError, match="readonly"):
        _table(generic_sqlite_source, "WITH gone AS (SELECT 1) DELETE FROM orders")
    con = sqlite3.connect(sqlite_path)
    assert con.execute("SELECT count(*) FROM orders").fetchone() == (3,)
    con.close()


def test_the_statement_timeout_stops_a_running_query(generic_sqlite_source: GenericSource) -> None:
    """A query past the timeout is interrupted inside SQLite: query_timeout."""
    with pytest.raises(QueryTimeoutError, match="1 s"):
        _table_with_timeout(generic_sqlite_source, ENDLESS, 1)


def _table_with_timeout(source: GenericSource, sql: str, seconds: float) -> None:
    stream = source.execute(sql, {}, ALICE, timeout_seconds=seconds)
    try:
        list(stream)
    finally:
        stream.close()


def test_on_interrupt_stops_the_statement(generic_sqlite_source: GenericSource) -> None:
    """The interrupt handed to on_interrupt stops a running statement from another thread;
    the failure says it was interrupted, not timed out."""
    handed: list[Any] = []
    started = threading.Event()

    def keep(stop: Any) -> None:
        handed.append(stop)
        started.set()

    threading.Timer(0.5, lambda: started.wait() and handed[0]()).start()
    with pytest.raises(QExportError, match="interrupted") as caught:
        generic_sqlite_source.execute(ENDLESS, {}, ALICE, timeout_seconds=0, on_interrupt=keep)
    assert not isinstance(caught.value, QueryTimeoutError)


def test_bad_sql_is_query_invalid(generic_sqlite_source: GenericSource) -> None:
    """A syntax error or a missing table is the query's fault, in SQLite's words."""
    with pytest.raises(QueryInvalidError, match="syntax error"):
        _table(generic_sqlite_source, "SELECT id FORM orders")
    with pytest.raises(QueryInvalidError, match="no such table: nope"):
        _table(generic_sqlite_source, "SELECT * FROM nope")


def test_describe_names_the_columns_without_reading_a_row(
    generic_sqlite_source: GenericSource,
) -> None:
    """Describe runs the query wrapped to return no row; SQLite gives names, no types."""
    columns = generic_sqlite_source.describe(
        "SELECT id, owner AS who FROM orders WHERE owner = $user_id -- trailing",
        {},
        ALICE,
        timeout_seconds=5,
    )
    assert [(c.name, c.type) for c in columns] == [("id", "ANY"), ("who", "ANY")]
    with pytest.raises(QueryInvalidError, match="no such column"):
        generic_sqlite_source.describe("SELECT missing FROM orders", {}, ALICE, timeout_seconds=5)


def test_preview_shows_the_first_rows_cut(generic_sqlite_source: GenericSource) -> None:
    """The first rows under a LIMIT, long texts cut, `more` when rows were left out."""
    shown = generic_sqlite_source.preview(
        "SELECT id, note FROM orders WHERE owner = $user_id ORDER BY id;",
        {},
        ALICE,
        timeout_seconds=5,
        max_rows=1,
        max_cell_chars=5,
        max_bytes=10_000,
    )
    assert shown.table.to_pylist() == [{"id": 1, "note": "first:"}]
    assert shown.more
    everything = generic_sqlite_source.preview(
        "SELECT id FROM orders",
        {},
        ALICE,
        timeout_seconds=5,
        max_rows=10,
        max_cell_chars=5,
        max_bytes=10_000,
    )
    assert everything.table.num_rows == 3
    assert not everything.more


def test_a_missing_file_is_unavailable_and_not_created(tmp_path: Path) -> None:
    """The file is opened read-only: a missing one is source_unavailable naming the source,
    and no empty database appears in its place."""
    missing = tmp_path / "missing.db"
    source = GenericSource("gone", engine_for(f"sqlalchemy+sqlite:///{missing}"))
    with pytest.raises(SourceUnavailableError, match="'gone'"):
        _table(source, "SELECT 1")
    assert not missing.exists()


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("sqlalchemy+snowflake://u:pw@account/db", "pip install snowflake-sqlalchemy"),
        ("sqlalchemy+trino://u@host:8080/catalog", "pip install trino[sqlalchemy]"),
        ("sqlalchemy+mssql+pymssql://u:pw@host/db", "pip install pymssql"),
        ("sqlalchemy+oracle+cx_oracle://u:pw@host/db", "pip install cx-Oracle"),
    ],
)
def test_a_missing_dialect_or_driver_says_what_to_install(url: str, advice: str) -> None:
    """Building the source names the package to install, never the password."""
    with pytest.raises(ValueError, match=advice.replace("[", r"\[").replace("]", r"\]")) as caught:
        bootstrap.source_from_url("dw", url, Settings())
    assert "pw" not in str(caught.value)


def test_bad_generic_urls_are_refused(sqlite_path: Path) -> None:
    """A relative or in-memory SQLite database, an async driver, or no dialect at all."""
    for url, why in (
        ("sqlalchemy+sqlite:///relative.db", "absolute file"),
        ("sqlalchemy+sqlite://", "absolute file"),
        ("sqlalchemy+sqlite+aiosqlite:////x.db", "asynchronous"),
    ):
        with pytest.raises(ValueError, match=why):
            bootstrap.source_from_url("dw", url, Settings())
    check_source_url(f"sqlalchemy+sqlite:///{sqlite_path}")
    with pytest.raises(InvalidRequestError):
        check_source_url("sqlalchemy+:///x")


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_a_generic_source_exports_through_the_worker(
    sqlite_path: Path, tmp_path: Path, fmt: str
) -> None:
    """A worker exports a query of a SQLite file given by its URL, the requester bound."""
    generic_sqlite_source = bootstrap.source_from_url(
        "shop", f"sqlalchemy+sqlite:///{sqlite_path}", Settings()
    )
    store = InMemoryMetadataStore()
    sql = "SELECT id, total, note FROM orders WHERE owner = $user_id ORDER BY id"
    store.add_query(Query(str(uuid.uuid4()), "w1", "mine", sql, "shop"))
    deps = container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"shop": generic_sqlite_source}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path / "data"),
    )
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "mine", by_name=True), fmt),
    )
    Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    assert final.status is Status.SUCCEEDED, final.failure_detail
    assert final.row_count == 2
    with deps.objects.open(record.storage_key) as body:
        data = body.read()
    expected = [
        {"id": 1, "total": 12.5, "note": "first: 10:30"},
        {"id": 3, "total": 0.1, "note": "x' OR '1'='1"},
    ]
    if fmt == "csv":
        assert list(csv.reader(io.StringIO(data.decode()))) == [
            ["id", "total", "note"],
            ["1", "12.5", "first: 10:30"],
            ["3", "0.1", "x' OR '1'='1"],
        ]
    elif fmt == "parquet":
        assert pq.read_table(io.BytesIO(data)).to_pylist() == expected
    else:
        assert [json.loads(line) for line in data.splitlines()] == expected
