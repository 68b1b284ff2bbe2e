"""The export queue (ExportQueue) over SQLAlchemy: requests, claims and the lifecycle's
transitions, each in one transaction, over the reads of SqlExportReads."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from qexport.domain.accounts import Role, Standing
from qexport.domain.audit import AuditEvent
from qexport.domain.exports import ExportRecord, Result, Status
from qexport.domain.failures import FailureCode, bounded_detail
from qexport.domain.lifecycle import Step
from qexport.domain.queries import Query
from qexport.domain.quotas import check_workspace_quota
from qexport.domain.reports import SUBJECT_REPORT, ReportSubject
from qexport.domain.schedules import NewDelivery
from qexport.domain.sensitivity import file_reads_to_json
from qexport.ports import Admission, ClaimResult, NewExport
from qexport.store.audit.chain import append_if
from qexport.store.catalog import to_query
from qexport.store.engine import transaction
from qexport.store.exports.claims import fair_candidate, report_subject
from qexport.store.exports.reads import SqlExportReads
from qexport.store.exports.records import QUERY_PREFIX, to_record
from qexport.store.exports.requests import finish_request_in, insert_export_in
from qexport.store.exports.transitions import (
    HEARTBEAT,
    PROGRESS,
    REFUSE,
    claim_in,
    event_of,
    failed_values,
    record_event,
    transition_in,
)
from qexport.store.notify import notify_claimable
from qexport.store.tables.exports import SUCCEEDED, exports

# The quota's condition written as ix_exports_stored states it: SQLite only uses a partial
# index whose condition the query states.
_SUCCEEDED = sa.text(f"exports.{SUCCEEDED}")


class SqlExportQueue(SqlExportReads):
    """ExportQueue over any SQLAlchemy engine (SQLite by default, PostgreSQL to scale)."""

    def __init__(self, engine: sa.Engine, *, notify: bool = True) -> None:
        super().__init__(engine)
        # Wake-ups by NOTIFY on PostgreSQL (see store/notify.py); polling covers the rest.
        self._notify = notify and engine.dialect.name == "postgresql"

    def _tx(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return transaction(self._engine)

    # ------------------------------------------------------------ requests

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
            row = fair_candidate(conn, now, max_running_per_user)
            if row is None:
                return ClaimResult()
            candidate = to_record(row)
            subject: Query | ReportSubject | None
            if candidate.subject_type == SUBJECT_REPORT:
                subject = report_subject(conn, candidate.subject_id)
            else:
                subject = to_query(row, QUERY_PREFIX) if row.query_id is not None else None
            if candidate.status is Status.QUEUED:
                standing = Standing(
                    registered=row.standing_workspace is not None,
                    role=Role(row.standing_role) if row.standing_role else None,
                    disabled=row.standing_disabled_at is not None,
                )
                refusal = admit(candidate, subject, standing)
                if refusal is not None:
                    values = failed_values(now, FailureCode.ACCESS_LOST, refusal)
                    refused = conn.execute(REFUSE, {"export_id_": candidate.id, **values}).first()
                    if refused is not None:
                        record_event(conn, refused, event_of(Step.REFUSE), now)
                    return ClaimResult(refused=to_record(refused) if refused else None)
            claimed = claim_in(conn, candidate.id, worker_id, now, lease_seconds)
            return ClaimResult(claimed=claimed, subject=subject if claimed else None)

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool:
        return self._update(
            HEARTBEAT,
            export_id_=export_id,
            token_=token,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            progress_rows=progress_rows,
        )

    def record_progress(self, export_id: str, token: str, *, rows: int) -> bool:
        return self._update(PROGRESS, export_id_=export_id, token_=token, progress_rows=rows)

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
