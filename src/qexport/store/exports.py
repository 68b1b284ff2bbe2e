"""The export queue on SQLAlchemy Core: every transition is one guarded UPDATE.

Each write checks its row count; a guard that matches nothing means the transition is not
allowed from the record's current state (or the caller lost its lease) and nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from qexport.domain.accounts import Role, Standing
from qexport.domain.audit import AuditEvent
from qexport.domain.exports import (
    EventKind,
    ExportEvent,
    ExportFilter,
    ExportRecord,
    Result,
    Status,
)
from qexport.domain.failures import (
    FailureCode,
    bounded_detail,
    unsettled_cap_reached,
)
from qexport.domain.fairness import RequesterQueue, claim_order
from qexport.domain.lifecycle import TRANSITIONS, Guard, Step, claim_step, failed_changes
from qexport.domain.queries import Query
from qexport.domain.quotas import check_workspace_quota
from qexport.domain.reports import SUBJECT_REPORT, ReportSubject
from qexport.domain.schedules import DeliveryStatus, NewDelivery
from qexport.domain.sensitivity import file_reads_from_json, file_reads_to_json
from qexport.ports import Admission, ClaimResult, NewExport
from qexport.store.audit.chain import append_if, lock_chain
from qexport.store.catalog import QUERY_KEYS, to_query, to_report
from qexport.store.engine import read_transaction, transaction
from qexport.store.notify import notify_claimable
from qexport.store.reads import OneRead
from qexport.store.tables.accounts import memberships, users, workspaces
from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.catalog import queries, reports
from qexport.store.tables.exports import SUCCEEDED, UNSETTLED, export_events, exports
from qexport.store.tables.schedules import deliveries

# The statements of the worker's path are built once, with parameters: SQLAlchemy finds a
# statement's compiled form by a key it derives by walking the statement, and for statements
# built per call that cost more than running them (claim_next: 3.1 -> 1.2 ms of CPU on
# PostgreSQL). Their guards are compiled from the lifecycle table (domain/lifecycle.py).
_ID = sa.bindparam("export_id_", type_=exports.c.id.type)
_TOKEN = sa.bindparam("token_", type_=exports.c.lease_token.type)
_NOW = sa.bindparam("now_", type_=UTCDateTime())
# Implied by the rest of the claimable condition; written out, as the index has it, so that
# both databases scan ix_exports_unsettled (SQLite only uses a partial index whose condition
# the query states).
_UNSETTLED = sa.text(f"exports.{UNSETTLED}")
_SUCCEEDED = sa.text(f"exports.{SUCCEEDED}")  # likewise for ix_exports_stored


def guard_clause(guard: Guard) -> sa.ColumnElement[bool]:
    """The lifecycle's guard as SQL, over the prebuilt statements' `now_` and `token_`."""
    status = exports.c.status
    if guard is Guard.QUEUED:
        return status == Status.QUEUED.value
    if guard is Guard.CLAIMABLE:
        return sa.and_(
            _UNSETTLED,
            sa.or_(
                status == Status.QUEUED.value,
                sa.and_(status == Status.RUNNING.value, exports.c.lease_expires_at < _NOW),
            ),
        )
    if guard is Guard.FENCED:
        return sa.and_(status == Status.RUNNING.value, exports.c.lease_token == _TOKEN)
    return status.in_([Status.QUEUED.value, Status.RUNNING.value])


def _guarded(step: Step) -> sa.Update:
    """The step's write on one export: its guard and the status the table says it writes;
    parameters that name a column are the rest of what it sets."""
    transition = TRANSITIONS[step]
    update = exports.update().where(exports.c.id == _ID, guard_clause(transition.guard))
    return update if transition.status is None else update.values(status=transition.status.value)


_CLAIMABLE = guard_clause(Guard.CLAIMABLE)
# What a transition's event is made of, read back from the row the transition wrote.
_EVENT_COLUMNS = (
    exports.c.id,
    exports.c.status,
    exports.c.attempt,
    exports.c.worker_id,
    exports.c.failure_code,
    exports.c.failure_detail,
    exports.c.last_error_code,
    exports.c.last_error_detail,
)
_HEARTBEAT = _guarded(Step.HEARTBEAT)
_PROGRESS = _guarded(Step.PROGRESS)
_TRANSITIONS = {
    step: _guarded(step).returning(*_EVENT_COLUMNS)
    for step in (Step.RELEASE, Step.SUCCEED, Step.FAIL, Step.REFUSE, Step.CANCEL)
}
_INSERT_EVENT = export_events.insert()
_REFUSE = _guarded(Step.REFUSE).returning(exports)
_CLAIM = (
    _guarded(Step.CLAIM)
    .values(
        attempt=exports.c.attempt + 1,
        started_at=sa.func.coalesce(exports.c.started_at, _NOW),
        progress_rows=0,
    )
    .returning(exports)
)
_INSERT = exports.insert().returning(exports)

# The claim reads the candidate with its query in one statement (the query's columns
# prefixed), and hands the query on to the attempt, which then need not read it again: one
# transaction fewer per export (0.5 ms of CPU and a ping on PostgreSQL).
_CLAIM_QUERY_PREFIX = "query_"
_CANDIDATE = (
    sa.select(exports).where(_CLAIMABLE).order_by(exports.c.created_at, exports.c.id).limit(1)
)


def _query_columns() -> list[sa.Label[Any]]:
    """A query's columns beside an export's, each key prefixed (read back by to_query)."""
    return [queries.c[key].label(_CLAIM_QUERY_PREFIX + key) for key in QUERY_KEYS]


def _with_query(candidate: sa.Select[Any]) -> sa.Select[Any]:
    """The one candidate, then its query and its requester's standing in the workspace: the
    joins read one row each, whatever the queue holds."""
    found = candidate.subquery("candidate")
    query_columns = _query_columns()
    member = sa.and_(
        memberships.c.workspace_id == found.c.workspace_id,
        memberships.c.user_id == found.c.requested_by,
    )
    return sa.select(
        found,
        *query_columns,
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
_LIVE_LEASE = sa.and_(exports.c.status == Status.RUNNING.value, exports.c.lease_expires_at >= _NOW)
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
            sa.func.min(sa.case((_CLAIMABLE, exports.c.created_at), else_=None)),
            UTCDateTime(),
        ).label("oldest"),
    )
    .where(_UNSETTLED)
    .group_by(exports.c.workspace_id, exports.c.requested_by)
)
_REQUESTER_CANDIDATE = _CANDIDATE.where(
    exports.c.workspace_id == _WORKSPACE, exports.c.requested_by == _REQUESTER
)
_OLDEST_OF = _with_query(_REQUESTER_CANDIDATE)
# Concurrent workers skip the rows others hold instead of queueing behind them; the query's
# row is only read, never locked.
_OLDEST_OF_PG = _with_query(_REQUESTER_CANDIDATE.with_for_update(skip_locked=True))


# The first characters of an export id (a UUID) before its first hyphen: a range over them
# lets the primary key find an id prefix on both databases, whatever the collation.
_HEX_HEAD = 8
_HEX_RUN = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class _NarrowShape:
    """Which parts of an ExportFilter are given (the WHERE clauses `_narrowed` builds)."""

    format: bool
    subject: bool
    since: bool
    until: bool
    search: bool
    prefix: bool
    failure_code: bool
    id_range: bool  # the prefix starts with hex digits: a range over the primary key too


@dataclass(frozen=True)
class _ListShape:
    """Which of list_exports's filters are given: one prebuilt statement per combination."""

    by: bool
    status: bool
    before: bool
    after: bool
    expired: bool | None  # only expired exports, only unexpired ones, or (None) either
    narrow: _NarrowShape | None


