"""Migration 0017 fills the download totals from the download events already recorded, so
that an upgraded installation's /metrics counts the downloads made before it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from qexport.domain.audit import GENESIS, Action, ActorKind, AuditEvent, Outcome, unkeyed
from qexport.store.engine import MIGRATIONS
from qexport.store.tables.audit import audit_download_totals, audit_events
from tests.fakes import FrozenClock
from tests.support.stores import SqlMetadataStore


def _to(engine: sa.Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        if revision == "head":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)


def _download(
    clock: FrozenClock,
    workspace: str,
    details: dict[str, object],
    *,
    action: Action = Action.FILE_DOWNLOADED,
    actor: ActorKind = ActorKind.USER,
    outcome: Outcome = Outcome.OK,
) -> AuditEvent:
    return AuditEvent(
        clock.now(), workspace, actor, "u1", action, "export", "e1", outcome, details=details
    )


def test_the_upgrade_counts_the_downloads_recorded_before_it(
    sql_store: SqlMetadataStore, clock: FrozenClock
) -> None:
    """Downloads, bytes and link uses of the events an 0016 database holds, per workspace;
    refusals, 304s and other actions count for nothing."""
    engine = sql_store.engine
    _to(engine, "0016")
    events = [
        _download(clock, "acme", {"bytes": 100, "status": 200}),
        _download(clock, "acme", {"bytes": 10, "range": "bytes=0-9", "status": 206}),
        _download(clock, "acme", {"bytes": 0, "status": 304}),
        _download(clock, "acme", {"bytes": 0, "status": 410}, outcome=Outcome.REFUSED),
        _download(clock, "acme", {"status": 307}, action=Action.FILE_PRESIGNED),
        _download(clock, "other", {"bytes": 7, "status": 200}, actor=ActorKind.PUBLIC_LINK),
        _download(clock, "other", {"format": "csv"}, action=Action.EXPORT_REQUESTED),
    ]
    with engine.begin() as conn:
        conn.execute(audit_events.insert(), [unkeyed(e, GENESIS, clock.now()) for e in events])

    _to(engine, "head")

    t = audit_download_totals.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.workspace_id, t.downloads, t.bytes_sent, t.public_link_uses).order_by(
                t.workspace_id
            )
        ).all()
    assert [tuple(row) for row in rows] == [("acme", 3, 110, 0), ("other", 1, 7, 1)]
