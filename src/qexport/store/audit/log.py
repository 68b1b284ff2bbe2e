"""The audit trail on SQLAlchemy Core (the AuditLog port): events with no transaction of
their own written in a short one, the trail's reads, and pruning.

`SqlAuditLog.record` is for what has no transaction of its own (a download, a sign-in): the
events recorded at the same moment are written together, in one short transaction per
workspace, never failing the action; a failure to record is logged and counted.
`record_soon` hands an event to a writer thread instead, which writes the events given within
10 ms of each other together: for a download's event once its response is sent, which nothing
need wait for.

The database refuses UPDATE and DELETE of events (triggers in tables/audit.py). Pruning alone
may delete, through a path only its own transaction opens: `SET LOCAL qexport.audit_prune =
'on'` on PostgreSQL, the one-row `audit_prune_flag` set and cleared again within the
transaction on SQLite; either way no other transaction can see it open.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import structlog

from qexport.domain.audit import (
    GENESIS,
    Anchor,
    AuditEvent,
    AuditFilter,
    RecordedEvent,
    prune_events,
)
from qexport.domain.audit_checkpoints import ChainHead
from qexport.domain.audit_keys import AuditKeys
from qexport.store.audit.chain import (
    ANCHOR,
    CHAIN_PAGE,
    add_to_download_totals,
    append_all_in,
    append_in,
    by_workspace,
    keys_for,
    tally_downloads,
)
from qexport.store.audit.writer import Waiting, Writer
from qexport.store.engine import read_transaction, transaction
from qexport.store.tables.audit import audit_anchors, audit_events, audit_prune_flag

log = structlog.get_logger()

# How long `record_soon`'s writer waits for more events after the first.
RECORD_SOON_LINGER = 0.01


def _to_event(row: sa.Row[Any]) -> RecordedEvent:
    return RecordedEvent(
        id=row.id,
        at=row.at,
        workspace_id=row.workspace_id,
        actor_kind=row.actor_kind,
        actor_id=row.actor_id,
        action=row.action,
        target_kind=row.target_kind,
        target_id=row.target_id,
        outcome=row.outcome,
        client_address=row.client_address,
        details=row.details,
        prev_hash=row.prev_hash,
        hash=row.hash,
        seq=row.seq,
        key_id=row.key_id,
    )


def _narrowed(stmt: sa.Select[Any], narrow: AuditFilter) -> sa.Select[Any]:
    c = audit_events.c
    if narrow.actor is not None:
        stmt = stmt.where(c.actor_id == narrow.actor)
    if narrow.action is not None:
        if narrow.action.endswith("."):
            stmt = stmt.where(c.action.startswith(narrow.action, autoescape=True))
        else:
            stmt = stmt.where(c.action == narrow.action)
    if narrow.target is not None:
        stmt = stmt.where(c.target_id == narrow.target)
    if narrow.since is not None:
        stmt = stmt.where(c.at >= narrow.since)
    if narrow.until is not None:
        stmt = stmt.where(c.at < narrow.until)
    return stmt


class SqlAuditLog:
    """AuditLog over any SQLAlchemy engine."""

    def __init__(self, engine: sa.Engine, *, linger: float = RECORD_SOON_LINGER) -> None:
        self._engine = engine
        # Events that could not be recorded by `record` (the metrics report it).
        self.failures = 0
        # The group commit of `record`: the events waiting to be written, and whether a
        # thread is writing (leading).
        self._gathering = threading.Lock()
        self._waiting: list[Waiting] = []
        self._leading = False
        self._writer = Writer(self._write, linger)

    def _tx(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return transaction(self._engine)

    def _read(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return read_transaction(self._engine)

    def _append(self, events: Sequence[AuditEvent]) -> None:
        """Chain `events` on their own, in one transaction."""
        with transaction(self._engine) as conn:
            append_all_in(conn, events)

    def record(self, event: AuditEvent) -> bool:
        """Write `event`, with the events other threads are recording at the same moment, in
        one transaction (a group commit), and return once it is written (or failed).

        The first to arrive leads: it writes what has gathered, its own event included, and
        hands the lead to the first of those that gathered meanwhile. Under 40 clients with
        a download in five requests, a transaction per event made the downloads queue for
        the write lock and take the server's threads with them, so reads stood still too:
        on SQLite, reads p99 162 ms at 1,019 requests/s; 134 ms at 1,026-1,047 with the
        group commit (bench/api_load.py).
        """
        me = Waiting(event)
        with self._gathering:
            self._waiting.append(me)
            me.leads = not self._leading
            self._leading = True
        if not me.leads:
            me.settled.wait()
            if not me.leads:
                return me.recorded
        with self._gathering:
            batch, self._waiting = self._waiting, []
        for group in by_workspace(batch, lambda waiting: waiting.event.workspace_id).values():
            self._write(group)
        with self._gathering:
            if self._waiting:
                self._waiting[0].leads = True
                self._waiting[0].settled.set()
            else:
                self._leading = False
        return me.recorded

    def record_soon(self, event: AuditEvent) -> Future[bool]:
        """Give `event` to the writer thread (`_Writer`), which writes it with the others
        given within `linger` of the first; the future settles with whether it was recorded
        (it never fails).

        For what happened already and need not hold a thread until it is written: a
        download's event once the response is sent. One client downloading 64 KiB ranges
        one after another (PostgreSQL, one server process) cost the server 3.8 ms of CPU a
        range with an event written per download (`record`, on the thread pool), 2.9 ms
        with this writer and no linger, 2.1-2.2 ms with a linger of 10 ms (30 ms: no
        better), against 1.8-1.9 ms with no event at all."""
        return self._writer.submit(Waiting(event))

    def _write(self, batch: list[Waiting]) -> None:
        """Write one workspace's events, in one transaction."""
        try:
            try:
                self._append([waiting.event for waiting in batch])
            except Exception:
                if len(batch) == 1:
                    raise
                for waiting in batch:  # one at a time: an event that fails fails alone
                    self._write([waiting])
                return
            for waiting in batch:
                waiting.recorded = True
        except Exception as exc:  # never fail the download or sign-in being recorded
            self.failures += 1
            log.warning(
                "audit_event_not_recorded",
                action=batch[0].event.action.value,
                workspace=batch[0].event.workspace_id,
                error=type(exc).__name__,
            )
        finally:
            for waiting in batch:
                waiting.settled.set()

    def list_events(
        self,
        *,
        workspace_id: str | None,
        narrow: AuditFilter,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[RecordedEvent]:
        stmt = _narrowed(sa.select(audit_events), narrow)
        if workspace_id is not None:
            stmt = stmt.where(audit_events.c.workspace_id == workspace_id)
        if before_id is not None:
            stmt = stmt.where(audit_events.c.id < before_id)
        stmt = stmt.order_by(audit_events.c.id.desc()).limit(limit)
        with self._read() as conn:
            return [_to_event(row) for row in conn.execute(stmt)]

    @property
    def keys(self) -> AuditKeys:
        return keys_for(self._engine)

    def chains(self) -> list[str]:
        with self._read() as conn:
            names = set(conn.execute(sa.select(audit_events.c.workspace_id).distinct()).scalars())
            names.update(conn.execute(sa.select(audit_anchors.c.workspace_id)).scalars())
        return sorted(names)

    def anchor(self, workspace_id: str) -> Anchor:
        with self._read() as conn:
            row = conn.execute(ANCHOR, {"workspace_": workspace_id}).first()
        return Anchor(*row) if row is not None else Anchor()

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        """The workspace's events in id order, read a page at a time."""
        after = 0
        while True:
            stmt = (
                sa.select(audit_events)
                .where(audit_events.c.workspace_id == workspace_id, audit_events.c.id > after)
                .order_by(audit_events.c.id)
                .limit(CHAIN_PAGE)
            )
            with self._read() as conn:
                page = [_to_event(row) for row in conn.execute(stmt)]
            yield from page
            if len(page) < CHAIN_PAGE:
                return
            after = page[-1].id

    def event_at(self, workspace_id: str, seq: int) -> RecordedEvent | None:
        c = audit_events.c
        stmt = sa.select(audit_events).where(c.workspace_id == workspace_id, c.seq == seq)
        with self._read() as conn:
            row = conn.execute(stmt).first()
        return _to_event(row) if row is not None else None

    def unkeyed_chains(self) -> list[str]:
        c = audit_events.c
        stmt = sa.select(c.workspace_id).where(c.key_id.is_(None)).distinct()
        with self._read() as conn:
            return sorted(conn.execute(stmt).scalars())

    def heads(self, *, after_id: int = 0) -> list[ChainHead]:
        """The head of every chain with an event whose id is above `after_id`, and where the
        chain starts; in one statement."""
        e, a = audit_events.c, audit_anchors.c
        last = (
            sa.select(e.workspace_id, sa.func.max(e.id).label("last_id"))
            .where(e.id > after_id)
            .group_by(e.workspace_id)
            .subquery()
        )
        stmt = (
            sa.select(
                e.workspace_id,
                e.seq,
                e.id,
                e.hash,
                e.at,
                sa.func.coalesce(a.anchor_hash, GENESIS),
                sa.func.coalesce(a.anchor_seq, 0),
            )
            .join(last, e.id == last.c.last_id)
            .outerjoin(audit_anchors, a.workspace_id == e.workspace_id)
            .order_by(e.workspace_id)
        )
        with self._read() as conn:
            return [ChainHead(*row) for row in conn.execute(stmt)]

    def prune(self, *, before: datetime, event: AuditEvent) -> dict[str, int]:
        """Delete every chain's events up to its last one written before `before` and keep
        that one's hash and sequence as the chain's anchor; in the same transaction, record
        in each pruned chain an `audit.pruned` event naming its new anchor, and `event`
        (given the counts) in the installation's. How many went, per workspace."""
        c = audit_events.c
        with self._tx() as conn:
            cut = conn.execute(
                sa.select(c.workspace_id, sa.func.max(c.id))
                .where(c.at < before)
                .group_by(c.workspace_id)
            ).all()
            if not cut:
                append_in(conn, event)
                return {}
            self._open_prune(conn)
            pruned: dict[str, int] = {}
            anchors: dict[str, Anchor] = {}
            for workspace_id, last_id in cut:
                last = conn.execute(sa.select(c.hash, c.seq).where(c.id == last_id)).one()
                going = tally_downloads(conn, c.workspace_id == workspace_id, c.id <= last_id)
                for tally in going.values():
                    add_to_download_totals(conn, workspace_id, -tally)
                deleted = conn.execute(
                    audit_events.delete().where(c.workspace_id == workspace_id, c.id <= last_id)
                ).rowcount
                pruned[workspace_id] = deleted
                anchors[workspace_id] = anchor = Anchor(last.hash, last.seq, before)
                self._set_anchor(conn, workspace_id, anchor)
            self._close_prune(conn)
            append_all_in(conn, prune_events(event, pruned, anchors))
        return pruned

    @staticmethod
    def _open_prune(conn: sa.Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL qexport.audit_prune = 'on'")
        else:
            conn.execute(audit_prune_flag.update().values(active=True))

    @staticmethod
    def _close_prune(conn: sa.Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL qexport.audit_prune = 'off'")
        else:
            conn.execute(audit_prune_flag.update().values(active=False))

    @staticmethod
    def _set_anchor(conn: sa.Connection, workspace_id: str, anchor: Anchor) -> None:
        values = {
            "anchor_hash": anchor.hash,
            "anchor_seq": anchor.seq,
            "pruned_before": anchor.pruned_before,
        }
        done = conn.execute(
            audit_anchors.update().where(audit_anchors.c.workspace_id == workspace_id), values
        ).rowcount
        if not done:
            conn.execute(audit_anchors.insert(), {"workspace_id": workspace_id, **values})
