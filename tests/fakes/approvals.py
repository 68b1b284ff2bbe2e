"""ApprovalStore in memory, beside an InMemoryExportQueue that an approval inserts into."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import datetime

from qexport.domain.approvals import ApprovalRequest, ApprovalStatus, Decision, NewApproval
from qexport.domain.audit import AuditEvent
from qexport.domain.failures import waiting_cap_reached
from qexport.domain.schedules import NewDelivery
from qexport.ports import NewExport
from tests.fakes.audit import InMemoryAuditLog
from tests.fakes.exports import InMemoryExportQueue


class InMemoryApprovalStore:
    def __init__(self, exports: InMemoryExportQueue) -> None:
        self._exports = exports
        self._requests: dict[str, ApprovalRequest] = {}
        self._lock = threading.Lock()
        self.audit_log = InMemoryAuditLog()  # the container's, when it builds one

    def add_approval(
        self,
        new: NewApproval,
        *,
        audit: AuditEvent | None = None,
        max_waiting: int | None = None,
    ) -> ApprovalRequest:
        request = ApprovalRequest(**asdict(new))
        with self._lock:
            assert new.id not in self._requests, "approval ids are unique"
            waiting = sum(
                r.workspace_id == new.workspace_id
                and r.requested_by == new.requested_by
                and r.effective_status(new.created_at) is ApprovalStatus.PENDING
                for r in self._requests.values()
            )
            if max_waiting is not None and waiting >= max_waiting:
                raise waiting_cap_reached(waiting, max_waiting)
            self._requests[new.id] = request
        self.audit_log.append(audit)
        return request

    def get_approval(self, approval_id: str) -> ApprovalRequest | None:
        return self._requests.get(approval_id)

    def list_approvals(
        self,
        workspace_id: str,
        *,
        requested_by: str | None = None,
        pending_at: datetime | None = None,
        limit: int = 100,
    ) -> list[ApprovalRequest]:
        found = [
            r
            for r in self._requests.values()
            if r.workspace_id == workspace_id
            and (requested_by is None or r.requested_by == requested_by)
            and (pending_at is None or r.effective_status(pending_at) is ApprovalStatus.PENDING)
        ]
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return found[:limit]

    def decide_approval(
        self,
        approval_id: str,
        decision: Decision,
        *,
        by: str,
        now: datetime,
        reason: str | None,
        export: tuple[NewExport, Sequence[NewDelivery]] | None = None,
        audit: AuditEvent | None = None,
    ) -> ApprovalRequest | None:
        assert (export is not None) == (decision is Decision.APPROVE), "an approval makes one"
        with self._lock:
            request = self._requests.get(approval_id)
            if request is None or request.effective_status(now) is not ApprovalStatus.PENDING:
                return None
            if export is not None:
                self._exports.insert_export(*export)
            decided = replace(
                request,
                status=decision.status,
                decided_by=by,
                decided_at=now,
                reason=reason,
                export_id=export[0].id if export is not None else None,
            )
            self._requests[approval_id] = decided
        self.audit_log.append(audit)
        return decided

    def pending_approvals(self, now: datetime) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self._requests.values():
            if r.effective_status(now) is ApprovalStatus.PENDING:
                counts[r.workspace_id] = counts.get(r.workspace_id, 0) + 1
        return counts
