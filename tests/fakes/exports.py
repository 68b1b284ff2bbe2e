"""The export queue and the catalog in memory, guarded by one lock."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from qexport.domain.accounts import (
    Standing,
)
from qexport.domain.exports import (
    UNSETTLED,
    EventKind,
    ExportEvent,
    ExportRecord,
    Result,
    Status,
)
from qexport.domain.failures import (
    FailureCode,
    InvalidRequestError,
    bounded_detail,
    unsettled_cap_reached,
)
from qexport.domain.fairness import RequesterKey, RequesterQueue, claim_order
from qexport.domain.queries import Query
from qexport.domain.quotas import check_workspace_quota
from qexport.domain.reports import SUBJECT_REPORT, Report, ReportSubject
from qexport.domain.schedules import NewDelivery
from qexport.ports import Admission, ClaimResult, NewExport


def _expired(record: ExportRecord, now: datetime) -> bool:
    return record.expires_at is not None and record.expires_at <= now


class InMemoryMetadataStore:
    """The MetadataStore contract on a dict, guarded by one lock."""

    def __init__(self, standing: Callable[[str, str], Standing] | None = None) -> None:
        self._exports: dict[str, ExportRecord] = {}
        self._queries: dict[str, Query] = {}
        self._reports: dict[str, Report] = {}
        self._events: list[ExportEvent] = []
        # (export id, delivery) as recorded with each export
        self.deliveries: list[tuple[str, NewDelivery]] = []
        # (workspace id, user id) -> the requester's standing; default: no accounts.
        self._standing = standing or (lambda _workspace, _user: Standing())
        self._lock = threading.RLock()  # claim_next claims while holding it

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

    def insert_export(
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

    def list_exports(
        self,
        *,
        workspace_id: str,
        requested_by: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
        expired_at: tuple[bool, datetime] | None = None,
    ) -> list[ExportRecord]:
        with self._lock:
            rows = [
                r
                for r in self._exports.values()
                if r.workspace_id == workspace_id
                and (requested_by is None or r.requested_by == requested_by)
                and (status is None or r.status is status)
                and (before is None or (r.created_at, r.id) < before)
                and (expired_at is None or _expired(r, expired_at[1]) is expired_at[0])
            ]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return rows[:limit]

    def has_unsettled(self) -> bool:
        with self._lock:
            return any(r.status in UNSETTLED for r in self._exports.values())

    @staticmethod
    def _is_claimable(record: ExportRecord, now: datetime) -> bool:
        if record.status is Status.QUEUED:
            return True
        return (
            record.status is Status.RUNNING
            and record.lease_expires_at is not None
            and record.lease_expires_at < now
        )

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
            if candidate.status is Status.QUEUED:
                standing = self._standing(candidate.workspace_id, candidate.requested_by)
                refusal = admit(candidate, self._subject(candidate), standing)
                if refusal is not None:
                    refused = replace(
                        candidate,
                        status=Status.FAILED,
                        failure_code=FailureCode.ACCESS_LOST,
                        failure_detail=bounded_detail(refusal) or "access_lost",
                        completed_at=now,
                    )
                    self._exports[candidate.id] = refused
                    self._event(refused, EventKind.REFUSED, now)
                    return ClaimResult(refused=refused)
            return ClaimResult(
                claimed=self.claim(
                    candidate.id, worker_id=worker_id, now=now, lease_seconds=lease_seconds
                ),
                query=self._subject(candidate),
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
            if self._is_claimable(r, now):
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
        if record.subject_type != SUBJECT_REPORT:
            return self._queries.get(record.subject_id)
        report = self._reports.get(record.subject_id)
        if report is None:
            return ReportSubject(None)
        ids = {s.query_id for s in report.sections}
        return ReportSubject(report, {query_id: self._queries.get(query_id) for query_id in ids})

    def next_claimable(self, now: datetime) -> ExportRecord | None:
        with self._lock:
            candidates = [r for r in self._exports.values() if self._is_claimable(r, now)]
        return min(candidates, key=lambda r: (r.created_at, r.id), default=None)

    def _write(
        self,
        export_id: str,
        guard: Callable[[ExportRecord], bool],
        event: tuple[EventKind, datetime] | None = None,
        **changes: Any,
    ) -> ExportRecord | None:
        with self._lock:
            record = self._exports.get(export_id)
            if record is None or not guard(record):
                return None
            updated = replace(record, **changes)
            self._exports[export_id] = updated
            if event is not None:
                self._event(updated, *event)
            return updated

    def claim(
        self, export_id: str, *, worker_id: str, now: datetime, lease_seconds: float
    ) -> ExportRecord | None:
        with self._lock:
            record = self._exports.get(export_id)
            if record is None or not self._is_claimable(record, now):
                return None
            updated = replace(
                record,
                status=Status.RUNNING,
                attempt=record.attempt + 1,
                lease_token=str(uuid.uuid4()),
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                worker_id=worker_id,
                started_at=record.started_at or now,
                progress_rows=0,
            )
            self._exports[export_id] = updated
            kind = EventKind.CLAIMED if updated.attempt == 1 else EventKind.REDELIVERED
            self._event(updated, kind, now)
            return updated

    @staticmethod
    def _fence(token: str) -> Callable[[ExportRecord], bool]:
        return lambda r: r.status is Status.RUNNING and r.lease_token == token

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool:
        return (
            self._write(
                export_id,
                self._fence(token),
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                progress_rows=progress_rows,
            )
            is not None
        )

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
        return (
            self._write(
                export_id,
                self._fence(token),
                (EventKind.RELEASED, now),
                lease_expires_at=now + timedelta(seconds=delay_seconds),
                last_error_code=code,
                last_error_detail=bounded_detail(detail),
            )
            is not None
        )

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
            return self._succeed(export_id, token, now=now, result=result, expires_at=expires_at)

    def _succeed(
        self, export_id: str, token: str, *, now: datetime, result: Result, expires_at: datetime
    ) -> bool:
        return (
            self._write(
                export_id,
                self._fence(token),
                (EventKind.SUCCEEDED, now),
                status=Status.SUCCEEDED,
                size_bytes=result.size_bytes,
                row_count=result.row_count,
                sha256=result.sha256,
                progress_rows=result.row_count,
                completed_at=now,
                expires_at=expires_at,
            )
            is not None
        )

    def _settle_failed(
        self,
        export_id: str,
        guard: Callable[[ExportRecord], bool],
        now: datetime,
        code: FailureCode,
        detail: str,
        kind: EventKind = EventKind.FAILED,
    ) -> bool:
        return (
            self._write(
                export_id,
                guard,
                (kind, now),
                status=Status.FAILED,
                failure_code=code,
                failure_detail=bounded_detail(detail) or code.value,
                completed_at=now,
            )
            is not None
        )

    def fail(
        self, export_id: str, token: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool:
        return self._settle_failed(export_id, self._fence(token), now, code, detail)

    def fail_before_run(
        self, export_id: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool:
        return self._settle_failed(
            export_id, lambda r: r.status is Status.QUEUED, now, code, detail, EventKind.REFUSED
        )

    def cancel(self, export_id: str, *, now: datetime) -> bool:
        return self._settle_failed(
            export_id,
            lambda r: r.status in UNSETTLED,
            now,
            FailureCode.CANCELLED,
            "cancelled by the requester",
            EventKind.CANCELLED,
        )

    # saved queries
    def add_query(self, query: Query) -> Query:
        with self._lock:
            if self._live_query(query.workspace_id, query.name) is not None:
                raise InvalidRequestError(
                    f"a query named {query.name!r} already exists", field="name"
                )
            self._queries[query.id] = query
        return query

    def _live_query(self, workspace_id: str, name: str) -> Query | None:
        for query in self._queries.values():
            if query.workspace_id == workspace_id and query.name == name and not query.deleted:
                return query
        return None

    def get_query(self, query_id: str) -> Query | None:
        with self._lock:
            return self._queries.get(query_id)

    def find_query(self, workspace_id: str, name: str) -> Query | None:
        with self._lock:
            return self._live_query(workspace_id, name)

    def list_queries(self, workspace_id: str) -> list[Query]:
        with self._lock:
            live = [
                q
                for q in self._queries.values()
                if q.workspace_id == workspace_id and not q.deleted
            ]
        return sorted(live, key=lambda q: q.name)

    def update_query(self, query: Query) -> bool:
        with self._lock:
            current = self._queries.get(query.id)
            if current is None or current.deleted:
                return False
            self._queries[query.id] = replace(query, workspace_id=current.workspace_id)
            return True

    def delete_query(self, query_id: str) -> bool:
        with self._lock:
            current = self._queries.get(query_id)
            if current is None or current.deleted:
                return False
            self._queries[query_id] = replace(current, deleted=True)
            return True

    # reports
    def add_report(self, report: Report) -> Report:
        with self._lock:
            if report.id in self._reports:
                raise ValueError("duplicate report id")
            self._reports[report.id] = report
        return report

    def get_report(self, report_id: str) -> Report | None:
        with self._lock:
            return self._reports.get(report_id)

    def list_reports(self, workspace_id: str) -> list[Report]:
        with self._lock:
            live = [
                r
                for r in self._reports.values()
                if r.workspace_id == workspace_id and not r.deleted
            ]
        return sorted(live, key=lambda r: (r.title, r.id))

    def update_report(self, report: Report) -> bool:
        with self._lock:
            current = self._reports.get(report.id)
            if current is None or current.deleted:
                return False
            self._reports[report.id] = replace(report, workspace_id=current.workspace_id)
            return True

    def delete_report(self, report_id: str) -> bool:
        with self._lock:
            current = self._reports.get(report_id)
            if current is None or current.deleted:
                return False
            self._reports[report_id] = replace(current, deleted=True)
            return True
