"""`qexport serve --workers 1` while another session locks the metadata database: the reads
that wait for the lock end with 503 and Retry-After at the server's deadline, while
`/healthz` answers and `/readyz` says the database is not ready (within its second); once the
lock goes, everything answers again. On PostgreSQL the lock is `LOCK TABLE exports IN ACCESS
EXCLUSIVE MODE`; on SQLite (WAL) another process holds every read lock of the WAL index, so
that no reader can begin."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import psycopg
import pytest
import sqlalchemy as sa

from qexport.sources.demo_data import build_demo_database
from qexport.store.engine import create_engine
from tests.e2e.conftest import Env, wait_for
from tests.e2e.test_serve import bearer, new_token, start_server
from tests.support.stores import SqlMetadataStore

# The server's deadline on the database: long enough that the checks made while the reads
# wait are made before it passes, on a busy machine too.
DEADLINE_SECONDS = 6
# Each kind once, no more than the server's request threads (one_hop.API_THREADS): every one
# of them waits on the lock.
READS = ("export", "list", "events")
# SQLite's WAL index: its locks start at byte 120; the five read locks are bytes 123-127.
_SQLITE_READ_LOCKS = (123, 5)
_HOLD_READ_LOCKS = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, int(sys.argv[3]), int(sys.argv[2]))
print("locked", flush=True)
sys.stdin.read()
"""


@dataclass
class Served:
    backend: str
    env: Env
    url: str
    token: str
    export_id: str
    lock: Callable[[], AbstractContextManager[None]]
    waiting_on_the_lock: Callable[[], bool]


def _driver_url(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _table_locked(pg_url: str) -> Iterator[None]:
    with psycopg.connect(_driver_url(pg_url)) as locker:
        locker.execute("SET idle_in_transaction_session_timeout = '60s'")  # never left behind
        locker.execute("LOCK TABLE exports IN ACCESS EXCLUSIVE MODE")
        yield
        locker.rollback()


def _lock_waiters(pg_url: str) -> bool:
    with psycopg.connect(_driver_url(pg_url), autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return found is not None and found[0] >= 1


@contextmanager
def _read_locks_held(database: Path) -> Iterator[None]:
    """Every read lock of the WAL index, held by another process (POSIX locks are a
    process's: this one's SQLite connections would release them)."""
    start, length = _SQLITE_READ_LOCKS
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_READ_LOCKS, f"{database}-shm", str(start), str(length)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        assert holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """One server process on a fresh installation, a token of an admin, a queued export."""
    build_demo_database(tmp_path / "demo.duckdb", orders=100)
    extra = {"QEXPORT_DATABASE_TIMEOUT_SECONDS": str(DEADLINE_SECONDS)}
    store = None
    if request.param == "postgresql":
        pg_url: str = request.getfixturevalue("pg_url")
        extra |= {"QEXPORT_DATABASE_URL": pg_url, "QEXPORT_SECRET_KEY": "k" * 64}
        store = SqlMetadataStore(create_engine(pg_url))
    env = Env(tmp_path, extra=extra, _store=store)
    try:
        env.run("db", "upgrade")
        env.add_query("few_orders", "SELECT order_id FROM orders LIMIT 3")
        export_id = env.request("few_orders", "csv")
        token = new_token(env, f"ann-{uuid.uuid4().hex[:6]}@example.com", "admin")
        url, _ = start_server(env, "--workers", "1")
        if request.param == "postgresql":
            lock = lambda: _table_locked(pg_url)  # noqa: E731 - one line each, side by side
            waiting = lambda: _lock_waiters(pg_url)  # noqa: E731
        else:
            lock = lambda: _read_locks_held(tmp_path / "qexport.db")  # noqa: E731
            waiting = lambda: True  # noqa: E731 - nothing to see from outside: they just wait
        yield Served(request.param, env, url, token, export_id, lock, waiting)
    finally:
        env.stop_all()
        env.store.engine.dispose()


def _paths(served: Served) -> dict[str, str]:
    return {
        "export": f"/api/v1/exports/{served.export_id}",
        "list": "/api/v1/exports?limit=5",
        "events": f"/api/v1/exports/{served.export_id}/events",
    }


def test_a_locked_database_holds_its_readers_not_the_server(served: Served) -> None:
    """While the lock is held, the reads wait; `/healthz` answers (200) and `/readyz` says
    the database is not ready (503, `timed_out`) before any of them has ended; they end with
    503 `database_unavailable` and Retry-After at the deadline. On PostgreSQL, reads of the
    tables that are not locked answer meanwhile. Once the lock goes, every read answers, and
    the server is ready again."""
    paths = _paths(served)
    with httpx2.Client(base_url=served.url, headers=bearer(served.token), timeout=60) as api:
        assert api.get(paths["export"]).status_code == 200  # warm: the token's last use written
        with ThreadPoolExecutor(len(READS)) as pool, served.lock():
            reads: list[Future[httpx2.Response]] = [
                pool.submit(api.get, paths[kind]) for kind in READS
            ]
            wait_for(served.waiting_on_the_lock, timeout=30, interval=0.05)
            assert not any(read.done() for read in reads)  # they wait
            health = httpx2.get(f"{served.url}/healthz", timeout=30)
            ready = httpx2.get(f"{served.url}/readyz", timeout=30)
            # On PostgreSQL only `exports` is locked: the queries answer.
            others = api.get("/api/v1/queries") if served.backend == "postgresql" else None
            still_waiting = [not read.done() for read in reads]
            answers = [read.result(timeout=60) for read in reads]
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"] == "timed_out"
        assert ready.json()["checks"]["storage"] == "ok"
        assert all(still_waiting), "a read ended before /healthz and /readyz had answered"
        if others is not None:
            assert others.status_code == 200
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["code"] == "database_unavailable"
            assert int(answer.headers["Retry-After"]) > 0

        def all_answer() -> bool:
            return all(api.get(path).status_code == 200 for path in paths.values())

        assert wait_for(all_answer, timeout=60, interval=0.2)
        assert api.get(paths["export"]).json()["id"] == served.export_id

        def ready_again() -> bool:
            return httpx2.get(f"{served.url}/readyz", timeout=30).status_code == 200

        assert wait_for(ready_again, timeout=60, interval=0.2)