def _narrow_params(narrow: ExportFilter, params: dict[str, Any]) -> _NarrowShape:
    """Put the filter's values into `params`; the shape of its WHERE clauses (what
    `_narrowed` builds for them)."""
    params["format_"] = narrow.format
    params["subject_"] = narrow.subject_id
    params["since_"] = narrow.since
    params["until_"] = narrow.until
    params["failure_code_"] = narrow.failure_code and narrow.failure_code.value
    if narrow.search:
        params["search_"] = "%" + re.sub(r"([\\%_])", r"\\\1", narrow.search.lower()) + "%"
    head = None
    if narrow.id_prefix:
        prefix = narrow.id_prefix
        params["prefix_"], params["prefix_len_"] = prefix, len(prefix)
        run = _HEX_RUN.match(prefix[:_HEX_HEAD])  # "abcd" of "abcd-12": the id's own range
        if run:
            head = run.group()
            last = head[-1]
            params["head_"] = head
            params["upper_"] = head[:-1] + ("a" if last == "9" else chr(ord(last) + 1))
    return _NarrowShape(
        format=narrow.format is not None,
        subject=narrow.subject_id is not None,
        since=narrow.since is not None,
        until=narrow.until is not None,
        search=bool(narrow.search),
        prefix=bool(narrow.id_prefix),
        failure_code=narrow.failure_code is not None,
        id_range=head is not None,
    )


