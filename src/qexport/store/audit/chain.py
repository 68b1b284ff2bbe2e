"""The audit trail's chains on SQLAlchemy Core: each event appended in the caller's
transaction, keyed here, with the download totals it adds to.

`append_in(conn, event)` chains the event after its workspace's last one inside the caller's
transaction: a store method that changes something (an export requested, a link created, a
query changed) writes its event with the change, so that neither is kept without the other.
Two writers of one workspace must not both chain after the same event (a fork): PostgreSQL
serialises them with a transaction-scoped advisory lock per workspace taken before the last
hash is read (released at commit, so it never outlives the action's own transaction); SQLite
has one writer at a time already (every transaction that writes begins IMMEDIATE,
store/engine.py). Either way each event's HMAC is computed here: the key never leaves the
process, and the database only ever sees the hashes.

A download's event also adds its share to its workspace's row of `audit_download_totals`
(what /metrics reports), in the same transaction, and a prune takes the pruned events' shares
off in its own: the totals are always the sum over the events the trail holds.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from qexport.domain.audit import (
    GENESIS,
    AuditEvent,
    linked,
    unchained,
)
from qexport.domain.audit_keys import AuditKeyMissingError, AuditKeys
from qexport.domain.stats import DOWNLOAD_ACTIONS, DownloadTally, download_tally
from qexport.store.tables.audit import audit_anchors, audit_download_totals, audit_events

T = TypeVar("T")

# The advisory locks' first key: the audit chains' own space, apart from the migrations' lock.
_LOCK_SPACE = 0x41554454  # "AUDT"
_WORKSPACE = sa.bindparam("workspace_", type_=audit_events.c.workspace_id.type)
# Prebuilt, as the export queue's statements are (store/exports/): built per call they
# cost more to find in SQLAlchemy's cache than to run.
_LAST = (
    sa.select(audit_events.c.hash, audit_events.c.seq)
    .where(audit_events.c.workspace_id == _WORKSPACE)
    .order_by(audit_events.c.id.desc())
    .limit(1)
)
ANCHOR = sa.select(
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
CHAIN_PAGE = 1000
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
    row = conn.execute(_LAST, params).first() or conn.execute(ANCHOR, params).first()
    return (row[0], row[1]) if row is not None else (GENESIS, 0)


def _unchained_groups(
    events: Sequence[AuditEvent],
) -> Iterator[tuple[str, list[dict[str, Any]], DownloadTally | None]]:
    """Per workspace: its events' rows before chaining, and their share of the download
    totals (None: they have none)."""
    now = datetime.now(UTC)
    for workspace_id, group in by_workspace(events, lambda event: event.workspace_id).items():
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


def by_workspace(items: Iterable[T], workspace_of: Callable[[T], str]) -> dict[str, list[T]]:
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
        .execution_options(yield_per=CHAIN_PAGE)
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
