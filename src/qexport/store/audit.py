"""The audit trail on SQLAlchemy Core: appended in the caller's transaction, or in a short one.

`append_in(conn, event)` chains the event after its workspace's last one inside the caller's
transaction: a store method that changes something (an export requested, a link created, a
query changed) writes its event with the change, so that neither is kept without the other.
Two writers of one workspace must not both chain after the same event (a fork): PostgreSQL
serialises them with a transaction-scoped advisory lock per workspace taken before the last
hash is read (released at commit, so it never outlives the action's own transaction), all
inside one statement (_APPEND); SQLite has one writer at a time already (every transaction
that writes begins IMMEDIATE, store/engine.py).

`SqlAuditLog.record` is for what has no transaction of its own (a download, a sign-in): the
events recorded at the same moment are written together, one statement per workspace on
PostgreSQL (on the driver's cursor, `OneWrite`) and one transaction on SQLite, never failing
the action; a failure to record is logged and counted. `record_soon` hands an event to a
writer thread instead, which writes the events given within 10 ms of each other together:
for a download's event once its response is sent, which nothing need wait for.

A download's event also adds its share to its workspace's row of `audit_download_totals`
(what /metrics reports), in the same transaction, and a prune takes the pruned events' shares
off in its own: the totals are always the sum over the events the trail holds.

The database refuses UPDATE and DELETE of events (triggers in tables.py). Pruning alone may
delete, through a path only its own transaction opens: `SET LOCAL qexport.audit_prune = 'on'`
on PostgreSQL, the one-row `audit_prune_flag` set and cleared again within the transaction on
SQLite; either way no other transaction can see it open.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
import structlog
from sqlalchemy.dialects.postgresql import JSONB

from qexport.domain.audit import (
    GENESIS,
    AuditEvent,
    AuditFilter,
    RecordedEvent,
    around_prev,
    linked,
    unchained,
)
from qexport.domain.stats import DOWNLOAD_ACTIONS, DownloadTally, download_tally
from qexport.store.engine import read_transaction, transaction
from qexport.store.reads import OneWrite
from qexport.store.tables import (
    audit_anchors,
    audit_download_totals,
    audit_events,
    audit_prune_flag,
)

log = structlog.get_logger()
T = TypeVar("T")

# The advisory locks' first key: the audit chains' own space, apart from the migrations' lock
# (and written into migration 0019's qexport_audit_append).
_LOCK_SPACE = 0x41554454  # "AUDT"
# How long `record_soon`'s writer waits for more events after the first.
RECORD_SOON_LINGER = 0.01
_WORKSPACE = sa.bindparam("workspace_", type_=audit_events.c.workspace_id.type)
# Prebuilt, as the export queue's statements are (store/exports.py): built per call they
# cost more to find in SQLAlchemy's cache than to run.
_LAST_HASH = (
    sa.select(audit_events.c.hash)
    .where(audit_events.c.workspace_id == _WORKSPACE)
    .order_by(audit_events.c.id.desc())
    .limit(1)
)
_ANCHOR = sa.select(audit_anchors.c.anchor_hash).where(audit_anchors.c.workspace_id == _WORKSPACE)
# A chain's head: the hash of its last event, else its anchor (none: it starts at GENESIS).
_HEAD = sa.select(sa.func.coalesce(_LAST_HASH.scalar_subquery(), _ANCHOR.scalar_subquery()))
# On PostgreSQL events are chained by the database, in one statement per workspace (the
# function migration 0019 creates): it takes the workspace's advisory lock (held until the
# commit, so that two writers never chain after the same event), reads the head after it,
# hashes each event from the canonical text Python made around its prev_hash
# (domain/audit.around_prev), inserts them and adds to the download totals. The lock is
# never held across a round trip to Python, where under load each step of a busy server
# waited its turn for a core: recording one event alone took 0.73 ms of CPU in five round
# trips (a lock, the head, the insert, the totals, the commit), against one now.
_APPEND = sa.text(
    "SELECT qexport_audit_append(:workspace_, :genesis_, CAST(:events_ AS jsonb),"
    " :downloads_, :bytes_sent_, :public_link_uses_)"
)
# The same, for events with no transaction of their own (`record`, `record_soon`): on the
# driver's cursor in autocommit, where it commits on its own (store/reads.py). Through a
# SQLAlchemy Connection `record` cost 0.62-0.66 ms of CPU an event, 0.50-0.52 ms now (one
# at a time, in one process).
_APPEND_ALONE = OneWrite(
    sa.select(
        sa.func.qexport_audit_append(
            sa.bindparam("workspace_", type_=sa.Text),
            sa.bindparam("genesis_", type_=sa.Text),
            sa.cast(sa.bindparam("events_", type_=sa.Text), JSONB),
            sa.bindparam("downloads_", type_=sa.BigInteger),
            sa.bindparam("bytes_sent_", type_=sa.BigInteger),
            sa.bindparam("public_link_uses_", type_=sa.BigInteger),
        )
    )
)
_LOCK = sa.text(f"SELECT pg_advisory_xact_lock({_LOCK_SPACE}, hashtext(:workspace_))")
_INSERT = audit_events.insert()
_CHAIN_PAGE = 1000
_TOTALS = audit_download_totals.c
_ADD_TO_TOTALS = (
    audit_download_totals.update()
    .where(_TOTALS.workspace_id == _WORKSPACE)
    .values(
        downloads=_TOTALS.downloads + sa.bindparam("downloads_"),
        bytes_sent=_TOTALS.bytes_sent + sa.bindparam("bytes_sent_"),
        public_link_uses=_TOTALS.public_link_uses + sa.bindparam("public_link_uses_"),
    )
)
_NEW_TOTALS = audit_download_totals.insert()


def lock_chain(conn: sa.Connection, workspace_id: str) -> None:
    """On PostgreSQL, take the workspace's chain lock until the commit, as appending does."""
    conn.execute(_LOCK, {"workspace_": workspace_id})


