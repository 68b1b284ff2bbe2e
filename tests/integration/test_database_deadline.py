"""A server's metadata database has a deadline (`create_engine(deadline=)`, from
QEXPORT_DATABASE_TIMEOUT_SECONDS): a read or a write that waits longer for a lock gives up and
is reported unavailable, nothing half written, and answers again once the lock is gone; a
migration, which may rightly wait for another, is not bound by it."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from qexport.domain.failures import MetadataUnavailableError
from qexport.store.engine import (
    create_engine,
    current_revision,
    head_revision,
    migrate,
    read_transaction,
)
from qexport.store.reads import OneRead
from qexport.store.tables.accounts import workspaces
from qexport.store.tables.exports import exports
from tests.support.factories import new_export
from tests.support.stores import SqlMetadataStore

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
DEADLINE = 0.5
# How long the other session holds its lock at most: past it, a call with no deadline would
# have answered, so that the tests fail rather than hang without one.
HELD_AT_MOST = "10s"
_EXPORT = OneRead(sa.select(exports).where(exports.c.id == sa.bindparam("id_")))
_WORKSPACES = OneRead(sa.select(sa.func.count()).select_from(workspaces))
_EXPORTS = OneRead(sa.select(sa.func.count()).select_from(exports))


def _driver_url(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[SqlMetadataStore]:
    engine = create_engine(pg_url, deadline=DEADLINE)
    yield SqlMetadataStore(engine)
    engine.dispose()


def _exports_count(pg_url: str) -> int:
    with psycopg.connect(_driver_url(pg_url)) as conn:
        found = conn.execute("SELECT count(*) FROM exports").fetchone()
    assert found is not None
    return int(found[0])


def test_reads_and_writes_give_up_while_a_table_is_locked(
    pg_url: str, pg_store: SqlMetadataStore
) -> None:
    """Another session holds `exports` in ACCESS EXCLUSIVE mode: a read of an export and a
    request of one fail as unavailable after the deadline, the request writing nothing; a read
    of another table answers meanwhile; once the lock goes, both answer."""
    engine = pg_store.engine
    kept = pg_store.insert_export(new_export(NOW))
    with psycopg.connect(_driver_url(pg_url)) as locker:
        locker.execute(f"SET idle_in_transaction_session_timeout = '{HELD_AT_MOST}'")
        locker.execute("LOCK TABLE exports IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(MetadataUnavailableError, match="unavailable"):
            _EXPORT.first(engine, {"id_": kept.id})
        with pytest.raises(MetadataUnavailableError, match="unavailable"):
            pg_store.insert_export(new_export(NOW))
        assert _WORKSPACES.scalar(engine) is not None
        locker.rollback()
    assert _exports_count(pg_url) == 1
    found = _EXPORT.first(engine, {"id_": kept.id})
    assert found is not None
    assert found.id == kept.id
    pg_store.insert_export(new_export(NOW))
    assert _exports_count(pg_url) == 2


def test_a_migration_waits_past_the_deadline(pg_url: str, pg_store: SqlMetadataStore) -> None:
    """Another process upgrading (holding the migrations' lock) for longer than the deadline:
    the upgrade waits for it, then finds the schema at its newest."""
    with psycopg.connect(_driver_url(pg_url), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(727274)")
        timer = threading.Timer(4 * DEADLINE, other.execute, ["SELECT pg_advisory_unlock_all()"])
        timer.start()
        try:
            migrate(pg_store.engine)
        finally:
            timer.join()
    assert current_revision(pg_store.engine) == head_revision()


def test_a_sqlite_writer_gives_up_at_the_deadline(sqlite_template: Path, tmp_path: Path) -> None:
    """Another connection holds SQLite's write lock: a transaction that writes gives up after
    the deadline (not after SQLite's 30 s), writing nothing, while reads answer beside it."""
    path = tmp_path / "qexport.db"
    shutil.copy(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}", deadline=DEADLINE)
    store = SqlMetadataStore(engine)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        # Released well before SQLite's own 30 s: without the deadline the write would wait
        # for it and succeed.
        timer = threading.Timer(6 * DEADLINE, other.execute, ["ROLLBACK"])
        timer.start()
        try:
            with pytest.raises(MetadataUnavailableError, match="unavailable"):
                store.insert_export(new_export(NOW))
            assert _WORKSPACES.scalar(engine) == 0
        finally:
            timer.join()
        assert _EXPORTS.scalar(engine) == 0
        store.insert_export(new_export(NOW))
        assert _EXPORTS.scalar(engine) == 1
    finally:
        other.close()
        engine.dispose()


def test_a_sqlite_statement_that_runs_past_the_deadline_is_interrupted(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """A read that would run for seconds (a scan, here a count to thirty million) is
    interrupted at the deadline and reported unavailable; the connection answers the next
    read at once."""
    path = tmp_path / "qexport.db"
    shutil.copy(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}", deadline=DEADLINE)
    slow = sa.text(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 30000000)"
        " SELECT count(*) FROM n"
    )
    try:
        with (
            pytest.raises(MetadataUnavailableError, match="unavailable"),
            read_transaction(engine) as conn,
        ):
            conn.execute(slow).scalar()
        assert _WORKSPACES.scalar(engine) == 0
    finally:
        engine.dispose()
