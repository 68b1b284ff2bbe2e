"""Migration 0020 on SQLite and PostgreSQL: the events recorded before keys are numbered and
keep verifying with their plain SHA-256 hashes, new ones are keyed after them, and the
unkeyed stretch can no longer be shortened unseen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from qexport.domain.audit import (
    GENESIS,
    Action,
    ActorKind,
    AuditEvent,
    Stretch,
    unkeyed,
    verify_chain,
)
from qexport.store.audit.log import SqlAuditLog
from qexport.store.engine import MIGRATIONS
from qexport.store.tables.audit import audit_anchors, audit_events
from tests.fakes.audit import TEST_AUDIT_KEYS
from tests.support.stores import SqlMetadataStore

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _to(engine: sa.Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        if revision == "head":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)


def _event(n: int, workspace: str) -> AuditEvent:
    return AuditEvent(
        T0 + timedelta(minutes=n),
        workspace,
        ActorKind.USER,
        "u1",
        Action.FILE_DOWNLOADED,
        "export",
        f"{workspace}-{n}",
        details={"bytes": n},
    )


def _unkeyed_chain(engine: sa.Engine, workspace: str, count: int, prev: str = GENESIS) -> None:
    """`count` events chained as qexport wrote them before keys."""
    rows = []
    for n in range(count):
        rows.append(row := unkeyed(_event(n, workspace), prev, T0))
        prev = row["hash"]
    with engine.begin() as conn:
        conn.execute(audit_events.insert(), rows)


def test_events_from_before_keys_are_numbered_and_verify_before_the_keyed_ones(
    sql_store: SqlMetadataStore,
) -> None:
    """A 0019 database with an unkeyed chain, and one that an old prune left anchored: after
    the upgrade each event has its place (from 1 after an old anchor, whose sequence is 0),
    new events are keyed after them (on PostgreSQL by the database's function), and verify
    names the two stretches; deleting unkeyed events from the start is then found."""
    engine = sql_store.engine
    _to(engine, "0019")
    _unkeyed_chain(engine, "acme", 5)
    with engine.begin() as conn:
        conn.execute(
            audit_anchors.insert(),
            {"workspace_id": "beta", "anchor_hash": "f" * 64, "pruned_before": T0},
        )
    _unkeyed_chain(engine, "beta", 2, prev="f" * 64)

    _to(engine, "head")

    log = SqlAuditLog(engine)
    assert [e.seq for e in log.chain("acme")] == [1, 2, 3, 4, 5]
    assert [(e.seq, e.key_id) for e in log.chain("beta")] == [(1, None), (2, None)]
    assert log.anchor("beta").seq == 0
    for n in (5, 6):
        assert log.record(_event(n, "acme"))
    assert log.record(_event(2, "beta"))
    check = verify_chain("acme", log.anchor("acme"), log.chain("acme"), TEST_AUDIT_KEYS)
    assert (check.broken, check.problem, check.verified) == (None, None, 7)
    key_id = TEST_AUDIT_KEYS.current.key_id
    assert check.stretches == (Stretch(None, 1, 5), Stretch(key_id, 6, 7))
    beta = verify_chain("beta", log.anchor("beta"), log.chain("beta"), TEST_AUDIT_KEYS)
    assert (beta.broken, beta.problem, beta.verified) == (None, None, 3)

    # The first two unkeyed events removed, the chain made to start after them, the rest
    # renumbered: the first keyed event still says it is the sixth.
    events = list(log.chain("acme"))
    with engine.begin() as conn:
        _drop_triggers(conn)
        conn.execute(audit_events.delete().where(audit_events.c.id.in_([e.id for e in events[:2]])))
        for e in events[2:5]:
            conn.execute(
                audit_events.update().where(audit_events.c.id == e.id).values(seq=e.seq - 2)
            )
        conn.execute(
            audit_anchors.insert(),
            {"workspace_id": "acme", "anchor_hash": events[1].hash, "pruned_before": T0},
        )
    check = verify_chain("acme", log.anchor("acme"), log.chain("acme"), TEST_AUDIT_KEYS)
    assert check.broken is not None
    assert (check.broken.id, check.reason) == (events[5].id, "sequences 4-5 are missing before it")


def _drop_triggers(conn: sa.Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("DROP TRIGGER audit_events_append_only ON audit_events")
    else:
        conn.exec_driver_sql("DROP TRIGGER audit_events_no_update")
        conn.exec_driver_sql("DROP TRIGGER audit_events_no_delete")
