"""The audit trail on SQLAlchemy Core: appended in the caller's transaction, or in a short one.

`append_in(conn, event)` chains the event after its workspace's last one inside the caller's
transaction: a store method that changes something (an export requested, a link created, a
query changed) writes its event with the change, so that neither is kept without the other.
Two writers of one workspace must not both chain after the same event (a fork): PostgreSQL
serialises them with a transaction-scoped advisory lock per workspace taken before the last
hash is read (released at commit, so it never outlives the action's own transaction); SQLite
has one writer at a time already (every transaction that writes begins IMMEDIATE,
store/engine.py). Either way each event's HMAC is computed here: the key never leaves the
process, and the database only ever sees the hashes.

`SqlAuditLog.record` is for what has no transaction of its own (a download, a sign-in): the
events recorded at the same moment are written together, in one short transaction per
workspace, never failing
the action; a failure to record is logged and counted. `record_soon` hands an event to a
writer thread instead, which writes the events given within 10 ms of each other together:
for a download's event once its response is sent, which nothing need wait for.

A download's event also adds its share to its workspace's row of `audit_download_totals`
(what /metrics reports), in the same transaction, and a prune takes the pruned events' shares
off in its own: the totals are always the sum over the events the trail holds.

The database refuses UPDATE and DELETE of events (triggers in tables/audit.py). Pruning alone may
delete, through a path only its own transaction opens: `SET LOCAL qexport.audit_prune = 'on'`
on PostgreSQL, the one-row `audit_prune_flag` set and cleared again within the transaction on
SQLite; either way no other transaction can see it open.
"""

from __future__ import annotations

import contextlib
import json
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
import structlog

from qexport.domain.audit import (
    GENESIS,
    Anchor,
    AuditEvent,
    AuditFilter,
    RecordedEvent,
    linked,
    prune_events,
    unchained,
)
from qexport.domain.audit_checkpoints import ChainHead
from qexport.domain.audit_keys import AuditKeyMissingError, AuditKeys
from qexport.domain.stats import DOWNLOAD_ACTIONS, DownloadTally, download_tally
from qexport.store.audit_writer import Waiting, Writer
from qexport.store.engine import read_transaction, transaction
from qexport.store.tables.audit import (
    audit_anchors,
    audit_download_totals,
    audit_events,
    audit_prune_flag,
)

log = structlog.get_logger()
T = TypeVar("T")