def append_in(conn: sa.Connection, event: AuditEvent) -> None:
    """Chain `event` after its workspace's last event, in the caller's transaction."""
    append_all_in(conn, [event])


def append_all_in(conn: sa.Connection, events: Sequence[AuditEvent]) -> None:
    """Chain `events`, in their order, after their workspaces' last events, in the caller's
    transaction. On PostgreSQL that is one statement per workspace, whose events are all
    written or none."""
    for workspace_id, rows, tally in _unchained_groups(events):
        if conn.dialect.name == "postgresql":
            conn.execute(_APPEND, _append_params(workspace_id, rows, tally or DownloadTally()))
            continue
        prev = conn.execute(_HEAD, {"workspace_": workspace_id}).scalar() or GENESIS
        linked_rows = []
        for row in rows:
            linked_rows.append(done := linked(row, prev))
            prev = done["hash"]
        conn.execute(_INSERT, linked_rows)
        if tally is not None:
            add_to_download_totals(conn, workspace_id, tally)


def _unchained_groups(
    events: Sequence[AuditEvent],
) -> Iterator[tuple[str, list[dict[str, Any]], DownloadTally | None]]:
    """Per workspace: its events' rows before chaining, and their share of the download
    totals (None: they have none)."""
    now = datetime.now(UTC)
    for workspace_id, group in _by_workspace(events, lambda event: event.workspace_id).items():
        rows = [unchained(event, now) for event in group]
        # From the rows as stored, as a prune reads them back: the same share comes off.
        shares = [_share(row) for row in rows]
        found = [share for share in shares if share is not None]
        yield workspace_id, rows, sum(found, DownloadTally()) if found else None


def _share(row: dict[str, Any]) -> DownloadTally | None:
    return download_tally(row["action"], row["actor_kind"], row["outcome"], row["details"])


def _append_params(
    workspace_id: str, rows: list[dict[str, Any]], tally: DownloadTally
) -> dict[str, Any]:
    """The parameters of qexport_audit_append (_APPEND, _APPEND_ALONE) for these rows."""
    events = []
    for row in rows:
        before, after = around_prev(row)
        events.append({**row, "at": row["at"].isoformat(), "before": before, "after": after})
    return {
        "workspace_": workspace_id,
        "genesis_": GENESIS,
        "events_": json.dumps(events),
        "downloads_": tally.downloads,
        "bytes_sent_": tally.bytes_sent,
        "public_link_uses_": tally.public_link_uses,
    }


