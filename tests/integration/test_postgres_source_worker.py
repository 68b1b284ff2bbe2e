"""A worker on a real PostgreSQL source: cancelling an export stops its statement on the server."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

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
from tests.integration.test_postgres_source import ALICE, Database, database
from tests.support.containers import container_of

__all__ = ["database"]  # the module's fixture, shared with test_postgres_source

SLOW = "SELECT pg_sleep(600) AS slept"


def _running(database: Database) -> int:
    return int(
        database.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'active' AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()"
        )
    )


@pytest.fixture
def pg_deps(database: Database, tmp_path: Path) -> Container:
    store = InMemoryMetadataStore()
    store.add_query(Query(str(uuid.uuid4()), ALICE.workspace_id, "slow", SLOW, "warehouse"))
    return container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"warehouse": database.source()}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path, lease_seconds=0.6, statement_timeout_seconds=0),
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_cancel_stops_the_statement_on_the_server(
    pg_deps: Container, database: Database, fmt: str
) -> None:
    """Cancelled while PostgreSQL runs a ten-minute statement (no statement timeout): the
    attempt ends, the export is failed/cancelled, and the server no longer runs it."""
    record = record_request(
        pg_deps.exports,
        pg_deps.catalog,
        pg_deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "slow", by_name=True), fmt),
    )
    worker = Worker(pg_deps, worker_id="w")
    done = threading.Event()
    thread = threading.Thread(target=lambda: (worker.run_once(), done.set()), daemon=True)
    thread.start()
    while _running(database) == 0:
        assert not done.is_set(), pg_deps.exports.get_export(record.id)
        time.sleep(0.05)
    pg_deps.exports.cancel(record.id, now=pg_deps.clock.now())
    assert done.wait(60), "the attempt kept running after the cancel"
    thread.join()
    final = pg_deps.exports.get_export(record.id)
    assert final is not None
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.CANCELLED)
    assert pg_deps.objects.incomplete_uploads(record.storage_key) == []
    assert worker.outcomes == {"lost": 1}
    assert _running(database) == 0
