"""Approvals: export requests that wait for an admin."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.domain.approvals import ApprovalRequest, Decision, NewApproval
    from qexport.domain.audit import AuditEvent
    from qexport.domain.schedules import NewDelivery
    from qexport.ports.exports import NewExport


class ApprovalStore(Protocol):
    """Export requests of sensitive queries, waiting for an admin (domain/approvals.py)."""

    def add_approval(
        self,
        new: NewApproval,
        *,
        audit: AuditEvent | None = None,
        max_waiting: int | None = None,
    ) -> ApprovalRequest:
        """Record `new` with its event; TooManyRequestsError, and nothing recorded, when its
        requester already has `max_waiting` requests waiting in its workspace (counted with
        the insert, so requests sent at once cannot pass the cap together)."""
        ...

    def get_approval(self, approval_id: str) -> ApprovalRequest | None: ...
    def list_approvals(
        self,
        workspace_id: str,
        *,
        requested_by: str | None = None,
        pending_at: datetime | None = None,
        limit: int = 100,
    ) -> list[ApprovalRequest]:
        """Newest first; `pending_at`: only those still pending (unexpired) at that time."""
        ...

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
        """Decide a request that is pending and unexpired at `now` (None when it is not: the
        guard matched nothing and nothing changed); an approval inserts `export`, queued, in
        the same transaction."""
        ...

    def pending_approvals(self, now: datetime) -> dict[str, int]:
        """How many requests are pending at `now`, per workspace."""
        ...
