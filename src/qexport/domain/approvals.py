"""Exports of sensitive queries wait for an admin's approval.

A request of a query the workspace's policy marks sensitive (or of a report that holds one) is
recorded as an approval request, not as an export: nothing is queued and no file can exist.
When an admin other than the requester approves it, the export is created, in the same
transaction, with its lifecycle from the start (DESIGN section 1) and the requester's rights.
A denied request, or one nobody answered within QEXPORT_APPROVAL_TTL, creates nothing.

    pending --approve--> approved (its export created)
    pending --deny-----> denied
    pending --(ttl)----> expired (read as such once past `expires_at`; nothing writes it)

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from qexport.domain.accounts import Role
from qexport.domain.failures import ConflictError, ForbiddenError, InvalidRequestError
from qexport.domain.queries import Query
from qexport.domain.reports import Report

MAX_REASON_CHARS = 500  # what an admin writes when deciding, shown to the requester
# The option an approved export carries (its request's id): the worker runs an export of a
# sensitive query only with it (one queued before the query was marked sensitive, or a
# schedule's run, fails access_lost).
APPROVAL_OPTION = "approval_id"
# ... and the fingerprint of what it was approved to read (`reads_fingerprint`).
APPROVED_READS_OPTION = "approved_reads"


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class Decision(StrEnum):
    APPROVE = "approve"
    DENY = "deny"

    @property
    def status(self) -> ApprovalStatus:
        return ApprovalStatus.APPROVED if self is Decision.APPROVE else ApprovalStatus.DENIED


@dataclass(frozen=True)
class NewApproval:
    """What an export request of a sensitive subject records: everything the export will be
    made of once approved (parameters already bound and checked, as JSON values)."""

    id: str
    workspace_id: str
    requested_by: str
    subject_type: str
    subject_id: str
    subject_name: str
    format: str
    parameters: dict[str, Any]
    options: dict[str, Any]
    # The request's recipients, as Recipient.to_json() gives them.
    notify: list[dict[str, Any]]
    created_at: datetime
    expires_at: datetime
    # What the admin approves the export to read (`reads_fingerprint`): a query or report
    # changed since is not exported under this approval.
    fingerprint: str


@dataclass(frozen=True)
class ApprovalRequest(NewApproval):
    """A recorded request: what was asked (NewApproval) and what became of it."""

    status: ApprovalStatus = ApprovalStatus.PENDING
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    # The export an approval created.
    export_id: str | None = None

    def effective_status(self, now: datetime) -> ApprovalStatus:
        """The stored status, or expired once a pending request's time is up."""
        if self.status is ApprovalStatus.PENDING and now >= self.expires_at:
            return ApprovalStatus.EXPIRED
        return self.status


def reads_fingerprint(queries: Iterable[Query | None], report: Report | None = None) -> str:
    """The SHA-256 of what an export reads: each query's source, SQL and parameters, and the
    report's sections. An approval holds for exactly this: a query's SQL or a report's
    sections changed after the request (or after the approval) no longer match."""
    body = {
        "report": [s.to_json() for s in report.sections] if report is not None else None,
        "queries": sorted(
            (
                [q.id, q.source, q.sql, [p.to_json() for p in q.parameters]]
                for q in queries
                if q is not None
            ),
            key=lambda item: str(item[0]),
        ),
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_decision(
    request: ApprovalRequest,
    decision: Decision,
    decider: str,
    role: Role | None,
    now: datetime,
) -> None:
    """Refuse a decision that may not be taken: by anyone but an admin (ForbiddenError),
    except the requester withdrawing (denying) their own request; the requester approving
    their own (ForbiddenError: four eyes); or a request no longer pending (ConflictError,
    saying what became of it)."""
    withdrawal = decision is Decision.DENY and request.requested_by == decider
    if role is not Role.ADMIN and not withdrawal:
        raise ForbiddenError("only workspace admins may approve or deny export requests")
    status = request.effective_status(now)
    if status is ApprovalStatus.EXPIRED:
        raise ConflictError("the request expired unanswered; the requester may ask again")
    if status is not ApprovalStatus.PENDING:
        raise ConflictError(f"the request was already {status.value}")
    if decision is Decision.APPROVE and request.requested_by == decider:
        raise ForbiddenError("you cannot approve your own request: another admin must (four eyes)")


def checked_reason(reason: Any) -> str | None:
    """A decision's optional note, bounded; blank is none."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidRequestError("reason is text", field="reason")
    text = reason.strip()
    if len(text) > MAX_REASON_CHARS:
        raise InvalidRequestError(
            f"reason is at most {MAX_REASON_CHARS} characters", field="reason"
        )
    return text or None
