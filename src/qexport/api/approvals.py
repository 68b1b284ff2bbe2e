"""/api/v1/approvals: export requests of sensitive queries, waiting for a workspace admin.

`POST /api/v1/exports` of a query the workspace's policy marks sensitive answers 202 with
one of these instead of an export. Admins see their workspace's requests and approve or deny
them; anyone else sees their own. An approval creates the export (queued, the requester's);
an admin may not approve their own request (403, four eyes).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, ConfigDict, Field

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.exports import ExportSubject
from qexport.api.schemas.problems import problem_responses
from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.approvals import ApprovalRequest, Decision
from qexport.domain.commands import Decide
from qexport.http.one_hop import OneHopRoute
from qexport.services.approvals import listed
from qexport.services.approvals import visible_request as _visible
from qexport.services.deciding import decide_request
from qexport.services.views import approval_view as approval_json

router = APIRouter(route_class=OneHopRoute, tags=["approvals"])


class Approval(BaseModel):
    """An export request awaiting (or past) an admin's decision; `status` is `expired` once
    `expires_at` passed unanswered. `export_id` is the export an approval created."""

    kind: str = Field("approval", description="Always `approval`: not yet an export.")
    id: str
    status: str = Field(description="pending, approved, denied or expired.")
    subject: ExportSubject
    format: str
    parameters: dict[str, Any]
    notify: list[dict[str, str]] = Field(
        description="Where the export goes once made, as the request named it: what the"
        " approval sends there too"
    )
    requested_by: str
    created_at: datetime
    expires_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    reason: str | None
    export_id: str | None


class ApprovalList(BaseModel):
    items: list[Approval]


class ApprovalDecision(BaseModel):
    """An optional note for the requester (at most 500 characters)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = None


NO_REASON = ApprovalDecision(reason=None)  # no body: a decision without a note


def approval_view(request: ApprovalRequest, now: datetime) -> Approval:
    return Approval.model_validate(approval_json(request, now))


@router.get("/approvals", response_model=ApprovalList, responses=problem_responses(401, 503))
def list_approvals(
    principal: CurrentPrincipal, context: Context, pending: bool = False
) -> ApprovalList:
    """Newest first: a workspace admin sees every request of the workspace, anyone else
    their own; `pending=true`: only those still waiting."""
    now = context.clock.now()
    found = listed(
        context.approvals,
        principal.user_id,
        principal.workspace_id,
        principal.role,
        pending_at=now if pending else None,
    )
    return ApprovalList(items=[approval_view(r, now) for r in found])


@router.get(
    "/approvals/{approval_id}", response_model=Approval, responses=problem_responses(401, 404)
)
def get_approval(approval_id: str, principal: CurrentPrincipal, context: Context) -> Approval:
    """One request: its requester's, or any of the workspace's for an admin (else 404)."""
    request = _visible(
        context.approvals, approval_id, principal.user_id, principal.workspace_id, principal.role
    )
    return approval_view(request, context.clock.now())


def _decide(
    principal: Principal,
    context: Container,
    approval_id: str,
    decision: Decision,
    body: ApprovalDecision,
) -> Approval:
    decided = decide_request(context, principal, Decide(approval_id, decision, body.reason))
    return approval_view(decided, context.clock.now())


@router.post(
    "/approvals/{approval_id}/approve",
    response_model=Approval,
    responses=problem_responses(400, 401, 403, 404, 409, 422),
)
def approve(
    approval_id: str,
    principal: CurrentPrincipal,
    context: Context,
    body: Annotated[ApprovalDecision, Body()] = NO_REASON,
) -> Approval:
    """Approve a pending request (workspace admins other than the requester): its export is
    created and queued, with the requester's rights; `export_id` names it. 409 when the
    request is no longer pending, or its export can no longer be made as asked."""
    return _decide(principal, context, approval_id, Decision.APPROVE, body)


@router.post(
    "/approvals/{approval_id}/deny",
    response_model=Approval,
    responses=problem_responses(400, 401, 403, 404, 409, 422),
)
def deny(
    approval_id: str,
    principal: CurrentPrincipal,
    context: Context,
    body: Annotated[ApprovalDecision, Body()] = NO_REASON,
) -> Approval:
    """Deny a pending request (workspace admins; a requester who is one may withdraw their
    own this way): nothing is exported."""
    return _decide(principal, context, approval_id, Decision.DENY, body)