def _by_workspace(items: Iterable[T], workspace_of: Callable[[T], str]) -> dict[str, list[T]]:
    """`items` by their workspace, each in its order."""
    grouped: dict[str, list[T]] = {}
    for item in items:
        grouped.setdefault(workspace_of(item), []).append(item)
    return grouped


def add_to_download_totals(conn: sa.Connection, workspace_id: str, tally: DownloadTally) -> None:
    """Add `tally` (negative to take it off) to the workspace's download totals.

    The row is made when missing without a race: on PostgreSQL the caller holds the
    workspace's advisory lock (append_in) or prunes in one transaction; SQLite has one writer.
    """
    params = {
        "workspace_": workspace_id,
        "downloads_": tally.downloads,
        "bytes_sent_": tally.bytes_sent,
        "public_link_uses_": tally.public_link_uses,
    }
    if not conn.execute(_ADD_TO_TOTALS, params).rowcount:
        conn.execute(
            _NEW_TOTALS,
            {
                "workspace_id": workspace_id,
                "downloads": tally.downloads,
                "bytes_sent": tally.bytes_sent,
                "public_link_uses": tally.public_link_uses,
            },
        )


def tally_downloads(
    conn: sa.Connection, *where: sa.ColumnElement[bool]
) -> dict[str, DownloadTally]:
    """The download totals of the events matching `where`, per workspace, read in one pass."""
    c = audit_events.c
    stmt = (
        sa.select(c.workspace_id, c.action, c.actor_kind, c.outcome, c.details)
        .where(c.action.in_(DOWNLOAD_ACTIONS), *where)
        .execution_options(yield_per=_CHAIN_PAGE)
    )
    found: dict[str, DownloadTally] = {}
    for row in conn.execute(stmt):
        tally = download_tally(row.action, row.actor_kind, row.outcome, row.details)
        if tally is not None:
            found[row.workspace_id] = found.get(row.workspace_id, DownloadTally()) + tally
    return found


def append_if(conn: sa.Connection, event: AuditEvent | None) -> None:
    """Append a store method's optional `audit=` event."""
    if event is not None:
        append_in(conn, event)


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


@dataclass(eq=False)
class _Waiting:
    """An event `record` was given, until it is written (`recorded`) or failed."""

    event: AuditEvent
    settled: threading.Event = field(default_factory=threading.Event)
    recorded: bool = False
    leads: bool = False
    # Settled by the writer of `record_soon` once the event is written (or failed).
    written: Future[bool] | None = None


class _Writer:
    """The thread that writes the events given to `record_soon`: the first to arrive waits
    up to `linger` seconds for more, then they are written together, one statement (or
    transaction) per workspace, and their futures settled.

    Started at the first event, it stops after a while with nothing to write, and is
    started anew in a forked process (threads do not survive a fork).
    """

    _MOST = 500  # events in one batch
    _IDLE_SECONDS = 30.0

    def __init__(self, write: Callable[[list[_Waiting]], None], linger: float) -> None:
        self._write = write
        self._linger = linger
        self._queue: queue.SimpleQueue[_Waiting] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running_in: int | None = None  # the pid whose thread takes from the queue
        self.thread: threading.Thread | None = None

    def submit(self, waiting: _Waiting) -> Future[bool]:
        waiting.written = Future()
        self._queue.put(waiting)
        with self._lock:
            if self._running_in != os.getpid():
                self._running_in = os.getpid()
                self.thread = threading.Thread(
                    target=self._run, name="qexport-audit-writer", daemon=True
                )
                self.thread.start()
        return waiting.written

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._IDLE_SECONDS)
            except queue.Empty:
                with self._lock:  # an event given meanwhile would find no thread: look again
                    if self._queue.empty():
                        self._running_in = None
                        return
                continue
            # Those given meanwhile gather without waking this thread (one wake a batch).
            time.sleep(self._linger)
            batch = [first]
            with contextlib.suppress(queue.Empty):
                while len(batch) < self._MOST:
                    batch.append(self._queue.get(block=False))
            try:
                for group in _by_workspace(batch, lambda w: w.event.workspace_id).values():
                    self._write(group)  # counts and logs what it could not write
            finally:  # whatever happens, no one waits for ever
                for waiting in batch:
                    assert waiting.written is not None
                    waiting.written.set_result(waiting.recorded)