def _narrowed(shape: _NarrowShape) -> list[sa.ColumnElement[bool]]:
    """The filter as WHERE clauses over _narrow_params's values (ExportFilter.matches says
    the same of one record)."""
    c, p = exports.c, sa.bindparam
    clauses: list[sa.ColumnElement[bool]] = []
    if shape.format:
        clauses.append(c.format == p("format_"))
    if shape.subject:
        clauses.append(c.subject_id == p("subject_"))
    if shape.since:
        clauses.append(c.created_at >= p("since_", type_=c.created_at.type))
    if shape.until:
        clauses.append(c.created_at < p("until_", type_=c.created_at.type))
    if shape.search:
        clauses.append(sa.func.lower(c.subject_name).like(p("search_"), escape="\\"))
    if shape.failure_code:
        clauses.append(c.failure_code == p("failure_code_"))
    if shape.id_range:
        clauses.extend([c.id >= p("head_"), c.id < p("upper_")])
    if shape.prefix:
        clauses.append(sa.func.substr(c.id, 1, p("prefix_len_", type_=sa.Integer)) == p("prefix_"))
    return clauses


@functools.cache
def _list_statement(shape: _ListShape) -> OneRead:
    """list_exports's statement for one combination of filters, built once: built per call
    it took more CPU than running it (GET /exports?limit=1 on PostgreSQL)."""
    c, p = exports.c, sa.bindparam
    stmt = sa.select(exports).where(c.workspace_id == p("workspace_"))
    if shape.by:
        stmt = stmt.where(c.requested_by == p("requested_by_"))
    if shape.status:
        stmt = stmt.where(c.status == p("status_"))
    key = sa.tuple_(c.created_at, c.id)
    if shape.before:
        stmt = stmt.where(key < _key_value("before"))
    if shape.after:
        stmt = stmt.where(key > _key_value("after"))
    if shape.expired is not None:
        past = sa.and_(
            c.expires_at.is_not(None), c.expires_at <= p("now_", type_=c.expires_at.type)
        )
        stmt = stmt.where(past if shape.expired else sa.not_(past))
    if shape.narrow is not None:
        stmt = stmt.where(*_narrowed(shape.narrow))
    if shape.after:  # the page just newer than `after`: read upwards
        return OneRead(stmt.order_by(c.created_at, c.id).limit(p("limit_", type_=sa.Integer)))
    newest_first = stmt.order_by(c.created_at.desc(), c.id.desc())
    return OneRead(newest_first.limit(p("limit_", type_=sa.Integer)))


def _key_value(side: str) -> sa.Tuple:
    """(created_at, id) of a keyset cursor as a row value: both databases seek an index to a
    row value, while the OR form made SQLite read every newer export first (a page 180k
    exports deep: 81 ms, 0.5 ms as a row value)."""
    return sa.tuple_(
        sa.bindparam(f"{side}_at_", type_=exports.c.created_at.type),
        sa.bindparam(f"{side}_id_", type_=exports.c.id.type),
    )


