"""OneRead, the API's hottest reads, each one statement outside a transaction: its rows hold
what a Connection returns in a transaction, the connection it used goes back to the pool as
it came, a database that cannot be reached is reported unavailable, and nothing reads or
writes on an event loop."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from qexport.domain.exports import Result
from qexport.domain.failures import MetadataUnavailableError
from qexport.store.engine import (
    create_engine,
    read_transaction,
    serve_on_this_loop,
    transaction,
)
from qexport.store.reads import OneRead
from qexport.store.tables.accounts import users, workspaces
from qexport.store.tables.exports import export_events, exports
from tests.support.factories import new_export
from tests.support.queue_helpers import claim
from tests.support.stores import SqlMetadataStore

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(
    request: pytest.FixtureRequest, sqlite_template: Path, tmp_path: Path
) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        shutil.copy(sqlite_template, tmp_path / "qexport.db")
        url = f"sqlite:///{tmp_path / 'qexport.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    engine = create_engine(url)
    yield engine
    engine.dispose()


def _both(engine: sa.Engine, stmt: sa.Select[Any], params: dict[str, Any]) -> tuple[Any, Any]:
    with engine.connect() as conn:
        expected = conn.execute(stmt, params).all()
    return OneRead(stmt).all(engine, params), expected


def test_rows_hold_what_a_connection_returns(engine: sa.Engine) -> None:
    """Timestamps (aware, UTC), JSON (nested, non-ASCII), integers, NULLs and labels: the same
    values under the same keys, on both databases."""
    store = SqlMetadataStore(engine)
    parameters = {"city": "Zürich", "ids": [1, 2], "none": None}
    settled = store.insert_export(replace(new_export(NOW), parameters=parameters))
    store.insert_export(new_export(NOW + timedelta(seconds=1)))  # queued: NULLs throughout
    running = claim(store, settled.id, worker_id="w", now=NOW, lease_seconds=60)
    assert running is not None
    assert running.lease_token is not None
    result = Result(size_bytes=12, row_count=3, sha256="ab" * 32)
    assert store.succeed(
        settled.id, running.lease_token, now=NOW, result=result, expires_at=NOW + timedelta(1)
    )
    statements: list[tuple[sa.Select[Any], dict[str, Any]]] = [
        (sa.select(exports).order_by(exports.c.created_at), {}),
        (sa.select(export_events).order_by(export_events.c.id), {}),
        (
            sa.select(exports.c.id.label("export"), exports.c.completed_at.label("done"))
            .where(exports.c.created_at >= sa.bindparam("since_", type_=exports.c.created_at.type))
            .order_by(exports.c.id),
            {"since_": NOW},
        ),
    ]
    for stmt, params in statements:
        got, expected = _both(engine, stmt, params)
        assert [tuple(row) for row in got] == [tuple(row) for row in expected]
        assert [row._mapping for row in got] == [dict(row._mapping) for row in expected]
    got, _ = _both(engine, statements[0][0], {})
    assert got[0].parameters == parameters
    assert got[0].completed_at == NOW
    assert got[0].completed_at.tzinfo is UTC
    assert got[1].completed_at is None
    assert got[1].size_bytes is None


def test_first_and_scalar_of_nothing_are_none(engine: sa.Engine) -> None:
    read = OneRead(sa.select(users.c.email).where(users.c.id == sa.bindparam("id_")))
    assert read.first(engine, {"id_": "nobody"}) is None
    assert read.scalar(engine, {"id_": "nobody"}) is None
    assert read.all(engine, {"id_": "nobody"}) == []


def _insert_then_fail(engine: sa.Engine) -> None:
    with transaction(engine) as conn:
        conn.execute(workspaces.insert().values(id="half", created_at=NOW))
        raise RuntimeError("the rest of the work failed")


def test_a_read_leaves_the_next_transaction_whole(engine: sa.Engine) -> None:
    """The read runs outside a transaction, yet the connection it used goes back to the pool
    as it came: the next transaction on it is still all or nothing, and the read saw what was
    committed."""
    ids = OneRead(sa.select(workspaces.c.id).order_by(workspaces.c.id))
    with transaction(engine) as conn:
        conn.execute(workspaces.insert().values(id="acme", created_at=NOW))
    assert [row.id for row in ids.all(engine)] == ["acme"]
    with pytest.raises(RuntimeError):
        _insert_then_fail(engine)  # on the connection the read used: one, used in turn
    assert [row.id for row in ids.all(engine)] == ["acme"]


def test_an_unreachable_database_is_reported_unavailable() -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1:1/none")
    try:
        with pytest.raises(MetadataUnavailableError, match="unavailable"):
            OneRead(sa.select(workspaces.c.id)).all(engine)
    finally:
        engine.dispose()


def _end_backends(pg_url: str) -> int:
    """End every other connection to the test's database, as a restart would, and wait until
    they are gone (their goodbye sent); how many there were."""
    others = "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
    name = sa.make_url(pg_url).database
    with psycopg.connect(pg_url, autocommit=True) as admin:
        ended = admin.execute(f"SELECT count(pg_terminate_backend(pid)) {others}", (name,))
        count = ended.fetchone()
        deadline = time.monotonic() + 10
        while admin.execute(f"SELECT count(*) {others}", (name,)).fetchone() != (0,):
            assert time.monotonic() < deadline, "the ended connections did not go"
            time.sleep(0.01)
    assert count is not None
    return int(count[0])


def test_connections_the_server_ended_are_replaced(pg_url: str) -> None:
    """The server ends every connection of the database (a restart, a failover): the next read
    answers on a new connection instead of failing on a dead one."""
    engine = create_engine(pg_url)
    read = OneRead(sa.select(sa.func.pg_backend_pid().label("pid")))
    try:
        first = read.scalar(engine)
        assert _end_backends(pg_url) >= 1
        assert read.scalar(engine) not in (None, first)
    finally:
        engine.dispose()


def _add_workspace(engine: sa.Engine) -> None:
    with transaction(engine) as conn:
        conn.execute(workspaces.insert().values(id="acme", created_at=NOW))


def _workspace_names(engine: sa.Engine) -> list[str]:
    with read_transaction(engine) as conn:
        return list(conn.execute(sa.select(workspaces.c.id)).scalars())


def test_no_read_or_write_runs_on_an_event_loop(engine: sa.Engine) -> None:
    """A read, a transaction and a read transaction are refused on a thread that runs an
    event loop that serves requests, where waiting for the database would hold every request
    of the loop; the same calls sent to a thread answer, and no connection is left out of the
    pool. A loop no server marked (a browser driver's, in the tests) is none of its concern."""
    count = OneRead(sa.select(sa.func.count()).select_from(workspaces))
    calls: list[Callable[[], object]] = [
        lambda: count.scalar(engine),
        lambda: _add_workspace(engine),
        lambda: _workspace_names(engine),
    ]

    async def on_another_loop() -> tuple[object, list[str]]:
        return count.scalar(engine), _workspace_names(engine)  # no server serves on this loop

    assert asyncio.run(on_another_loop()) == (0, [])

    async def on_the_loop() -> int:
        serve_on_this_loop()
        for call in calls:
            with pytest.raises(RuntimeError, match="event loop"):
                call()
        await asyncio.to_thread(_add_workspace, engine)
        return int(await asyncio.to_thread(count.scalar, engine))

    assert asyncio.run(on_the_loop()) == 1
    assert _workspace_names(engine) == ["acme"]
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
