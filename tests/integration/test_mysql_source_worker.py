"""A worker on the native MySQL/MariaDB source: an export through the whole lifecycle, a
failure settled with its code, and a cancel that stops the statement on the server."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.integration.test_mysql_source import ALICE
from tests.support.containers import container_of
from tests.support.mariadb import MariaDBServer, mariadb_server

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

QUERIES = {
    "typed": "SELECT id, price, moment, word, day FROM types ORDER BY id",
    "zero": "SELECT id, day FROM zero_dates ORDER BY id",
    "broken": "SELECT nope FROM people",
    "slow": "SELECT SLEEP(600) AS worker_sleep_marker",
}

Deps = Callable[..., Container]


@pytest.fixture
def maria_deps(mariadb_server: MariaDBServer, tmp_path: Path) -> Deps:
    def build(**settings: object) -> Container:
        source = bootstrap.source_from_url("maria", mariadb_server.url(), Settings())
        store = InMemoryMetadataStore()
        for name, sql in QUERIES.items():
            store.add_query(Query(str(uuid.uuid4()), ALICE.workspace_id, name, sql, "maria"))
        return container_of(
            store=store,
            objects=InMemoryObjectStore(),
            sources=FixedSources({"maria": source}),
            clock=SystemClock(),
            settings=Settings(data_dir=tmp_path / "data", **settings),  # type: ignore[arg-type]
        )

    return build


def _export(deps: Container, query: str, fmt: str) -> tuple[Status, str | None, bytes]:
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", query, by_name=True), fmt),
    )
    Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    if final.status is not Status.SUCCEEDED:
        return final.status, final.failure_code, b""
    with deps.objects.open(record.storage_key) as body:
        return final.status, None, body.read()


def test_a_mariadb_query_exports_to_csv_exactly(maria_deps: Deps) -> None:
    """The csv holds the server's values exactly (decimals, microseconds, 4-byte UTF-8) and
    NULL as an empty field; a zero date is an empty field too."""
    status, _, data = _export(maria_deps(), "typed", "csv")
    assert status is Status.SUCCEEDED
    lines = data.decode().splitlines()
    assert lines[0] == '"id","price","moment","word","day"'
    assert lines[1] == '1,1234567890.12,2024-02-29 23:59:59.123456,"grüße 😀",2024-02-29'
    assert lines[2] == "2,,,,"
    status, _, data = _export(maria_deps(), "zero", "csv")
    assert data.decode().splitlines()[1:] == ["1,", "2,", "3,2024-01-02"]


def test_a_mariadb_query_exports_to_parquet_with_its_types(maria_deps: Deps) -> None:
    """Parquet keeps DECIMAL(12,2) and DATETIME(6) as such."""
    status, _, data = _export(maria_deps(), "typed", "parquet")
    assert status is Status.SUCCEEDED
    table = pq.read_table(io.BytesIO(data))
    assert str(table.schema.field("price").type) == "decimal128(12, 2)"
    assert table.to_pylist()[0] == {
        "id": 1,
        "price": Decimal("1234567890.12"),
        "moment": datetime(2024, 2, 29, 23, 59, 59, 123456),
        "word": "grüße 😀",
        "day": date(2024, 2, 29),
    }


def test_a_refused_query_fails_the_export_query_invalid(maria_deps: Deps) -> None:
    """An unknown column settles the export failed with query_invalid at once."""
    status, code, _ = _export(maria_deps(), "broken", "csv")
    assert (status, code) == (Status.FAILED, FailureCode.QUERY_INVALID)


def test_the_timeout_fails_the_export_query_timeout(maria_deps: Deps) -> None:
    """A statement past the statement timeout settles failed with query_timeout."""
    status, code, _ = _export(maria_deps(statement_timeout_seconds=1), "slow", "csv")
    assert (status, code) == (Status.FAILED, FailureCode.QUERY_TIMEOUT)


def _running(server: MariaDBServer) -> int:
    rows = server.execute(
        "SELECT count(*) FROM information_schema.processlist"
        " WHERE info LIKE '%worker_sleep_marker%' AND info NOT LIKE '%processlist%'"
    )
    return int(rows[0][0])


def test_cancel_stops_the_statement_on_the_server(
    maria_deps: Deps, mariadb_server: MariaDBServer
) -> None:
    """Cancelled while MariaDB runs a ten-minute statement (no timeout): the attempt ends,
    the export is failed/cancelled, and the server no longer runs it."""
    container = maria_deps(lease_seconds=0.6, statement_timeout_seconds=0)
    record = record_request(
        container.exports,
        container.catalog,
        container.clock,
        ALICE,
        RequestExport(SubjectRef("query", "slow", by_name=True), "csv"),
    )
    worker = Worker(container, worker_id="w")
    done = threading.Event()
    thread = threading.Thread(target=lambda: (worker.run_once(), done.set()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while _running(mariadb_server) == 0:
        assert not done.is_set(), container.exports.get_export(record.id)
        assert time.monotonic() < deadline, "the statement never started"
        time.sleep(0.05)
    container.exports.cancel(record.id, now=container.clock.now())
    assert done.wait(60), "the attempt kept running after the cancel"
    thread.join()
    final = container.exports.get_export(record.id)
    assert final is not None
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.CANCELLED)
    assert _running(mariadb_server) == 0
