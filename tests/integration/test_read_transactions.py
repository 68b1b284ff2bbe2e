"""Reads are read transactions: on SQLite they go ahead while a writer holds the database's
write lock, and what may write still takes that lock first; on PostgreSQL a read transaction
is READ ONLY, so a write classified as a read is refused rather than slipped through."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from qexport.domain.failures import MetadataUnavailableError
from qexport.store import engine as engine_module
from qexport.store.accounts import SqlAccountStore
from qexport.store.engine import create_engine, read_transaction
from qexport.store.stats import read_stats
from qexport.store.tables import workspaces
from tests.stores import SqlMetadataStore

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