# The advisory locks' first key: the audit chains' own space, apart from the migrations' lock.
_LOCK_SPACE = 0x41554454  # "AUDT"
# How long `record_soon`'s writer waits for more events after the first.
RECORD_SOON_LINGER = 0.01
_WORKSPACE = sa.bindparam("workspace_", type_=audit_events.c.workspace_id.type)
# Prebuilt, as the export queue's statements are (store/exports.py): built per call they
# cost more to find in SQLAlchemy's cache than to run.
_LAST = (
    sa.select(audit_events.c.hash, audit_events.c.seq)
    .where(audit_events.c.workspace_id == _WORKSPACE)
    .order_by(audit_events.c.id.desc())
    .limit(1)
)
_ANCHOR = sa.select(
    audit_anchors.c.anchor_hash, audit_anchors.c.anchor_seq, audit_anchors.c.pruned_before
).where(audit_anchors.c.workspace_id == _WORKSPACE)
# Per engine: the keys the audit chains written through it are keyed with (`use_keys`, which
# bootstrap calls where it makes the engine). A registry beside the engine, as its writers'
# turns are (store/engine.py), rather than a parameter of every store: each store appends its
# `audit=` events in its own transactions, about thirty call sites over seven stores.
_KEYS: weakref.WeakKeyDictionary[sa.Engine, AuditKeys] = weakref.WeakKeyDictionary()
# On PostgreSQL the events are chained and keyed here, never by the database: the event key
# never leaves this process (a function of the database that is handed it can be
# replaced, by whoever holds qexport's own login, with one that keeps it). Within the
# transaction, one round trip takes the workspace's advisory lock (held until the commit, so
# that two writers never chain after the same event) and then reads the head: two statements
# in one query, the second with a snapshot of its own taken once the lock is held (in one
# statement the head would be read from before the wait, and miss the event of the writer
# waited for). Python keys the events after it, and one statement inserts them and adds to
# the download totals. With the BEGIN and the COMMIT that is four round trips, where the
# database's function took one. `record` of 2,000 events on PostgreSQL 15 on the same 2-core
# machine, under a load of 3.5-5 from other work (medians of 6 runs, the function's version
# and this one taken in turn), CPU and wall time an event: one at a time, 0.68 and 3.6 ms
# with the function, 0.95 and 4.0 ms now; 4 threads recording into one workspace at once
# (their events gathered), 0.37 and 1.2 ms with the function, 0.49 and 1.6 ms now. Sending
# the BEGIN with the lock (three round trips) measured no better, so it is not done.
_LOCK_AND_HEAD = (
    "SELECT pg_advisory_xact_lock({space}, hashtext({workspace}));"
    " SELECT hash, seq FROM ("
    "(SELECT hash, seq, 0 AS o FROM audit_events WHERE workspace_id = {workspace}"
    " ORDER BY id DESC LIMIT 1)"
    " UNION ALL (SELECT anchor_hash, anchor_seq, 1 FROM audit_anchors"
    " WHERE workspace_id = {workspace})"
    ") AS head ORDER BY o LIMIT 1"
)
# The chained events (a JSON array, in chain order, which their ids follow) and the download
# totals they add to (nothing when all three are 0), in one statement.
_ADD = sa.text(
    """
WITH added AS (
    INSERT INTO audit_events (
        at, workspace_id, actor_kind, actor_id, action, target_kind, target_id, outcome,
        client_address, details, prev_hash, seq, key_id, hash
    )
    SELECT
        CAST(e->>'at' AS timestamptz), :workspace_, e->>'actor_kind', e->>'actor_id',
        e->>'action', e->>'target_kind', e->>'target_id', e->>'outcome',
        e->>'client_address', e->>'details', e->>'prev_hash', CAST(e->>'seq' AS bigint),
        e->>'key_id', e->>'hash'
    FROM jsonb_array_elements(CAST(:events_ AS jsonb)) WITH ORDINALITY AS given(e, n)
    ORDER BY n
)
INSERT INTO audit_download_totals AS t (workspace_id, downloads, bytes_sent, public_link_uses)
SELECT :workspace_, :downloads_, :bytes_sent_, :public_link_uses_
WHERE :downloads_ <> 0 OR :bytes_sent_ <> 0 OR :public_link_uses_ <> 0
ON CONFLICT (workspace_id) DO UPDATE SET
    downloads = t.downloads + excluded.downloads,
    bytes_sent = t.bytes_sent + excluded.bytes_sent,
    public_link_uses = t.public_link_uses + excluded.public_link_uses
"""
).bindparams(
    sa.bindparam("workspace_", type_=sa.Text),
    sa.bindparam("events_", type_=sa.Text),
    sa.bindparam("downloads_", type_=sa.BigInteger),
    sa.bindparam("bytes_sent_", type_=sa.BigInteger),
    sa.bindparam("public_link_uses_", type_=sa.BigInteger),
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


def use_keys(engine: sa.Engine, keys: AuditKeys) -> None:
    """Key the audit chains written through `engine`, by every store over it, with `keys`."""
    _KEYS[engine] = keys


def keys_for(engine: sa.Engine) -> AuditKeys:
    """The keys of the chains written through `engine`; AuditKeyMissingError without."""
    keys = _KEYS.get(engine)
    if keys is None:
        raise AuditKeyMissingError(
            "the audit trail cannot be written or verified: no secret keys its chains; set"
            " QEXPORT_SECRET_KEY (required with a PostgreSQL database, the same on every machine)"
        )
    return keys


def lock_chain(conn: sa.Connection, workspace_id: str) -> None:
    """On PostgreSQL, take the workspace's chain lock until the commit, as appending does."""
    conn.execute(_LOCK, {"workspace_": workspace_id})


def append_in(conn: sa.Connection, event: AuditEvent) -> None:
    """Chain `event` after its workspace's last event, in the caller's transaction."""
    append_all_in(conn, [event])


def append_all_in(conn: sa.Connection, events: Sequence[AuditEvent]) -> None:
    """Chain `events`, in their order, after their workspaces' last events, in the caller's
    transaction: per workspace, on PostgreSQL under its chain's lock, read its head, key the
    events here and write them (with their download totals)."""
    key = keys_for(conn.engine).current
    postgresql = conn.dialect.name == "postgresql"
    for workspace_id, rows, tally in _unchained_groups(events):
        prev, seq = _locked_head(conn, workspace_id) if postgresql else _head(conn, workspace_id)
        linked_rows = []
        for row in rows:
            seq += 1
            linked_rows.append(done := linked(row, prev, seq, key))
            prev = done["hash"]
        if postgresql:
            conn.execute(_ADD, _add_params(workspace_id, linked_rows, tally or DownloadTally()))
            continue
        conn.execute(_INSERT, linked_rows)
        if tally is not None:
            add_to_download_totals(conn, workspace_id, tally)


def _locked_head(conn: sa.Connection, workspace_id: str) -> tuple[str, int]:
    """On PostgreSQL: take the workspace's chain lock until the commit, then read the hash and
    sequence its next event follows (_head's), in one round trip (_LOCK_AND_HEAD). The two
    statements go as one query, which can have no parameters: the workspace is written in it as
    an escape string of its UTF-8 bytes in hex (E'\\x61\\x63': nothing that quoting or a driver's
    placeholders could change, and a constant, which the indexes are searched with)."""
    workspace = "E'" + "".join(f"\\x{byte:02x}" for byte in workspace_id.encode()) + "'"
    result = conn.exec_driver_sql(_LOCK_AND_HEAD.format(space=_LOCK_SPACE, workspace=workspace))
    try:
        cursor = result.cursor  # at the lock's result: the head is the next
        if not cursor.nextset():
            raise RuntimeError("the chain's head was not read")
        row = cursor.fetchone()
    finally:
        result.close()
    return (row[0], row[1]) if row is not None else (GENESIS, 0)


def _head(conn: sa.Connection, workspace_id: str) -> tuple[str, int]:
    """The hash and sequence a workspace's next event follows: its last event's, else its
    anchor's, else the start."""
    params = {"workspace_": workspace_id}
    row = conn.execute(_LAST, params).first() or conn.execute(_ANCHOR, params).first()
    return (row[0], row[1]) if row is not None else (GENESIS, 0)


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


def _add_params(
    workspace_id: str, rows: list[dict[str, Any]], tally: DownloadTally
) -> dict[str, Any]:
    """The parameters of _ADD for these chained rows."""
    events = [{**row, "at": row["at"].isoformat()} for row in rows]
    return {
        "workspace_": workspace_id,
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
            row = conn.execute(_ANCHOR, {"workspace_": workspace_id}).first()
        return Anchor(*row) if row is not None else Anchor()

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
