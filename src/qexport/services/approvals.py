"""Exports of sensitive queries: asked for, then approved or denied by another admin.

`record_request` (services/requests.py) hands a request whose subject the workspace's policy
marks sensitive to `ask`, which records it as awaiting approval; `decide` makes the export,
with the requester's rights and in the same transaction as the decision, or denies it. Both
are audit events in their transaction; a refused decision (an admin approving their own
request) is one too. The requester and the admins are told by email when QEXPORT_SMTP_URL
is set, after the transaction, without holding up the request (deliveries/approval_mail.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from qexport.domain.accounts import Role
from qexport.domain.approvals import (
    ApprovalRequest,
    Decision,
    NewApproval,
    check_decision,
)
from qexport.domain.audit import Action, Actor, AuditEvent, Outcome
from qexport.domain.exports import Requester
from qexport.domain.failures import (
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
)
from qexport.domain.queries import can_read
from qexport.domain.reports import SUBJECT_REPORT
from qexport.domain.schedules import NewDelivery, Recipient, parse_recipient
from qexport.ports import AccountStore, ApprovalStore, AuditLog, Catalog, Clock, NewExport
from qexport.services.audit import actor_for, event

MAX_LISTED = 200


@dataclass(frozen=True)
class ApprovalDesk:
    """Where sensitive requests go: the store, how long a request waits, and who is told."""

    store: ApprovalStore
    ttl: timedelta
    # Called after a request is recorded and after each decision (email, when configured);
    # it must not raise (deliveries/approval_mail.py sends on a thread of its own).
    tell: Callable[[ApprovalRequest], None] = lambda _request: None
    # Requests one requester may have waiting at once.
    max_pending: int = 20


def ask(
    desk: ApprovalDesk,
    clock: Clock,
    new: NewExport,
    notify: Sequence[Recipient],
    fingerprint: str,
) -> ApprovalRequest:
    """Record the (already checked) export `new` as awaiting an admin's approval; a
    requester with `desk.max_pending` requests waiting already is refused (429), counted as
    the request is recorded (ApprovalStore.add_approval), so requests sent at once cannot
    pass the cap together."""
    now = clock.now()
    approval = NewApproval(
        id=str(uuid.uuid4()),
        workspace_id=new.workspace_id,
        requested_by=new.requested_by,
        subject_type=new.subject_type,
        subject_id=new.subject_id,
        subject_name=new.subject_name,
        format=new.format,
        parameters=dict(new.parameters),
        options=dict(new.options),
        notify=[r.to_json() for r in notify],
        created_at=now,
        expires_at=now + desk.ttl,
        fingerprint=fingerprint,
    )
    asked = event(
        clock,
        actor_for(new.requested_by),
        Action.APPROVAL_REQUESTED,
        workspace_id=new.workspace_id,
        target=("approval", approval.id),
        details={
            "subject_type": new.subject_type,
            "subject_id": new.subject_id,
            "subject_name": new.subject_name,
            "format": new.format,
            "parameters": sorted(new.parameters),
            "recipients": len(notify),
        },
    )
    request = desk.store.add_approval(approval, audit=asked, max_waiting=desk.max_pending)
    desk.tell(request)
    return request


@dataclass(frozen=True)
class Decider:
    """Who decides: the user, their role in the workspace, and the actor the trail names."""

    user_id: str
    workspace_id: str
    role: Role | None
    actor: Actor


@dataclass(frozen=True)
class Rebuild:
    """What `decide` needs to make the approved export: the catalogue and the accounts (the
    requester must still be a member, the subject still readable to them), and the function
    that turns the request back into an export (services/requests.py's `approved_export`)."""

    catalog: Catalog
    accounts: AccountStore
    export_of: Callable[[ApprovalRequest, Requester], tuple[NewExport, str]]


def visible_request(
    store: ApprovalStore, approval_id: str, user_id: str, workspace_id: str, role: Role | None
) -> ApprovalRequest:
    """A request its requester, or an admin of its workspace, may see; NotFoundError otherwise."""
    request = store.get_approval(approval_id) if len(approval_id) <= 64 else None
    if (
        request is None
        or request.workspace_id != workspace_id
        or (role is not Role.ADMIN and request.requested_by != user_id)
    ):
        raise NotFoundError(f"no approval request {approval_id[:64]!r}")
    return request


def decide(
    desk: ApprovalDesk,
    audit: AuditLog,
    clock: Clock,
    rebuild: Rebuild,
    decider: Decider,
    approval_id: str,
    decision: Decision,
    reason: str | None = None,
) -> ApprovalRequest:
    """Approve (the export is created, queued) or deny a pending request of the decider's
    workspace; a refusal says why (403 not an admin or four eyes, 409 no longer pending or
    the export can no longer be made as asked) and is recorded when it is the four-eyes rule."""
    request = visible_request(
        desk.store, approval_id, decider.user_id, decider.workspace_id, decider.role
    )
    now = clock.now()
    try:
        check_decision(request, decision, decider.user_id, decider.role, now)
    except ForbiddenError:
        if decider.role is Role.ADMIN:  # an admin approving their own request: on record
            audit.record(_decided(clock, decider, request, decision, Outcome.REFUSED))
        raise
    export = None
    if decision is Decision.APPROVE:
        new = _export_as_asked(rebuild, request)
        export = (new, [_delivery(r) for r in request.notify])
    decided = desk.store.decide_approval(
        request.id,
        decision,
        by=decider.user_id,
        now=now,
        reason=reason,
        export=export,
        audit=_decided(
            clock,
            decider,
            request,
            decision,
            Outcome.OK,
            export_id=export[0].id if export is not None else None,
            reason=reason,
        ),
    )
    if decided is None:  # decided by someone else, or expired, since it was read
        current = desk.store.get_approval(request.id) or request
        raise ConflictError(f"the request was already {current.effective_status(now).value}")
    desk.tell(decided)
    return decided


def _export_as_asked(rebuild: Rebuild, request: ApprovalRequest) -> NewExport:
    """The export the request asked for, made now with the requester's rights; ConflictError
    when that is no longer possible (they left, the subject is gone, its parameters moved)."""
    requester = Requester(request.requested_by, request.workspace_id)
    user = rebuild.accounts.get_user(request.requested_by)
    if (
        user is None
        or user.disabled
        or rebuild.accounts.role_of(request.workspace_id, request.requested_by) is None
    ):
        raise ConflictError("the requester is no longer a member of the workspace; deny it")
    if request.subject_type != SUBJECT_REPORT:
        query = rebuild.catalog.get_query(request.subject_id)
        if not can_read(requester, query):
            raise ConflictError(
                f"the query {request.subject_name!r} was deleted or the requester can no"
                " longer read it; deny it"
            )
    try:
        new, fingerprint = rebuild.export_of(request, requester)
    except NotFoundError as exc:
        raise ConflictError(f"{exc}; deny it") from None
    except InvalidRequestError as exc:
        raise ConflictError(
            f"the export can no longer be made as asked ({exc}); deny it and ask again"
        ) from None
    if fingerprint != request.fingerprint:
        raise ConflictError(
            f"the {request.subject_type} {request.subject_name!r} changed since it was asked for"
            " (its SQL, source, parameters or sections): approve only what was asked; deny it"
            " and let the requester ask again"
        )
    return new


def _delivery(stored: dict[str, str]) -> NewDelivery:
    return NewDelivery(str(uuid.uuid4()), parse_recipient(stored))


def _decided(
    clock: Clock,
    decider: Decider,
    request: ApprovalRequest,
    decision: Decision,
    outcome: Outcome,
    *,
    export_id: str | None = None,
    reason: str | None = None,
) -> AuditEvent:
    details: dict[str, object] = {
        "decision": decision.value,
        "requested_by": request.requested_by,
        "subject_type": request.subject_type,
        "subject_id": request.subject_id,
    }
    if export_id is not None:
        details["export_id"] = export_id
    if reason is not None:
        details["reason"] = reason
    if outcome is Outcome.REFUSED:
        details["refused"] = "four eyes: the requester may not approve their own request"
    return event(
        clock,
        decider.actor,
        Action.APPROVAL_DECIDED,
        workspace_id=request.workspace_id,
        target=("approval", request.id),
        outcome=outcome,
        details=details,
    )


def listed(
    store: ApprovalStore,
    user_id: str,
    workspace_id: str,
    role: Role | None,
    *,
    pending_at: datetime | None = None,
) -> list[ApprovalRequest]:
    """An admin sees the workspace's requests, anyone else their own; newest first
    (`pending_at`: only those still pending then)."""
    mine = None if role is Role.ADMIN else user_id
    return store.list_approvals(
        workspace_id, requested_by=mine, pending_at=pending_at, limit=MAX_LISTED
    )
