"""PostgreSQL wake-ups: a request NOTIFYs, a listening worker claims without waiting to poll."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import psycopg
import sqlalchemy as sa

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.store.notify import CHANNEL, PgListener
from qexport.worker.loop import Worker
from tests.e2e.conftest import wait_for
from tests.fakes import FixedSources, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.stores import SqlMetadataStore
from tests.unit.fakes import FakeSource

ALICE = Requester("alice", "w1")


def _libpq(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(False)


def test_a_request_wakes_an_idle_worker(
    postgresql_store: SqlMetadataStore, pg_url: str, tmp_path: Path
) -> None:
    """With a 60 s poll interval, a new export is still claimed and done at once: the
    request's NOTIFY wakes the worker."""
    postgresql_store.add_query(Query(str(uuid.uuid4()), "w1", "q", "select 1", "fake"))
    deps = container_of(
        store=postgresql_store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"fake": FakeSource()}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path, poll_seconds=60),
    )
    worker = Worker(deps, worker_id="w")
    listener = PgListener(pg_url, worker.wake)
    listener.start()
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: not postgresql_store.has_unsettled(), timeout=10)  # idle, polling
        with psycopg.connect(_libpq(pg_url), autocommit=True) as probe:
            probe.execute(f"LISTEN {CHANNEL}")  # the listener is up once it hears this
            wait_for(lambda: listener_ready(probe), timeout=10)
        record = record_request(
            postgresql_store,
            postgresql_store,
            deps.clock,
            ALICE,
            RequestExport(SubjectRef("query", "q", by_name=True), "csv"),
        )
        done = wait_for(
            lambda: (r := postgresql_store.get_export(record.id)) and r.settled and r, timeout=20
        )
        assert done.status is Status.SUCCEEDED
        assert listener.received >= 1
    finally:
        worker.stop(grace_seconds=1)
        thread.join()
        listener.stop()


def listener_ready(probe: psycopg.Connection[tuple[object, ...]]) -> bool:
    """True once a backend other than `probe` is listening on the channel."""
    row = probe.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
        (f"LISTEN {CHANNEL}%",),
    ).fetchone()
    return bool(row and row[0])


def test_notifications_can_be_turned_off(pg_url: str) -> None:
    """QEXPORT_PG_NOTIFY=false (for PgBouncer): requests send no NOTIFY."""
    engine = sa.create_engine(sa.make_url(pg_url).set(drivername="postgresql+psycopg"))
    quiet = SqlMetadataStore(engine, notify=False)
    quiet.add_query(Query(str(uuid.uuid4()), "w1", "q", "select 1", "fake"))
    with psycopg.connect(_libpq(pg_url), autocommit=True) as listen:
        listen.execute(f"LISTEN {CHANNEL}")
        record_request(
            quiet,
            quiet,
            SystemClock(),
            ALICE,
            RequestExport(SubjectRef("query", "q", by_name=True), "csv"),
        )
        assert list(listen.notifies(timeout=0.5)) == []
        loud = SqlMetadataStore(engine)
        record = record_request(
            loud,
            loud,
            SystemClock(),
            ALICE,
            RequestExport(SubjectRef("query", "q", by_name=True), "csv"),
        )
        heard = list(listen.notifies(timeout=2, stop_after=1))
        assert [n.payload for n in heard] == [record.id]
    engine.dispose()
