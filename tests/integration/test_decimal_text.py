"""Numbers are written the same way whatever the source: a DECIMAL(38,10) holding 1E-10,
-1E-10, 0, 12345678901234567890.0123456789 and NULL exported to csv, tsv and jsonl by the
worker (on the path each source takes: DuckDB's and PostgreSQL's own csv, Arrow batches and
qexport's writers otherwise) is the same text from DuckDB, PostgreSQL, MariaDB (its native
source and the generic SQLAlchemy one) and Spark Connect, in plain notation with the column's
scale, and a preview shows the same digits. (The header row's names are quoted on the Arrow
path and not by DuckDB and PostgreSQL, as strings are: the same CSV, not the same bytes.)

The generic source on SQLite is not among them: SQLite has no decimal type (a NUMERIC
column holds a float, or an integer), so it has no DECIMAL(38,10) to write.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import duckdb
import psycopg
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.queries import Query
from qexport.ports import Source
from qexport.services.requests import record_request
from qexport.worker.loop import Worker
from qexport.writers.cells import preview_cells
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.mariadb import MariaDBServer, mariadb_server
from tests.support.spark import SparkServer, pyspark_installed, spark_server

__all__ = ["mariadb_server", "pyspark_installed", "spark_server"]  # session fixtures

ALICE = Requester("u-alice", "w1")
ROWS = "(1, '1E-10'), (2, '-1E-10'), (3, '0'), (4, '12345678901234567890.0123456789'), (5, NULL)"
PLAIN = ["0.0000000001", "-0.0000000001", "0.0000000000", "12345678901234567890.0123456789"]
CSV = "id,amount\r\n" + "".join(f"{i},{v}\r\n" for i, v in enumerate(PLAIN, 1)) + "5,\r\n"
TSV = "id\tamount\n" + "".join(f"{i}\t{v}\n" for i, v in enumerate(PLAIN, 1)) + "5\t\n"
JSONL = "".join(f'{{"id":{i},"amount":{v}}}\n' for i, v in enumerate(PLAIN, 1))
JSONL += '{"id":5,"amount":null}\n'
EXPECTED = {"csv": CSV, "tsv": TSV, "jsonl": JSONL}
SELECT = "SELECT id, amount FROM decimal_text ORDER BY id"


def _exported(source: Source, sql: str, fmt: str, tmp_path: Path) -> str:
    """The file a worker makes of `sql` on `source` in format `fmt`."""
    store = InMemoryMetadataStore()
    store.add_query(Query(str(uuid.uuid4()), "w1", "amounts", sql, "src"))
    deps = container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"src": source}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path / "data"),
    )
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "amounts", by_name=True), fmt),
    )
    Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    assert final.status is Status.SUCCEEDED, final.failure_detail
    with deps.objects.open(record.storage_key) as body:
        return body.read().decode()


def _previewed(source: Source, sql: str) -> list[object]:
    shown = source.preview(
        sql, {}, ALICE, timeout_seconds=60, max_rows=10, max_cell_chars=100, max_bytes=10_000
    )
    return [row[1] for row in preview_cells(shown.table, max_chars=100, max_bytes=10_000).rows]


def _written_the_same(source: Source, sql: str, tmp_path: Path) -> None:
    for fmt, expected in EXPECTED.items():
        written = _exported(source, sql, fmt, tmp_path)
        if fmt == "jsonl":
            assert written == expected
            continue
        # The header's names are quoted on some paths (as strings are): compare the rows.
        header, rows = written.split("\n", 1)
        expected_header, expected_rows = expected.split("\n", 1)
        assert header.replace('"', "") == expected_header
        assert rows == expected_rows, fmt
    assert _previewed(source, sql) == [*PLAIN, None]


# ---------------------------------------------------------------- one test per source


def test_duckdb_writes_plain_decimals(tmp_path: Path) -> None:
    """DuckDB: its own csv and tsv, and jsonl through Arrow, in plain notation."""
    path = tmp_path / "decimals.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE decimal_text AS SELECT id::INTEGER AS id, amount::DECIMAL(38,10)"
            f" AS amount FROM (VALUES {ROWS}) t(id, amount)"
        )
    _written_the_same(
        bootstrap.source_from_url("src", f"duckdb://{path}", Settings()), SELECT, tmp_path
    )


@pytest.fixture
def postgresql_decimals(pg_url: str) -> str:
    """A fresh database (dropped after the test) holding the table, as its superuser."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE decimal_text (id int, amount numeric(38, 10))")
        conn.execute(f"INSERT INTO decimal_text VALUES {ROWS}")
    return pg_url


def test_postgresql_writes_plain_decimals(postgresql_decimals: str, tmp_path: Path) -> None:
    """PostgreSQL: the server's own COPY csv and tsv, and jsonl through Arrow, alike."""
    source = bootstrap.source_from_url(
        "src", postgresql_decimals, Settings(), allow_privileged_role=True
    )
    _written_the_same(source, SELECT, tmp_path)


@pytest.fixture(scope="module")
def mariadb_decimals(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The session's MariaDB with the table (its reader may SELECT it)."""
    mariadb_server.execute(
        f"USE {mariadb_server.database}",
        "CREATE TABLE decimal_text (id INT PRIMARY KEY, amount DECIMAL(38, 10))",
        f"INSERT INTO decimal_text VALUES {ROWS}",
    )
    return mariadb_server


@pytest.mark.parametrize("scheme", ["mysql", "sqlalchemy+mysql+mysqldb"])
def test_mariadb_writes_plain_decimals(
    mariadb_decimals: MariaDBServer, tmp_path: Path, scheme: str
) -> None:
    """MariaDB, through the native source and the generic SQLAlchemy one: `1E-10`, `-1E-10`
    and `0E-10` no more, the same text as DuckDB's."""
    url = mariadb_decimals.url(scheme=scheme)
    _written_the_same(bootstrap.source_from_url("src", url, Settings()), SELECT, tmp_path)


@pytest.mark.usefixtures("pyspark_installed")
def test_spark_writes_plain_decimals(spark_server: SparkServer, tmp_path: Path) -> None:
    """Spark Connect, whose DECIMAL(38,10) comes as Arrow batches, alike."""
    sql = (
        "SELECT CAST(id AS INT) AS id, CAST(amount AS DECIMAL(38, 10)) AS amount"
        f" FROM VALUES {ROWS} AS t(id, amount) ORDER BY id"
    )
    _written_the_same(bootstrap.source_from_url("src", spark_server.url, Settings()), sql, tmp_path)
