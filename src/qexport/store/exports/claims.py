"""Claiming fairly: the oldest claimable export of the requester whose turn it is, read with
its query (or report) and its requester's standing in one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.exports import Status
from qexport.domain.fairness import RequesterQueue, claim_order
from qexport.domain.reports import ReportSubject
from qexport.store.catalog import to_query, to_report
from qexport.store.exports.records import query_columns
from qexport.store.exports.transitions import CLAIMABLE, NOW, UNSETTLED_CLAUSE
from qexport.store.tables.accounts import memberships, users, workspaces
from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.catalog import queries, reports
from qexport.store.tables.exports import exports

_CANDIDATE = (
    sa.select(exports).where(CLAIMABLE).order_by(exports.c.created_at, exports.c.id).limit(1)
)


def _with_query(candidate: sa.Select[Any]) -> sa.Select[Any]:
    """The one candidate, then its query and its requester's standing in the workspace: the
    joins read one row each, whatever the queue holds."""
    found = candidate.subquery("candidate")
    of_query = query_columns()
    member = sa.and_(
        memberships.c.workspace_id == found.c.workspace_id,
        memberships.c.user_id == found.c.requested_by,
    )
    return sa.select(
        found,
        *of_query,
        workspaces.c.id.label("standing_workspace"),
        memberships.c.role.label("standing_role"),
        users.c.disabled_at.label("standing_disabled_at"),
    ).select_from(
        found.outerjoin(queries, queries.c.id == found.c.subject_id)
        .outerjoin(workspaces, workspaces.c.id == found.c.workspace_id)
        .outerjoin(memberships, member)
        .outerjoin(users, users.c.id == found.c.requested_by)
    )


# Fair claiming (domain/fairness.py), in two reads: per requester, how many run, when their
# oldest claimable export was requested and when any of theirs last started (one index seek
# each, ix_exports_requester_started), one pass over the unsettled exports grouped by
# requester (each holds at most QEXPORT_MAX_UNSETTLED_PER_USER of them: 1000 unsettled took
# 1.2 ms of PostgreSQL's time); then the oldest claimable export of the first requester in
# claim_order that still has one, through ix_exports_requester_unsettled, stopping at the
# first row it can take. All statements are prebuilt.
_WORKSPACE = sa.bindparam("workspace_", type_=exports.c.workspace_id.type)
_REQUESTER = sa.bindparam("requester_", type_=exports.c.requested_by.type)
_LIVE_LEASE = sa.and_(exports.c.status == Status.RUNNING.value, exports.c.lease_expires_at >= NOW)
_SERVED = exports.alias("served")
_LAST_STARTED = (
    sa.select(sa.func.max(_SERVED.c.started_at))
    .where(
        _SERVED.c.workspace_id == exports.c.workspace_id,
        _SERVED.c.requested_by == exports.c.requested_by,
    )
    .scalar_subquery()
)
_REQUESTER_QUEUES = (
    sa.select(
        exports.c.workspace_id,
        exports.c.requested_by,
        sa.type_coerce(_LAST_STARTED, UTCDateTime()).label("last_started"),
        sa.func.sum(sa.case((_LIVE_LEASE, 1), else_=0)).label("running"),
        sa.type_coerce(
            sa.func.min(sa.case((CLAIMABLE, exports.c.created_at), else_=None)),
            UTCDateTime(),
        ).label("oldest"),
    )
    .where(UNSETTLED_CLAUSE)
    .group_by(exports.c.workspace_id, exports.c.requested_by)
)
_REQUESTER_CANDIDATE = _CANDIDATE.where(
    exports.c.workspace_id == _WORKSPACE, exports.c.requested_by == _REQUESTER
)
_OLDEST_OF = _with_query(_REQUESTER_CANDIDATE)
# Concurrent workers skip the rows others hold instead of queueing behind them; the query's
# row is only read, never locked.
_OLDEST_OF_PG = _with_query(_REQUESTER_CANDIDATE.with_for_update(skip_locked=True))


def fair_candidate(
    conn: sa.Connection, now: datetime, max_running: int | None
) -> sa.Row[Any] | None:
    """The oldest claimable export of the first requester in `claim_order` that has one
    this transaction may take (on PostgreSQL, others' locked rows are skipped)."""
    pg = conn.dialect.name == "postgresql"
    oldest_of = _OLDEST_OF_PG if pg else _OLDEST_OF
    queues = [
        RequesterQueue(
            (row.workspace_id, row.requested_by),
            int(row.running),
            row.oldest,
            row.last_started,
        )
        for row in conn.execute(_REQUESTER_QUEUES, {"now_": now})
    ]
    for workspace, requester in claim_order(queues, max_running):
        params = {"now_": now, "workspace_": workspace, "requester_": requester}
        row = conn.execute(oldest_of, params).first()
        if row is not None:
            return row
    return None


def report_subject(conn: sa.Connection, report_id: str) -> ReportSubject:
    """A report and its sections' queries, read in the claiming transaction."""
    row = conn.execute(sa.select(reports).where(reports.c.id == report_id)).first()
    if row is None:
        return ReportSubject(None)
    report = to_report(row)
    ids = sorted({s.query_id for s in report.sections})
    found = {
        q.id: q
        for q in (
            to_query(r) for r in conn.execute(sa.select(queries).where(queries.c.id.in_(ids)))
        )
    }
    return ReportSubject(report, {query_id: found.get(query_id) for query_id in ids})
