"""The export queue in memory: a dict, a lock and the lifecycle table (domain/lifecycle.py)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from qexport.domain.accounts import Standing
from qexport.domain.audit import AuditEvent
from qexport.domain.exports import (
    UNSETTLED,
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
from qexport.domain.fairness import RequesterKey, RequesterQueue, claim_order
from qexport.domain.lifecycle import (
    TRANSITIONS,
    Guard,
    Step,
    claim_step,
    failed_changes,
    guard_holds,
)
from qexport.domain.queries import Query
from qexport.domain.quotas import check_workspace_quota
from qexport.domain.reports import SUBJECT_REPORT, ReportSubject
from qexport.domain.schedules import NewDelivery
from qexport.ports import Admission, Catalog, ClaimResult, NewExport
from tests.fakes.audit import InMemoryAuditLog
from tests.fakes.catalog import InMemoryCatalog


def _expired(record: ExportRecord, now: datetime) -> bool:
    return record.expires_at is not None and record.expires_at <= now


class InMemoryExportQueue:
    """The ExportQueue contract: every transition is `apply`, checked against the table."""

    def __init__(
        self,
        standing: Callable[[str, str], Standing] | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self._exports: dict[str, ExportRecord] = {}
        self._events: list[ExportEvent] = []
        self.audit_log = InMemoryAuditLog()  # the container's, when it builds one
        # (export id, delivery) as recorded with each export
        self.deliveries: list[tuple[str, NewDelivery]] = []
        # (workspace id, user id) -> the requester's standing; default: no accounts.
        self._standing = standing or (lambda _workspace, _user: Standing())
        self._catalog = catalog  # where a claim reads the export's subject (None: nowhere)
        self._lock = threading.RLock()  # claim_next claims while holding it

    def apply(
        self,
        step: Step,
        export_id: str,
        *,
        now: datetime,
        token: str | None = None,
        **changes: Any,
    ) -> ExportRecord | None:
        """One row of the lifecycle table: if its guard holds, write its status and
        `changes` (only fields the table lets it set) and record its event."""
        transition = TRANSITIONS[step]
        assert set(changes) <= transition.sets, (step, set(changes) - transition.sets)
        with self._lock:
            record = self._exports.get(export_id)
            if record is None or not guard_holds(record, transition.guard, token, now):
                return None
            status = transition.status or record.status
            updated = replace(record, status=status, **changes)
            self._exports[export_id] = updated
            if transition.event is not None:
                self._event(updated, transition.event, now)
            return updated

    def _event(self, record: ExportRecord, kind: EventKind, now: datetime) -> None:
        released = kind is EventKind.RELEASED
        self._events.append(
            ExportEvent(
                export_id=record.id,
                at=now,
                kind=kind,
                status=record.status,
                attempt=record.attempt,
                worker_id=record.worker_id,
                code=record.last_error_code if released else record.failure_code,
                detail=record.last_error_detail if released else record.failure_detail,
            )
        )

    def list_events(self, export_id: str) -> list[ExportEvent]:
        with self._lock:
            return [e for e in self._events if e.export_id == export_id]

    def _insert_export_unaudited(
        self,
        new: NewExport,
        deliveries: Sequence[NewDelivery] = (),
        *,
        max_unsettled: int | None = None,
    ) -> ExportRecord:
        with self._lock:
            if max_unsettled is not None:
                unsettled = sum(
                    1
                    for r in self._exports.values()
                    if r.status in UNSETTLED
                    and r.workspace_id == new.workspace_id
                    and r.requested_by == new.requested_by
                )
                if unsettled >= max_unsettled:
                    raise unsettled_cap_reached(unsettled, max_unsettled)
            if new.id in self._exports or any(
                r.storage_key == new.storage_key for r in self._exports.values()
            ):
                raise ValueError("duplicate export id or storage key")
            record = ExportRecord(
                id=new.id,
                workspace_id=new.workspace_id,
                requested_by=new.requested_by,
                subject_type=new.subject_type,
                subject_id=new.subject_id,
                subject_name=new.subject_name,
                format=new.format,
                parameters=dict(new.parameters),
                options=dict(new.options),
                filename=new.filename,
                storage_key=new.storage_key,
                status=Status.QUEUED,
                attempt=0,
                created_at=new.created_at,
            )
            self._exports[new.id] = record
            self._event(record, EventKind.REQUESTED, new.created_at)
            self.deliveries.extend((new.id, d) for d in deliveries)
            return record

    def get_export(self, export_id: str) -> ExportRecord | None:
        with self._lock:
            return self._exports.get(export_id)

    def get_export_with_query(self, export_id: str) -> tuple[ExportRecord, Query | None] | None:
        record = self.get_export(export_id)
        if record is None:
            return None
        if record.subject_type == SUBJECT_REPORT or self._catalog is None:
            return record, None
        return record, self._catalog.get_query(record.subject_id)

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
        with self._lock:
            rows = [
                r
                for r in self._exports.values()
                if r.workspace_id == workspace_id
                and (requested_by is None or r.requested_by == requested_by)
                and (status is None or r.status is status)
                and (before is None or (r.created_at, r.id) < before)
                and (after is None or (r.created_at, r.id) > after)
                and (expired_at is None or _expired(r, expired_at[1]) is expired_at[0])
                and (narrow is None or narrow.matches(r))
            ]
        if after is not None:
            rows.sort(key=lambda r: (r.created_at, r.id))
            return rows[:limit][::-1]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return rows[:limit]

    def has_unsettled(self) -> bool:
        with self._lock:
            return any(r.status in UNSETTLED for r in self._exports.values())

    def claim_next(
        self,
        *,
        worker_id: str,
        now: datetime,
        lease_seconds: float,
        admit: Admission,
        max_running_per_user: int | None = None,
    ) -> ClaimResult:
        with self._lock:
            candidate = self._fair_candidate(now, max_running_per_user)
            if candidate is None:
                return ClaimResult()
            subject = self._subject(candidate)
            if candidate.status is Status.QUEUED:
                standing = self._standing(candidate.workspace_id, candidate.requested_by)
                refusal = admit(candidate, subject, standing)
                if refusal is not None:
                    failed = failed_changes(now, FailureCode.ACCESS_LOST, refusal)
                    refused = self.apply(Step.REFUSE, candidate.id, now=now, **failed)
                    return ClaimResult(refused=refused)
            claimed = self._claim(candidate.id, worker_id, now, lease_seconds)
            return ClaimResult(claimed=claimed, subject=subject)

    def _claim(
        self, export_id: str, worker_id: str, now: datetime, lease_seconds: float
    ) -> ExportRecord | None:
        """Claim (or redeliver) one export if it is claimable, with a new lease token."""
        with self._lock:
            record = self._exports.get(export_id)
            if record is None:
                return None
            attempt = record.attempt + 1
            return self.apply(
                claim_step(attempt),
                export_id,
                now=now,
                attempt=attempt,
                lease_token=str(uuid.uuid4()),
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                worker_id=worker_id,
                started_at=record.started_at or now,
                progress_rows=0,
            )

    def _fair_candidate(self, now: datetime, max_running: int | None) -> ExportRecord | None:
        running: Counter[RequesterKey] = Counter()
        waiting: dict[RequesterKey, list[ExportRecord]] = {}
        last_started: dict[RequesterKey, datetime] = {}
        for r in self._exports.values():
            key = (r.workspace_id, r.requested_by)
            if r.started_at is not None and (
                key not in last_started or r.started_at > last_started[key]
            ):
                last_started[key] = r.started_at
            if guard_holds(r, Guard.CLAIMABLE, None, now):
                waiting.setdefault(key, []).append(r)
            elif r.status is Status.RUNNING:
                running[key] += 1
        queues = [
            RequesterQueue(
                key, running[key], min(r.created_at for r in found), last_started.get(key)
            )
            for key, found in waiting.items()
        ]
        order = claim_order(queues, max_running)
        return min(waiting[order[0]], key=lambda r: (r.created_at, r.id)) if order else None

    def _subject(self, record: ExportRecord) -> Query | ReportSubject | None:
        if self._catalog is None:
            return None
        if record.subject_type != SUBJECT_REPORT:
            return self._catalog.get_query(record.subject_id)
        report = self._catalog.get_report(record.subject_id)
        if report is None:
            return ReportSubject(None)
        ids = {s.query_id for s in report.sections}
        found = {query_id: self._catalog.get_query(query_id) for query_id in ids}
        return ReportSubject(report, found)

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool:
        updated = self.apply(
            Step.HEARTBEAT,
            export_id,
            now=now,
            token=token,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            progress_rows=progress_rows,
        )
        return updated is not None

    def record_progress(self, export_id: str, token: str, *, rows: int) -> bool:
        # The fake's clock never matters to a fenced guard.
        updated = self.apply(
            Step.PROGRESS, export_id, now=datetime.now(UTC), token=token, progress_rows=rows
        )
        return updated is not None

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
        updated = self.apply(
            Step.RELEASE,
            export_id,
            now=now,
            token=token,
            lease_expires_at=now + timedelta(seconds=delay_seconds),
            last_error_code=code,
            last_error_detail=bounded_detail(detail),
        )
        return updated is not None

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
        with self._lock:
            record = self._exports.get(export_id)
            if quota_bytes and record is not None:
                used = sum(
                    r.size_bytes or 0
                    for r in self._exports.values()
                    if r.workspace_id == record.workspace_id
                    and r.status is Status.SUCCEEDED
                    and r.expires_at is not None
                    and r.expires_at > now
                )
                check_workspace_quota(used, result.size_bytes, quota_bytes)
            updated = self.apply(
                Step.SUCCEED,
                export_id,
                now=now,
                token=token,
                size_bytes=result.size_bytes,
                row_count=result.row_count,
                sha256=result.sha256,
                progress_rows=result.row_count,
                completed_at=now,
                expires_at=expires_at,
                reads=result.reads,
            )
            return updated is not None

    def fail(
        self, export_id: str, token: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool:
        failed = failed_changes(now, code, detail)
        return self.apply(Step.FAIL, export_id, now=now, token=token, **failed) is not None

    def _cancel_unaudited(self, export_id: str, *, now: datetime) -> bool:
        failed = failed_changes(now, FailureCode.CANCELLED, "cancelled by the requester")
        return self.apply(Step.CANCEL, export_id, now=now, **failed) is not None

    # the audited writes: each appends its `audit` event when the change is made
    def insert_export(
        self,
        new: NewExport,
        deliveries: Sequence[NewDelivery] = (),
        *,
        max_unsettled: int | None = None,
        audit: AuditEvent | None = None,
    ) -> ExportRecord:
        done = self._insert_export_unaudited(new, deliveries, max_unsettled=max_unsettled)
        self.audit_log.append(audit)
        return done

    def cancel(self, export_id: str, *, now: datetime, audit: AuditEvent | None = None) -> bool:
        done = self._cancel_unaudited(export_id, now=now)
        if done:
            self.audit_log.append(audit)
        return done


class InMemoryMetadataStore(InMemoryExportQueue, InMemoryCatalog):
    """The export queue and the catalog as one object, as most tests use them."""

    def __init__(self, standing: Callable[[str, str], Standing] | None = None) -> None:
        InMemoryCatalog.__init__(self)
        InMemoryExportQueue.__init__(self, standing, catalog=self)
