"""The Spark Connect source on a real Spark Connect server (tests/support/spark.py): exact types
in UTC, bound parameters and requester, statements refused before the server, Spark's own words
for a mistake, the timeout and the interrupt on the server, an unreachable server, describe,
preview and the worker's path to a csv file."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import (
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.spark.source import SparkSource, from_url
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.spark import SparkServer, pyspark_installed, spark_server

__all__ = ["pyspark_installed", "spark_server"]  # the session's server, from tests/support/spark.py
# Without pyspark every test skips (fails under CI), the ones that need no server too.
pytestmark = pytest.mark.usefixtures("pyspark_installed")

ALICE = Requester("u-alice", "w1")
ENDLESS = "SELECT count(*) AS n FROM range(1000000000000) AS slow_marker"


@pytest.fixture
def spark_source(spark_server: SparkServer) -> SparkSource:
    """Built as a worker builds it: the sc:// scheme's `qexport.sources` entry point."""
    built = bootstrap.source_from_url("lake", spark_server.url, Settings())
    assert isinstance(built, SparkSource)
    return built


def _table(source: SparkSource, sql: str, parameters: dict[str, Any] | None = None) -> pa.Table:
    stream = source.execute(sql, parameters or {}, ALICE, timeout_seconds=60)
    try:
        return pa.Table.from_batches(list(stream), schema=stream.schema)
    finally:
        stream.close()


def test_types_are_exact_and_instants_utc(spark_source: SparkSource) -> None:
    """Decimals keep every digit, TIMESTAMP is the instant in UTC (the server's zone is New
    York), TIMESTAMP_NTZ a wall-clock time, binary bytes, nested values JSON text."""
    table = _table(spark_source, "SELECT * FROM types ORDER BY id")
    types = {f.name: f.type for f in table.schema}
    assert types["price"] == pa.decimal128(12, 2)
    assert types["exact"] == pa.decimal128(38, 10)
    assert types["at"] == pa.timestamp("us", tz="UTC")
    assert types["wall"] == pa.timestamp("us")
    assert types["blobby"] == pa.binary()
    assert types["tiny"] == pa.int8()
    assert types["tags"] == types["attrs"] == types["point"] == pa.string()
    first, empty = table.to_pylist()
    assert first == {
        "id": 1,
        "flag": True,
        "tiny": -128,
        "small": -32768,
        "regular": -2147483648,
        "big": -9223372036854775808,
        "ratio": 0.1 + 0.2,
        "approx": 0.5,
        "price": Decimal("1234567890.12"),
        "exact": Decimal("1234567890123456789012345678.0123456789"),
        "word": 'grüße 😀\n"quoted", comma',
        "code": "abc",
        "blobby": b"\x00\xff\x10",
        "day": date(2024, 2, 29),
        "at": datetime(2024, 5, 1, 10, 30, 0, 250000, tzinfo=UTC),
        "wall": datetime(2024, 2, 29, 23, 59, 59, 123456),
        "tags": '["a","b"]',
        "attrs": '{"k":1}',
        "point": '{"x":1,"label":"p"}',
    }
    assert set(empty.values()) - {2} == {None}


def test_intervals_are_refused_naming_the_column(spark_source: SparkSource) -> None:
    """An interval has no exact export: query_invalid naming the column, and how to fix it."""
    with pytest.raises(QueryInvalidError, match=r"'waited'.*INTERVAL.*CAST it to STRING"):
        _table(spark_source, "SELECT id, INTERVAL 3 DAYS AS waited FROM people")
    text = _table(spark_source, "SELECT CAST(INTERVAL 3 DAYS AS STRING) AS waited")
    assert text.column("waited").to_pylist() == ["INTERVAL '3' DAY"]


def test_parameters_and_the_requester_are_bound(spark_source: SparkSource) -> None:
    """$user_id is the requester's; a parameter that looks like SQL is a value, never SQL."""
    mine = _table(spark_source, "SELECT name FROM people WHERE owner = $user_id")
    assert mine.to_pylist() == [{"name": "Ann"}]
    hostile = "x' OR '1'='1"
    none = _table(spark_source, "SELECT name FROM people WHERE name = $n", {"n": hostile})
    assert none.num_rows == 0
    echoed = _table(
        spark_source,
        "SELECT $n AS n, $day AS day, '$n' AS kept",
        {"n": hostile, "day": date(2024, 1, 2)},
    )
    assert echoed.to_pylist() == [{"n": hostile, "day": date(2024, 1, 2), "kept": "$n"}]


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO written VALUES (1)",
        "DROP TABLE people",
        "SET spark.sql.session.timeZone = 'UTC'",
        "SELECT 1; INSERT INTO written VALUES (1)",
        "BEGIN INSERT INTO written VALUES (1); END",
    ],
)
def test_anything_but_one_query_is_refused_before_the_server(sql: str) -> None:
    """Refused by qexport itself: the source points at a port where no server listens, and
    the refusal is query_invalid, not source_unavailable."""
    nowhere = from_url("nowhere", "sc://127.0.0.1:1", Settings())
    with pytest.raises(QueryInvalidError, match="only a single SELECT"):
        nowhere.execute(sql, {}, ALICE, timeout_seconds=5)