def failed_values(now: datetime, code: FailureCode, detail: str) -> dict[str, Any]:
    """The columns a step that settles `failed` sets besides the status
    (`lifecycle.failed_changes`, with the code as the column holds it)."""
    return {**failed_changes(now, code, detail), "failure_code": code.value}


def _record_event(conn: sa.Connection, row: sa.Row[Any], kind: EventKind, now: datetime) -> None:
    """Append the event of the transition that just wrote `row`, in its transaction."""
    m = row._mapping
    if kind is EventKind.RELEASED:
        code, detail = m["last_error_code"], m["last_error_detail"]
    else:
        code, detail = m["failure_code"], m["failure_detail"]
    conn.execute(
        _INSERT_EVENT,
        {
            "export_id": m["id"],
            "at": now,
            "kind": kind.value,
            "status": m["status"],
            "attempt": m["attempt"],
            "worker_id": m["worker_id"],
            "code": code,
            "detail": detail,
        },
    )


def claim_in(
    conn: sa.Connection, export_id: str, worker_id: str, now: datetime, lease_seconds: float
) -> ExportRecord | None:
    """Claim (or redeliver) one claimable export with a new lease token, with its event."""
    params = {
        "export_id_": export_id,
        "now_": now,
        "lease_token": str(uuid.uuid4()),
        "lease_expires_at": now + timedelta(seconds=lease_seconds),
        "worker_id": worker_id,
    }
    row = conn.execute(_CLAIM, params).first()
    if row is None:
        return None
    record = _to_record(row)
    _record_event(conn, row, _event_of(claim_step(record.attempt)), now)
    return record


def transition_in(conn: sa.Connection, step: Step, now: datetime, **params: Any) -> bool:
    """The step's guarded UPDATE and, when its guard held, its event."""
    row = conn.execute(_TRANSITIONS[step], params).first()
    if row is None:
        return False
    _record_event(conn, row, _event_of(step), now)
    return True


def _event_of(step: Step) -> EventKind:
    event = TRANSITIONS[step].event
    assert event is not None  # every step but the heartbeat records one
    return event


def _to_record(row: Any) -> ExportRecord:  # a Row, or an OneRead's
    m = row._mapping
    return ExportRecord(
        id=m["id"],
        workspace_id=m["workspace_id"],
        requested_by=m["requested_by"],
        subject_type=m["subject_type"],
        subject_id=m["subject_id"],
        subject_name=m["subject_name"],
        format=m["format"],
        parameters=m["parameters"],
        options=m["options"],
        filename=m["filename"],
        storage_key=m["storage_key"],
        status=Status(m["status"]),
        attempt=m["attempt"],
        created_at=m["created_at"],
        lease_token=m["lease_token"],
        lease_expires_at=m["lease_expires_at"],
        worker_id=m["worker_id"],
        started_at=m["started_at"],
        completed_at=m["completed_at"],
        expires_at=m["expires_at"],
        size_bytes=m["size_bytes"],
        row_count=m["row_count"],
        sha256=m["sha256"],
        progress_rows=m["progress_rows"],
        failure_code=FailureCode(m["failure_code"]) if m["failure_code"] else None,
        failure_detail=m["failure_detail"],
        last_error_code=FailureCode(m["last_error_code"]) if m["last_error_code"] else None,
        last_error_detail=m["last_error_detail"],
        reads=file_reads_from_json(m["reads"]),
    )


# The hottest read (every GET of an export, every download), prebuilt like the transitions.
_GET_EXPORT = OneRead(sa.select(exports).where(exports.c.id == sa.bindparam("id_")))
# A download's read: the export with its query (a report's export: none), one round trip
# instead of two. On PostgreSQL one client's 64 KiB ranges took 2.25-2.41 ms instead of
# 2.54-2.79 ms (the server's CPU: 2.04-2.11 ms instead of 2.19-2.33).
_GET_EXPORT_WITH_QUERY = OneRead(
    sa.select(exports, *_query_columns())
    .select_from(
        exports.outerjoin(
            queries,
            sa.and_(queries.c.id == exports.c.subject_id, exports.c.subject_type != SUBJECT_REPORT),
        )
    )
    .where(exports.c.id == sa.bindparam("id_"))
)
_EVENTS = OneRead(
    sa.select(export_events)
    .where(export_events.c.export_id == sa.bindparam("id_"))
    .order_by(export_events.c.id)
)