class SqlAuditLog:
    """AuditLog over any SQLAlchemy engine."""

    def __init__(self, engine: sa.Engine, *, linger: float = RECORD_SOON_LINGER) -> None:
        self._engine = engine
        # Events that could not be recorded by `record` (the metrics report it).
        self.failures = 0
        # The group commit of `record`: the events waiting to be written, and whether a
        # thread is writing (leading).
        self._gathering = threading.Lock()
        self._waiting: list[_Waiting] = []
        self._leading = False
        self._writer = _Writer(self._write, linger)

    def _tx(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return transaction(self._engine)

    def _read(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return read_transaction(self._engine)

    def _append(self, events: Sequence[AuditEvent]) -> None:
        """Chain `events` on their own: on PostgreSQL one statement per workspace outside
        any transaction (each commits on its own), on SQLite one transaction."""
        if self._engine.dialect.name != "postgresql":
            with transaction(self._engine) as conn:
                append_all_in(conn, events)
            return
        for workspace_id, rows, tally in _unchained_groups(events):
            params = _append_params(workspace_id, rows, tally or DownloadTally())
            _APPEND_ALONE.scalar(self._engine, params)

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
        me = _Waiting(event)
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
        for group in _by_workspace(batch, lambda waiting: waiting.event.workspace_id).values():
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
        return self._writer.submit(_Waiting(event))

    def _write(self, batch: list[_Waiting]) -> None:
        """Write one workspace's events: on PostgreSQL one statement outside a transaction
        (it commits on its own), on SQLite a transaction."""
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

    def chains(self) -> list[str]:
        with self._read() as conn:
            names = set(conn.execute(sa.select(audit_events.c.workspace_id).distinct()).scalars())
            names.update(conn.execute(sa.select(audit_anchors.c.workspace_id)).scalars())
        return sorted(names)

    def anchor(self, workspace_id: str) -> str:
        with self._read() as conn:
            return conn.execute(_ANCHOR, {"workspace_": workspace_id}).scalar() or GENESIS

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        """The workspace's events in id order, read a page at a time."""
        after = 0
        while True:
            stmt = (
                sa.select(audit_events)
                .where(audit_events.c.workspace_id == workspace_id, audit_events.c.id > after)
                .order_by(audit_events.c.id)
                .limit(_CHAIN_PAGE)
            )
            with self._read() as conn:
                page = [_to_event(row) for row in conn.execute(stmt)]
            yield from page
            if len(page) < _CHAIN_PAGE:
                return
            after = page[-1].id

    def prune(self, *, before: datetime, event: AuditEvent) -> dict[str, int]:
        """Delete every chain's events up to its last one written before `before`, keep its
        hash as the chain's anchor, and record `event` (given the counts) in the same
        transaction; how many went, per workspace."""
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
            for workspace_id, last_id in cut:
                anchor = conn.execute(sa.select(c.hash).where(c.id == last_id)).scalar_one()
                going = tally_downloads(conn, c.workspace_id == workspace_id, c.id <= last_id)
                for tally in going.values():
                    add_to_download_totals(conn, workspace_id, -tally)
                deleted = conn.execute(
                    audit_events.delete().where(c.workspace_id == workspace_id, c.id <= last_id)
                ).rowcount
                pruned[workspace_id] = deleted
                self._set_anchor(conn, workspace_id, anchor, before)
            self._close_prune(conn)
            details = {**event.details, "deleted": sum(pruned.values()), "chains": len(pruned)}
            append_in(conn, _with_details(event, details))
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
    def _set_anchor(conn: sa.Connection, workspace_id: str, anchor: str, before: datetime) -> None:
        values = {"anchor_hash": anchor, "pruned_before": before}
        done = conn.execute(
            audit_anchors.update().where(audit_anchors.c.workspace_id == workspace_id), values
        ).rowcount
        if not done:
            conn.execute(audit_anchors.insert(), {"workspace_id": workspace_id, **values})


def _with_details(event: AuditEvent, details: dict[str, Any]) -> AuditEvent:
    return replace(event, details=details)
