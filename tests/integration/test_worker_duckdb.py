"""A worker on a real DuckDB source: cancelling stops a statement that is still running."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.duckdb.source import DuckDBSource
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of

ALICE = Requester("alice", "w1")
# Minutes of work for DuckDB, and no row before it is all done.
SLOW_SQL = "SELECT count(*) AS n FROM range(100000000000) a"


@pytest.fixture
def duck_deps(tmp_path: Path) -> Container:
    path = tmp_path / "data.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE people (email VARCHAR)")
    con.execute("INSERT INTO people VALUES ('alice@secret.example')")
    con.close()
    store = InMemoryMetadataStore()
    for name, sql in (("slow", SLOW_SQL), ("bad_cast", "SELECT email::INTEGER FROM people")):
        store.add_query(Query(str(uuid.uuid4()), "w1", name, sql, "data"))
    return container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"data": DuckDBSource("data", path)}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path, lease_seconds=0.6, statement_timeout_seconds=120),
    )


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_cancel_interrupts_a_running_statement(duck_deps: Container, fmt: str) -> None:
    """Cancelled while DuckDB is still computing: the attempt ends within seconds, not at
    the 120 s statement timeout, and the worker is free again."""
    record = record_request(
        duck_deps.exports,
        duck_deps.catalog,
        duck_deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "slow", by_name=True), fmt),
    )
    worker = Worker(duck_deps, worker_id="w")
    done = threading.Event()
    thread = threading.Thread(target=lambda: (worker.run_once(), done.set()))
    thread.start()
    deadline = time.monotonic() + 10
    while duck_deps.exports.get_export(record.id).status is not Status.RUNNING:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # well into the statement
    duck_deps.exports.cancel(record.id, now=duck_deps.clock.now())
    assert done.wait(15), "the attempt kept running after the cancel"
    thread.join()
    final = duck_deps.exports.get_export(record.id)
    assert final is not None
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.CANCELLED)
    assert duck_deps.objects.incomplete_uploads(record.storage_key) == []
    assert worker.outcomes == {"lost": 1}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_failure_details_carry_no_row_data(duck_deps: Container, fmt: str) -> None:
    """A conversion error names the problem but not the value from the row."""
    record = record_request(
        duck_deps.exports,
        duck_deps.catalog,
        duck_deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "bad_cast", by_name=True), fmt),
    )
    Worker(duck_deps, worker_id="w").run_once()
    final = duck_deps.exports.get_export(record.id)
    assert final is not None
    assert final.failure_code is FailureCode.QUERY_INVALID
    assert final.failure_detail is not None
    assert "Conversion Error" in final.failure_detail
    assert "secret" not in final.failure_detail
