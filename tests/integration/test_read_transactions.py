"""Reads are read transactions: on SQLite they go ahead while a writer holds the database's
write lock, and what may write still takes that lock first (one process's writers in turns);
on PostgreSQL a read transaction is READ ONLY, so a write classified as a read is refused
rather than slipped through. A server's threads keep their connections."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from qexport.domain.failures import MetadataUnavailableError
from qexport.http.one_hop import API_THREADS
from qexport.store import engine as engine_module
from qexport.store.accounts import SqlAccountStore
from qexport.store.engine import create_engine, read_transaction, transaction
from qexport.store.stats import read_stats
from qexport.store.tables.accounts import workspaces
from tests.support.stores import SqlMetadataStore

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def impatient_sqlite(
    sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, sa.Engine]]:
    """A migrated SQLite database whose engine gives up on the write lock after 50 ms."""
    monkeypatch.setattr(engine_module, "_SQLITE_BUSY_MS", 50)
    path = tmp_path / "qexport.db"
    shutil.copy(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}")
    yield path, engine
    engine.dispose()


def test_reads_go_ahead_while_another_connection_holds_the_write_lock(
    impatient_sqlite: tuple[Path, sa.Engine],
) -> None:
    """With a writer (another process, as a worker would be) holding the lock, authenticating,
    reading exports, events and /metrics all answer; a write still waits for the lock and,
    past the busy timeout, reports the database unavailable."""
    path, engine = impatient_sqlite
    store, accounts = SqlMetadataStore(engine), SqlAccountStore(engine)
    accounts.ensure_workspace("acme", now=NOW)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert accounts.token_holder("0000000000000000") is None
        assert accounts.member("acme", "nobody") is None
        assert store.list_exports(workspace_id="acme") == []
        assert store.get_export("missing") is None
        assert store.list_events("missing") == []
        assert read_stats(engine, NOW).queue_depth == 0
        with pytest.raises(MetadataUnavailableError):
            accounts.ensure_workspace("other", now=NOW)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert accounts.ensure_workspace("other", now=NOW)


def test_a_read_transaction_refuses_a_write_on_postgresql(
    postgresql_store: SqlMetadataStore,
) -> None:
    """A statement that writes inside read_transaction fails and leaves nothing behind."""
    with (
        pytest.raises(sa.exc.DBAPIError, match="read-only transaction"),
        read_transaction(postgresql_store.engine) as conn,
    ):
        conn.execute(workspaces.insert().values(id="acme", created_at=NOW))
    with read_transaction(postgresql_store.engine) as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(workspaces)).scalar() == 0


def test_one_processs_writers_take_turns_and_readers_do_not_wait(
    impatient_sqlite: tuple[Path, sa.Engine],
) -> None:
    """Eight threads writing at once all get their turn (none gives up on the lock); while
    one of this process's threads holds a write transaction, a read on another thread goes
    ahead, and a write on another waits its turn and, past the busy timeout, reports the
    database unavailable instead of hanging."""
    _path, engine = impatient_sqlite
    accounts = SqlAccountStore(engine)
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda i: accounts.ensure_workspace(f"w{i}", now=NOW), range(8)))
    assert all(made)
    holding, done = threading.Event(), threading.Event()

    def hold_a_write() -> None:
        with transaction(engine):
            holding.set()
            done.wait(10)

    holder = threading.Thread(target=hold_a_write)
    holder.start()
    try:
        assert holding.wait(10)
        with ThreadPoolExecutor(1) as other:
            assert other.submit(accounts.member, "w0", "nobody").result(5) is None
            waited = other.submit(accounts.ensure_workspace, "late", now=NOW)
            with pytest.raises(MetadataUnavailableError):
                waited.result(5)
    finally:
        done.set()
        holder.join()
    assert accounts.ensure_workspace("late", now=NOW)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_servers_threads_keep_their_connections(
    backend: str, sqlite_template: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """As many transactions at once as a server has threads, twice over, open one connection
    each the first time and none the second: no request pays for a connection of its own."""
    if backend == "sqlite":
        shutil.copy(sqlite_template, tmp_path / "qexport.db")
        engine = create_engine(f"sqlite:///{tmp_path / 'qexport.db'}")
    else:
        engine = create_engine(request.getfixturevalue("postgresql_store").engine.url)
    opened = []
    sa.event.listen(engine, "connect", lambda *_: opened.append(1))
    together = threading.Barrier(API_THREADS)

    def read(_index: int) -> None:
        with read_transaction(engine) as conn:
            conn.execute(sa.select(sa.func.count()).select_from(workspaces))
            together.wait(10)

    try:
        for _ in range(2):
            with ThreadPoolExecutor(API_THREADS) as pool:
                list(pool.map(read, range(API_THREADS)))
        assert len(opened) == API_THREADS
    finally:
        engine.dispose()


def _insert_then_fail(engine: sa.Engine) -> None:
    with transaction(engine) as conn:
        conn.execute(workspaces.insert().values(id="half", created_at=NOW))
        raise RuntimeError("the rest of the work failed")


def test_writers_of_two_processes_take_turns_on_the_file_beside_the_database(
    impatient_sqlite: tuple[Path, sa.Engine],
) -> None:
    """Another process (here: another engine, with its own descriptor) holding a write turn
    keeps this one's writes waiting, and past the busy timeout they report the database
    unavailable; once it lets go, they go ahead. Reads never wait for it."""
    path, engine = impatient_sqlite
    other = create_engine(f"sqlite:///{path}")
    accounts = SqlAccountStore(engine)
    try:
        with transaction(other):
            assert accounts.member("acme", "nobody") is None
            with pytest.raises(MetadataUnavailableError, match="lock is held"):
                accounts.ensure_workspace("acme", now=NOW)
        assert accounts.ensure_workspace("acme", now=NOW)
        assert path.with_name(path.name + "-writer").stat().st_mode & 0o077 == 0
    finally:
        other.dispose()