def test_a_command_after_with_is_a_syntax_error_never_run(
    spark_source: SparkSource, spark_server: SparkServer
) -> None:
    """`WITH ... INSERT` starts like a query; the server sees it inside a subquery, where it
    does not parse: query_invalid at the INSERT, and nothing was written."""
    sql = "WITH x AS (SELECT 1 AS n)\nINSERT INTO written SELECT n FROM x"
    with pytest.raises(QueryInvalidError, match="Syntax error") as caught:
        _table(spark_source, sql)
    assert caught.value.position is not None
    assert (caught.value.position.line, caught.value.position.column) == (2, 1)
    assert spark_server.sql("SELECT count(*) FROM written") == [(0,)]


def test_an_analysis_error_is_query_invalid_in_spark_words(spark_source: SparkSource) -> None:
    """An unknown table or column: Spark's sentence, no plan or stack trace, and where it is."""
    with pytest.raises(QueryInvalidError, match="The table or view `nope` cannot be found") as t:
        _table(spark_source, "SELECT *\nFROM nope")
    assert "JVM" not in str(t.value)
    assert "UnresolvedRelation" not in str(t.value)
    assert t.value.position is not None
    assert (t.value.position.line, t.value.position.column) == (2, 6)
    with pytest.raises(QueryInvalidError, match="`nocol` cannot be resolved"):
        _table(spark_source, "SELECT nocol FROM people")
    with pytest.raises(QueryInvalidError, match="Syntax error"):
        _table(spark_source, "SELECT id FROM people WHERE id =")


def test_the_timeout_interrupts_the_statement(spark_source: SparkSource) -> None:
    """Past timeout_seconds the operation is interrupted on the server: query_timeout."""
    with pytest.raises(QueryTimeoutError, match="2 s"):
        list(spark_source.execute(ENDLESS, {}, ALICE, timeout_seconds=2))


def test_the_interrupt_stops_it_from_another_thread(spark_source: SparkSource) -> None:
    """The interrupt handed out before the statement starts ends it, failed as interrupted."""
    handed: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            spark_source.execute(ENDLESS, {}, ALICE, timeout_seconds=0, on_interrupt=handed.append)
        except QExportError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not handed:
        assert time.monotonic() < deadline, "the statement never started"
        time.sleep(0.05)
    time.sleep(1)  # let it run on the server
    handed[0]()
    thread.join(30)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert "interrupted" in str(errors[0])
    assert not isinstance(errors[0], QueryTimeoutError)


def test_an_unreachable_server_is_source_unavailable_at_once() -> None:
    """No server at the address: source_unavailable naming the source, without retrying for
    minutes; the token in the URL appears nowhere."""
    gone = from_url("gone", "sc://127.0.0.1:1/;token=s3cret-token", Settings())
    started = time.monotonic()
    with pytest.raises(SourceUnavailableError, match="'gone'") as caught:
        gone.describe("SELECT 1", {}, ALICE, timeout_seconds=30)
    assert time.monotonic() - started < 15
    assert "s3cret" not in str(caught.value)
    assert "s3cret" not in repr(gone)


def test_bad_urls_are_refused_without_echoing_them() -> None:
    """A URL that is not Spark Connect's is a ValueError that does not quote it."""
    for url in ("sc://", "sc://host/path;token=s3cret", "sc://host/;token"):
        with pytest.raises(ValueError, match="Spark Connect") as caught:
            from_url("bad", url, Settings())
        assert "s3cret" not in str(caught.value)


def test_describe_runs_nothing_and_preview_cuts(spark_source: SparkSource) -> None:
    """Describe gives Spark's type names from analysis alone (an endless query returns at
    once); preview gives the first rows with long values cut, and says there are more."""
    columns = spark_source.describe(
        "SELECT price, at, tags FROM types", {}, ALICE, timeout_seconds=30
    )
    assert [(c.name, c.type) for c in columns] == [
        ("price", "decimal(12,2)"),
        ("at", "timestamp"),
        ("tags", "array<string>"),
    ]
    assert [c.name for c in spark_source.describe(ENDLESS, {}, ALICE, timeout_seconds=30)] == ["n"]
    shown = spark_source.preview(
        "SELECT id, word, blobby FROM types ORDER BY id",
        {},
        ALICE,
        timeout_seconds=30,
        max_rows=1,
        max_cell_chars=3,
        max_bytes=10_000,
    )
    assert shown.table.to_pylist() == [{"id": 1, "word": "grüß", "blobby": b"\x00\xff\x10"}]
    assert shown.more
    assert [c.type for c in shown.columns] == ["int", "string", "binary"]


def test_a_spark_query_exports_to_csv_through_the_worker(
    spark_source: SparkSource, tmp_path: Path
) -> None:
    """A worker exports a Spark query to csv: the header, exact decimals, the instant in UTC."""
    store = InMemoryMetadataStore()
    sql = "SELECT id, price, at, word FROM types WHERE id = 1 AND $user_id = 'u-alice'"
    store.add_query(Query(str(uuid.uuid4()), "w1", "typed", sql, "lake"))
    deps = container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"lake": spark_source}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path / "data"),
    )
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "typed", by_name=True), "csv"),
    )
    Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    assert final.status is Status.SUCCEEDED, final.failure_detail
    assert final.row_count == 1
    with deps.objects.open(record.storage_key) as body:
        text = body.read().decode()
    assert text == (
        '"id","price","at","word"\r\n'
        '1,1234567890.12,"2024-05-01 10:30:00.250000+00:00","grüße 😀\n""quoted"", comma"\r\n'
    )