def check_unsettled_cap(
    conn: sa.Connection, new: NewExport, cap: int, *, serialised: bool = False
) -> None:
    """Refuse `new`, already inserted in this transaction, if it took its requester past `cap`
    unsettled exports (the transaction then rolls back with it).

    Concurrent requests of one requester must count one after the other, each seeing the
    others' exports: SQLite's writers take turns already (BEGIN IMMEDIATE); on PostgreSQL the
    workspace's audit chain lock, held until the commit, orders them, taken here unless the
    caller holds it already (`serialised`: it appended the request's event). One lock for
    every request of a workspace, audited or not, so that none counts beside another. Counted
    after the insert and as late as the transaction allows, since everything after the lock
    holds the workspace's other requests up: a lock taken first was held across ten round
    trips and 40 clients' creates queued behind each other (p50 610 ms, bench/api_load.py).
    """
    if conn.dialect.name == "postgresql" and not serialised:
        lock_chain(conn, new.workspace_id)
    stmt = sa.select(sa.func.count()).where(
        _UNSETTLED,
        exports.c.workspace_id == new.workspace_id,
        exports.c.requested_by == new.requested_by,
    )
    before = int(conn.execute(stmt).scalar_one()) - 1  # the new export is one of them
    if before >= cap:
        raise unsettled_cap_reached(before, cap)


def finish_request_in(
    conn: sa.Connection, new: NewExport, *, max_unsettled: int | None, audit: AuditEvent | None
) -> None:
    """The end of the transaction that inserted `new`: its audit event, then the requester's
    cap. The event's chain lock (per workspace, held until the commit on PostgreSQL) already
    orders the request after every other of its workspace, the requester's included, so the
    count takes no lock of its own then: one queue and one round trip fewer for a request."""
    append_if(conn, audit)
    if max_unsettled is not None:
        covered = audit is not None and audit.workspace_id == new.workspace_id
        check_unsettled_cap(conn, new, max_unsettled, serialised=covered)


def insert_export_in(
    conn: sa.Connection, new: NewExport, new_deliveries: Sequence[NewDelivery], *, notify: bool
) -> ExportRecord:
    """Insert a queued export, its `requested` event and its waiting deliveries."""
    values = {
        "id": new.id,
        "workspace_id": new.workspace_id,
        "requested_by": new.requested_by,
        "subject_type": new.subject_type,
        "subject_id": new.subject_id,
        "subject_name": new.subject_name,
        "format": new.format,
        "parameters": new.parameters,
        "options": new.options,
        "filename": new.filename,
        "storage_key": new.storage_key,
        "status": Status.QUEUED.value,
        "attempt": 0,
        "progress_rows": 0,
        "created_at": new.created_at,
    }
    row = conn.execute(_INSERT, values).one()
    _record_event(conn, row, EventKind.REQUESTED, new.created_at)
    if new_deliveries:
        conn.execute(
            deliveries.insert(),
            [
                {
                    "id": d.id,
                    "export_id": new.id,
                    "schedule_id": d.schedule_id,
                    "subscriber_id": d.subscriber,
                    "channel": d.recipient.channel.value,
                    "target": d.recipient.target,
                    "status": DeliveryStatus.WAITING.value,
                    "attempt": 0,
                    "created_at": new.created_at,
                }
                for d in new_deliveries
            ],
        )
    if notify:
        notify_claimable(conn, new.id)
    return _to_record(row)


