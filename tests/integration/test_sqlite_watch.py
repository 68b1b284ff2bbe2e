"""SQLite wake-ups: a request committed by another process wakes an idle worker at once."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.store.engine import create_engine
from qexport.store.sqlite_watch import SqliteChangeWatcher
from qexport.worker.loop import Worker
from tests.e2e.conftest import wait_for
from tests.fakes import FixedSources, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.stores import SqlMetadataStore
from tests.unit.fakes import FakeSource

ALICE = Requester("alice", "w1")


def test_a_request_wakes_an_idle_worker(sqlite_store: SqlMetadataStore, tmp_path: Path) -> None:
    """With a 60 s poll interval, a request made through another connection is still claimed
    and done at once: the worker's watch sees the commit."""
    url = sqlite_store.engine.url.render_as_string()
    sqlite_store.add_query(Query(str(uuid.uuid4()), "w1", "q", "select 1", "fake"))
    settings = Settings(data_dir=tmp_path, database_url=url, poll_seconds=60)
    deps = container_of(
        store=SqlMetadataStore(create_engine(url)),
        objects=InMemoryObjectStore(),
        sources=FixedSources({"fake": FakeSource()}),
        clock=SystemClock(),
        settings=settings,
    )
    worker = Worker(deps, worker_id="w")
    watcher = bootstrap.listener(settings, worker.wake)
    assert isinstance(watcher, SqliteChangeWatcher)
    watcher.start()
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: not sqlite_store.has_unsettled(), timeout=10)  # idle, polling
        record = record_request(
            sqlite_store,
            sqlite_store,
            deps.clock,
            ALICE,
            RequestExport(SubjectRef("query", "q", by_name=True), "csv"),
        )
        done = wait_for(
            lambda: (r := sqlite_store.get_export(record.id)) and r.settled and r, timeout=20
        )
        assert done.status is Status.SUCCEEDED
        assert watcher.received >= 1
    finally:
        worker.stop(grace_seconds=1)
        thread.join()
        watcher.stop()


def test_a_claim_that_finds_nothing_wakes_nobody(tmp_path: Path) -> None:
    """Only commits that change the database wake workers: an empty claim transaction (what
    every woken slot runs when there is nothing to do) does not, so idle workers do not keep
    waking each other."""
    path = tmp_path / "q.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (v INTEGER)")
    woken = threading.Event()
    watcher = SqliteChangeWatcher(path, woken.set, interval=0.01)
    watcher.start()
    try:
        for _ in range(5):
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("UPDATE t SET v = 1 WHERE v = 2")
            writer.execute("COMMIT")
        assert not woken.wait(0.3)
        writer.execute("INSERT INTO t VALUES (1)")
        assert woken.wait(5)
    finally:
        watcher.stop()
        writer.close()
