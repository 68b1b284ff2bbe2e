"""What `/metrics` reports, read from the metadata database at scrape time.

Every API and worker process writes to the same database, so any one process can report the
whole system. A scrape runs three aggregate statements and reads the download and preview
totals (one row per workspace each, kept with the audit trail: store/audit/, and the
database's triggers for previews), on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.exports import EXPIRED, Status
from qexport.domain.stats import (
    ATTEMPT_ENDS,
    ATTEMPT_EVENTS_LIMIT,
    ATTEMPT_STARTS,
    ATTEMPT_WINDOW,
    DURATION_BUCKETS,
    EFFECTIVE_STATUSES,
    DownloadTally,
    Durations,
    ExportStats,
    PreviewTally,
)
from qexport.store.engine import read_transaction
from qexport.store.tables.accounts import workspaces
from qexport.store.tables.approvals import approval_requests
from qexport.store.tables.audit import audit_download_totals, audit_preview_totals
from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.exports import UNSETTLED, export_events, exports


def read_stats(engine: sa.Engine, now: datetime) -> ExportStats:
    """The figures of one scrape, read in one transaction."""
    with read_transaction(engine) as conn:
        by_status, failures, rows, size = _exports(conn, now)
        depth, oldest = _queue(conn, now)
        attempts = _attempts(conn, now)
        downloads = _downloads(conn)
        pending = _approvals_pending(conn, now)
        previews = _previews(conn)
    return ExportStats(
        by_status, failures, rows, size, depth, oldest, attempts, downloads, pending, previews
    )


def _exports(conn: sa.Connection, now: datetime) -> tuple[dict[str, int], dict[str, int], int, int]:
    expired = sa.and_(exports.c.status == Status.SUCCEEDED.value, exports.c.expires_at <= now)
    # Grouped in an outer query: PostgreSQL does not see a CASE with a bound parameter in
    # GROUP BY as the same expression as the one selected.
    inner = sa.select(
        sa.case((expired, EXPIRED), else_=exports.c.status).label("status"),
        exports.c.failure_code,
        exports.c.row_count,
        exports.c.size_bytes,
    ).subquery()
    stmt = sa.select(
        inner.c.status,
        inner.c.failure_code,
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(inner.c.row_count), 0),
        sa.func.coalesce(sa.func.sum(inner.c.size_bytes), 0),
    ).group_by(inner.c.status, inner.c.failure_code)
    by_status = dict.fromkeys(EFFECTIVE_STATUSES, 0)
    failures: dict[str, int] = {}
    rows = size = 0
    for status, code, count, row_sum, byte_sum in conn.execute(stmt):
        by_status[status] = by_status.get(status, 0) + int(count)
        if code is not None and status == Status.FAILED.value:
            failures[code] = failures.get(code, 0) + int(count)
        if status in (Status.SUCCEEDED.value, EXPIRED):
            rows += int(row_sum)
            size += int(byte_sum)
    return by_status, failures, rows, size


def _queue(conn: sa.Connection, now: datetime) -> tuple[int, datetime | None]:
    queued = exports.c.status == Status.QUEUED.value
    claimable = sa.or_(
        queued,
        sa.and_(exports.c.status == Status.RUNNING.value, exports.c.lease_expires_at < now),
    )
    stmt = sa.select(
        sa.func.count(sa.case((claimable, 1))),
        sa.func.min(sa.case((queued, exports.c.created_at)), type_=UTCDateTime()),
    ).where(sa.text(f"exports.{UNSETTLED}"))  # as ix_exports_unsettled states it
    depth, oldest = conn.execute(stmt).one()
    return int(depth), oldest


def _seconds_between(conn: sa.Connection, start: Any, end: Any) -> sa.ColumnElement[Any]:
    if conn.dialect.name == "sqlite":
        # Timestamps are ISO text there; julianday() is a double of ~2.5e6 days, good to
        # ~50 microseconds: rounded to the millisecond.
        return sa.func.round((sa.func.julianday(end) - sa.func.julianday(start)) * 86400.0, 3)
    return sa.extract("epoch", end - start)


def _attempts(conn: sa.Connection, now: datetime) -> dict[str, Durations]:
    start, end, later = (export_events.alias(name) for name in ("s", "e", "later"))
    next_end = (
        sa.select(sa.func.min(later.c.id))
        .where(
            later.c.export_id == start.c.export_id,
            later.c.attempt == start.c.attempt,
            later.c.id > start.c.id,
            later.c.kind.in_(ATTEMPT_ENDS),
        )
        .scalar_subquery()
    )
    newest = sa.select(sa.func.coalesce(sa.func.max(export_events.c.id), 0)).scalar_subquery()
    pairs = (
        sa.select(
            end.c.kind.label("outcome"),
            _seconds_between(conn, start.c.at, end.c.at).label("seconds"),
        )
        .select_from(start.join(end, end.c.id == next_end))
        .where(
            start.c.kind.in_(ATTEMPT_STARTS),
            start.c.id > newest - ATTEMPT_EVENTS_LIMIT,
            start.c.at >= now - ATTEMPT_WINDOW,
        )
        .subquery()
    )
    stmt = sa.select(
        pairs.c.outcome,
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(pairs.c.seconds), 0.0),
        *(sa.func.count(sa.case((pairs.c.seconds <= bound, 1))) for bound in DURATION_BUCKETS),
    ).group_by(pairs.c.outcome)
    found: dict[str, Durations] = {}
    for outcome, count, total, *cumulative in conn.execute(stmt):
        buckets = tuple(zip(DURATION_BUCKETS, (int(c) for c in cumulative), strict=True))
        found[outcome] = Durations(buckets, int(count), float(total))
    return found


def _approvals_pending(conn: sa.Connection, now: datetime) -> dict[str, int]:
    """Every workspace's requests awaiting approval now (0 for one with none)."""
    found = dict.fromkeys(conn.execute(sa.select(workspaces.c.id)).scalars(), 0)
    c = approval_requests.c
    stmt = (
        sa.select(c.workspace_id, sa.func.count())
        .where(c.status == "pending", c.expires_at > now)
        .group_by(c.workspace_id)
    )
    for workspace_id, count in conn.execute(stmt):
        found[workspace_id] = int(count)
    return found


def _downloads(conn: sa.Connection) -> dict[str, DownloadTally]:
    """Every workspace's download totals: 0 for one without downloads yet, so that its
    series exist from the start; a workspace's totals outlive the workspace's row."""
    found = dict.fromkeys(conn.execute(sa.select(workspaces.c.id)).scalars(), DownloadTally())
    t = audit_download_totals.c
    for workspace_id, downloads, sent, public in conn.execute(
        sa.select(t.workspace_id, t.downloads, t.bytes_sent, t.public_link_uses)
    ):
        found[workspace_id] = DownloadTally(int(downloads), int(sent), int(public))
    return found


def _previews(conn: sa.Connection) -> dict[str, PreviewTally]:
    """Every workspace's preview totals, 0 for one without previews yet (as downloads)."""
    found = dict.fromkeys(conn.execute(sa.select(workspaces.c.id)).scalars(), PreviewTally())
    t = audit_preview_totals.c
    for workspace_id, previews, rows in conn.execute(
        sa.select(t.workspace_id, t.previews, t.rows_shown)
    ):
        found[workspace_id] = PreviewTally(int(previews), int(rows))
    return found