class SqlExportQueue:
    """ExportQueue over any SQLAlchemy engine (SQLite by default, PostgreSQL to scale)."""

    def __init__(self, engine: sa.Engine, *, notify: bool = True) -> None:
        self._engine = engine
        # Wake-ups by NOTIFY on PostgreSQL (see store/notify.py); polling covers the rest.
        self._notify = notify and engine.dialect.name == "postgresql"

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def _tx(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return transaction(self._engine)

    def _read(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return read_transaction(self._engine)

    # ------------------------------------------------------------ requests and reads

    def insert_export(
        self,
        new: NewExport,
        deliveries: Sequence[NewDelivery] = (),
        *,
        max_unsettled: int | None = None,
        audit: AuditEvent | None = None,
    ) -> ExportRecord:
        with self._tx() as conn:
            record = insert_export_in(conn, new, deliveries, notify=self._notify)
            finish_request_in(conn, new, max_unsettled=max_unsettled, audit=audit)
            return record

    def get_export(self, export_id: str) -> ExportRecord | None:
        row = _GET_EXPORT.first(self._engine, {"id_": export_id})
        return _to_record(row) if row else None

    def get_export_with_query(self, export_id: str) -> tuple[ExportRecord, Query | None] | None:
        row = _GET_EXPORT_WITH_QUERY.first(self._engine, {"id_": export_id})
        if row is None:
            return None
        query = to_query(row, _CLAIM_QUERY_PREFIX) if row.query_id is not None else None
        return _to_record(row), query

    def list_exports(
        self,
        *,
        workspace_id: str,
        requested_by: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
        expired_at: tuple[bool, datetime] | None = None,
        after: tuple[datetime, str] | None = None,
        narrow: ExportFilter | None = None,
    ) -> list[ExportRecord]:
        params: dict[str, Any] = {
            "workspace_": workspace_id,
            "limit_": limit,
            "requested_by_": requested_by,
            "status_": status.value if status is not None else None,
            "now_": expired_at[1] if expired_at else None,
        }
        if before is not None:
            params["before_at_"], params["before_id_"] = before
        if after is not None:
            params["after_at_"], params["after_id_"] = after
        shape = _ListShape(
            by=requested_by is not None,
            status=status is not None,
            before=before is not None,
            after=after is not None,
            expired=expired_at[0] if expired_at else None,
            narrow=_narrow_params(narrow, params) if narrow is not None else None,
        )
        found = [_to_record(r) for r in _list_statement(shape).all(self._engine, params)]
        return found[::-1] if after is not None else found  # read upwards, shown newest first

    def has_unsettled(self) -> bool:
        stmt = sa.select(sa.literal(1)).where(
            exports.c.status.in_([Status.QUEUED.value, Status.RUNNING.value])
        )
        with self._read() as conn:
            return conn.execute(stmt.limit(1)).first() is not None

    # ------------------------------------------------------------ the queue

    def claim_next(
        self,
        *,
        worker_id: str,
        now: datetime,
        lease_seconds: float,
        admit: Admission,
        max_running_per_user: int | None = None,
    ) -> ClaimResult:
        with self._tx() as conn:
            row = self._fair_candidate(conn, now, max_running_per_user)
            if row is None:
                return ClaimResult()
            candidate = _to_record(row)
            subject: Query | ReportSubject | None
            if candidate.subject_type == SUBJECT_REPORT:
                subject = self._report_subject(conn, candidate.subject_id)
            else:
                subject = to_query(row, _CLAIM_QUERY_PREFIX) if row.query_id is not None else None
            if candidate.status is Status.QUEUED:
                standing = Standing(
                    registered=row.standing_workspace is not None,
                    role=Role(row.standing_role) if row.standing_role else None,
                    disabled=row.standing_disabled_at is not None,
                )
                refusal = admit(candidate, subject, standing)
                if refusal is not None:
                    values = failed_values(now, FailureCode.ACCESS_LOST, refusal)
                    refused = conn.execute(_REFUSE, {"export_id_": candidate.id, **values}).first()
                    if refused is not None:
                        _record_event(conn, refused, _event_of(Step.REFUSE), now)
                    return ClaimResult(refused=_to_record(refused) if refused else None)
            claimed = claim_in(conn, candidate.id, worker_id, now, lease_seconds)
            return ClaimResult(claimed=claimed, subject=subject if claimed else None)

    @staticmethod
    def _fair_candidate(
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

    @staticmethod
    def _report_subject(conn: sa.Connection, report_id: str) -> ReportSubject:
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

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool:
        return self._update(
            _HEARTBEAT,
            export_id_=export_id,
            token_=token,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            progress_rows=progress_rows,
        )

    def record_progress(self, export_id: str, token: str, *, rows: int) -> bool:
        return self._update(_PROGRESS, export_id_=export_id, token_=token, progress_rows=rows)

    def release_with_backoff(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        delay_seconds: float,
        code: FailureCode,
        detail: str,
    ) -> bool:
        released = self._transition(
            Step.RELEASE,
            now,
            export_id_=export_id,
            token_=token,
            lease_expires_at=now + timedelta(seconds=delay_seconds),
            last_error_code=code.value,
            last_error_detail=bounded_detail(detail),
        )
        if released and self._notify and delay_seconds <= 0:
            # Handed back for immediate redelivery: wake a worker now, not at its next poll.
            with self._tx() as conn:
                notify_claimable(conn, export_id)
        return released

    def succeed(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        result: Result,
        expires_at: datetime,
        quota_bytes: int | None = None,
    ) -> bool:
        values = {
            "export_id_": export_id,
            "token_": token,
            "size_bytes": result.size_bytes,
            "row_count": result.row_count,
            "sha256": result.sha256,
            "progress_rows": result.row_count,
            "completed_at": now,
            "expires_at": expires_at,
            # SQL NULL, not JSON null, for "not on record": `IS NULL` finds them either way.
            "reads": sa.null() if result.reads is None else file_reads_to_json(result.reads),
        }
        with self._tx() as conn:
            if quota_bytes:
                self._check_quota(conn, export_id, now, result.size_bytes, quota_bytes)
            return transition_in(conn, Step.SUCCEED, now, **values)

    @staticmethod
    def _check_quota(
        conn: sa.Connection, export_id: str, now: datetime, size: int, quota: int
    ) -> None:
        """Sum the workspace's stored bytes in the settling transaction; on PostgreSQL an
        advisory lock per workspace serialises concurrent settles (SQLite's already are)."""
        workspace = conn.execute(
            sa.select(exports.c.workspace_id).where(exports.c.id == export_id)
        ).scalar()
        if workspace is None:
            return
        if conn.dialect.name == "postgresql":
            key = f"qexport.quota/{workspace}"
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtextextended(key, 0))))
        used = conn.execute(
            sa.select(sa.func.coalesce(sa.func.sum(exports.c.size_bytes), 0)).where(
                exports.c.workspace_id == workspace,
                _SUCCEEDED,
                exports.c.expires_at > now,
            )
        ).scalar_one()
        check_workspace_quota(int(used), size, quota)

    def fail(
        self, export_id: str, token: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool:
        values = failed_values(now, code, detail)
        return self._transition(Step.FAIL, now, export_id_=export_id, token_=token, **values)

    def cancel(self, export_id: str, *, now: datetime, audit: AuditEvent | None = None) -> bool:
        values = failed_values(now, FailureCode.CANCELLED, "cancelled by the requester")
        with self._tx() as conn:
            if not transition_in(conn, Step.CANCEL, now, export_id_=export_id, **values):
                return False
            append_if(conn, audit)
            return True

    def _update(self, guarded: sa.Update, **params: Any) -> bool:
        """One guarded UPDATE; `params` fill the guard's parameters and the columns to set."""
        with self._tx() as conn:
            return conn.execute(guarded, params).rowcount == 1

    def _transition(self, step: Step, now: datetime, **params: Any) -> bool:
        with self._tx() as conn:
            return transition_in(conn, step, now, **params)

    def list_events(self, export_id: str) -> list[ExportEvent]:
        return [
            ExportEvent(
                export_id=r.export_id,
                at=r.at,
                kind=EventKind(r.kind),
                status=Status(r.status),
                attempt=r.attempt,
                worker_id=r.worker_id,
                code=FailureCode(r.code) if r.code else None,
                detail=r.detail,
            )
            for r in _EVENTS.all(self._engine, {"id_": export_id})
        ]
