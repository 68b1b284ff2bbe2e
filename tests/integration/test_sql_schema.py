"""The database itself refuses illegal states, whatever code writes to it."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from qexport.domain.exports import Result
from qexport.store.tables import metadata
from qexport.store.tables.exports import export_events, exports
from tests.fakes import FrozenClock
from tests.support import queue_helpers
from tests.support.factories import new_export
from tests.support.stores import SqlMetadataStore


def _request(store: SqlMetadataStore, clock: FrozenClock) -> str:
    return store.insert_export(new_export(clock.now())).id


def test_migrations_create_exactly_the_declared_schema(sql_store: SqlMetadataStore) -> None:
    """`qexport db upgrade` yields the schema of store/tables/, with nothing missing or extra."""
    with sql_store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_database_refuses_a_succeeded_record_without_its_result(
    sql_store: SqlMetadataStore, clock: FrozenClock
) -> None:
    """Invariant 2 is a CHECK constraint: succeeded without sha256 and size cannot be written."""
    export_id = _request(sql_store, clock)
    claimed = queue_helpers.claim(
        sql_store, export_id, worker_id="w", now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    with pytest.raises(sa.exc.IntegrityError), sql_store.engine.begin() as conn:
        conn.execute(exports.update().where(exports.c.id == export_id).values(status="succeeded"))


def test_database_refuses_any_update_of_a_settled_record(
    sql_store: SqlMetadataStore, clock: FrozenClock
) -> None:
    """Invariant 1 is a trigger: even a raw UPDATE of a settled row is aborted."""
    export_id = _request(sql_store, clock)
    claimed = queue_helpers.claim(
        sql_store, export_id, worker_id="w", now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    sql_store.succeed(
        export_id,
        claimed.lease_token,
        now=clock.now(),
        result=Result(1, 1, "0" * 64),
        expires_at=clock.now() + timedelta(days=1),
    )
    for values in ({"status": "running"}, {"status": "queued", "attempt": 0}, {"progress_rows": 5}):
        with (
            pytest.raises(sa.exc.DatabaseError, match="settled export is immutable"),
            sql_store.engine.begin() as conn,
        ):
            conn.execute(exports.update().where(exports.c.id == export_id).values(**values))


def test_export_events_are_written_with_each_transition_and_never_changed(
    sql_store: SqlMetadataStore, clock: FrozenClock
) -> None:
    """Each transition appends its event in its own transaction; the database refuses any
    UPDATE or DELETE of an event, so the history cannot be rewritten."""
    export_id = _request(sql_store, clock)
    claimed = queue_helpers.claim(
        sql_store, export_id, worker_id="w1", now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    clock.advance(5)
    result = Result(size_bytes=3, row_count=1, sha256="0" * 64)
    assert sql_store.succeed(
        export_id, claimed.lease_token, now=clock.now(), result=result, expires_at=clock.now()
    )
    events = sql_store.list_events(export_id)
    assert [(e.kind.value, e.status.value, e.attempt, e.worker_id) for e in events] == [
        ("requested", "queued", 0, None),
        ("claimed", "running", 1, "w1"),
        ("succeeded", "succeeded", 1, "w1"),
    ]
    assert events[2].at - events[1].at == timedelta(seconds=5)
    for statement in (
        export_events.update().values(kind="failed"),
        export_events.delete(),
    ):
        with pytest.raises(sa.exc.DatabaseError), sql_store.engine.begin() as conn:
            conn.execute(statement.where(export_events.c.export_id == export_id))
    assert len(sql_store.list_events(export_id)) == 3
