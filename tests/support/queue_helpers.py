"""Steps of the lifecycle that tests take one export at a time, on the SQL queue or the fake.

Workers only ever `claim_next` and settle; tests also claim a given export, look at what is
claimable and refuse a queued export by hand. These are the same guarded writes the queue
makes (domain/lifecycle.py), reached without widening the ExportQueue port.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.exports import ExportRecord
from qexport.domain.failures import FailureCode
from qexport.domain.lifecycle import Guard, Step, failed_changes, guard_holds
from qexport.store.engine import transaction
from qexport.store.exports.queue import SqlExportQueue
from qexport.store.exports.transitions import claim_in, failed_values, guard_clause, transition_in
from qexport.store.tables.exports import exports
from tests.fakes.exports import InMemoryExportQueue


def next_claimable(queue: Any, now: datetime) -> ExportRecord | None:
    """The oldest export a claim may take now (whoever requested it)."""
    if isinstance(queue, SqlExportQueue):
        stmt = (
            sa.select(exports.c.id)
            .where(guard_clause(Guard.CLAIMABLE))
            .order_by(exports.c.created_at, exports.c.id)
            .limit(1)
        )
        with transaction(queue.engine) as conn:
            found_id = conn.execute(stmt, {"now_": now}).scalar()
        return queue.get_export(found_id) if found_id is not None else None
    assert isinstance(queue, InMemoryExportQueue)
    with queue._lock:
        found = [r for r in queue._exports.values() if guard_holds(r, Guard.CLAIMABLE, None, now)]
    return min(found, key=lambda r: (r.created_at, r.id), default=None)


def claim(
    queue: Any, export_id: str, *, worker_id: str, now: datetime, lease_seconds: float
) -> ExportRecord | None:
    """Claim (or redeliver) this export if it is claimable; None if not."""
    if isinstance(queue, SqlExportQueue):
        with transaction(queue.engine) as conn:
            return claim_in(conn, export_id, worker_id, now, lease_seconds)
    assert isinstance(queue, InMemoryExportQueue)
    return queue._claim(export_id, worker_id, now, lease_seconds)


def fail_before_run(
    queue: Any, export_id: str, *, now: datetime, code: FailureCode, detail: str
) -> bool:
    """Refuse a queued export before it runs (as the pre-run check does); False if it is not
    queued."""
    if isinstance(queue, SqlExportQueue):
        values = failed_values(now, code, detail)
        with transaction(queue.engine) as conn:
            return transition_in(conn, Step.REFUSE, now, export_id_=export_id, **values)
    assert isinstance(queue, InMemoryExportQueue)
    changes = failed_changes(now, code, detail)
    return queue.apply(Step.REFUSE, export_id, now=now, **changes) is not None
