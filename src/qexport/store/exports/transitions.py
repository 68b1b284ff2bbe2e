"""The export queue's transitions on SQLAlchemy Core: every transition is one guarded UPDATE.

Each write checks its row count; a guard that matches nothing means the transition is not
allowed from the record's current state (or the caller lost its lease) and nothing changes.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from qexport.domain.exports import EventKind, ExportRecord, Status
from qexport.domain.failures import FailureCode
from qexport.domain.lifecycle import TRANSITIONS, Guard, Step, claim_step, failed_changes
from qexport.store.exports.records import to_record
from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.exports import UNSETTLED, export_events, exports

# The statements of the worker's path are built once, with parameters: SQLAlchemy finds a
# statement's compiled form by a key it derives by walking the statement, and for statements
# built per call that cost more than running them (claim_next: 3.1 -> 1.2 ms of CPU on
# PostgreSQL). Their guards are compiled from the lifecycle table (domain/lifecycle.py).
_ID = sa.bindparam("export_id_", type_=exports.c.id.type)
_TOKEN = sa.bindparam("token_", type_=exports.c.lease_token.type)
NOW = sa.bindparam("now_", type_=UTCDateTime())
# Implied by the rest of the claimable condition; written out, as the index has it, so that
# both databases scan ix_exports_unsettled (SQLite only uses a partial index whose condition
# the query states).
UNSETTLED_CLAUSE = sa.text(f"exports.{UNSETTLED}")


def guard_clause(guard: Guard) -> sa.ColumnElement[bool]:
    """The lifecycle's guard as SQL, over the prebuilt statements' `now_` and `token_`."""
    status = exports.c.status
    if guard is Guard.QUEUED:
        return status == Status.QUEUED.value
    if guard is Guard.CLAIMABLE:
        return sa.and_(
            UNSETTLED_CLAUSE,
            sa.or_(
                status == Status.QUEUED.value,
                sa.and_(status == Status.RUNNING.value, exports.c.lease_expires_at < NOW),
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


CLAIMABLE = guard_clause(Guard.CLAIMABLE)
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
HEARTBEAT = _guarded(Step.HEARTBEAT)
PROGRESS = _guarded(Step.PROGRESS)
_TRANSITIONS = {
    step: _guarded(step).returning(*_EVENT_COLUMNS)
    for step in (Step.RELEASE, Step.SUCCEED, Step.FAIL, Step.REFUSE, Step.CANCEL)
}
_INSERT_EVENT = export_events.insert()
REFUSE = _guarded(Step.REFUSE).returning(exports)
_CLAIM = (
    _guarded(Step.CLAIM)
    .values(
        attempt=exports.c.attempt + 1,
        started_at=sa.func.coalesce(exports.c.started_at, NOW),
        progress_rows=0,
    )
    .returning(exports)
)


def failed_values(now: datetime, code: FailureCode, detail: str) -> dict[str, Any]:
    """The columns a step that settles `failed` sets besides the status
    (`lifecycle.failed_changes`, with the code as the column holds it)."""
    return {**failed_changes(now, code, detail), "failure_code": code.value}


def record_event(conn: sa.Connection, row: sa.Row[Any], kind: EventKind, now: datetime) -> None:
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
    record = to_record(row)
    record_event(conn, row, event_of(claim_step(record.attempt)), now)
    return record


def transition_in(conn: sa.Connection, step: Step, now: datetime, **params: Any) -> bool:
    """The step's guarded UPDATE and, when its guard held, its event."""
    row = conn.execute(_TRANSITIONS[step], params).first()
    if row is None:
        return False
    record_event(conn, row, event_of(step), now)
    return True


def event_of(step: Step) -> EventKind:
    event = TRANSITIONS[step].event
    assert event is not None  # every step but the heartbeat records one
    return event
