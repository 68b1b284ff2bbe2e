"""The approvals page (/approvals): export requests of sensitive queries.

A workspace admin sees the requests waiting for a decision, with Approve and Deny (their
own: Withdraw, as another admin must approve it), then those decided or expired; anyone else
sees their own requests and what became of them. Deciding calls services/approvals.py's
`decide` exactly as the API does; a refusal (four eyes, no longer pending, another
workspace's id) is shown on this page with its status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.approvals import (
    MAX_REASON_CHARS,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
)
from qexport.domain.commands import Decide
from qexport.domain.failures import (
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    QExportError,
)
from qexport.domain.queries import can_read
from qexport.domain.reports import SUBJECT_REPORT, can_read_report
from qexport.http.statuses import status_of
from qexport.services.approvals import listed
from qexport.services.deciding import decide_request
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import email_of
from qexport.web.present import when
from qexport.web.render import page
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

PATH = "/approvals"
NOTICES = {
    "asked": "Your request awaits an admin's approval: the workspace's policy marks this query"
    " sensitive. You will see it here (and by email, when the server sends mail) once it is"
    " decided.",
    "approved": "Approved: the export is queued.",
    "denied": "Denied.",
}
# What a refused decision says on this page (anything else is an error page).
_REFUSALS = (ConflictError, ForbiddenError, InvalidRequestError, NotFoundError)
LABELS = {
    ApprovalStatus.PENDING: "Pending",
    ApprovalStatus.APPROVED: "Approved",
    ApprovalStatus.DENIED: "Denied",
    ApprovalStatus.EXPIRED: "Expired",
}


def awaiting_path(request: ApprovalRequest) -> str:
    """Where a requester goes once their request awaits an admin's approval."""
    return f"{PATH}?notice=asked#approval-{quote(request.id)}"


@dataclass(frozen=True)
class ApprovalRow:
    """One request as the page shows it."""

    id: str
    status: str
    label: str
    subject: str
    subject_kind: str  # "query" or "report", as the page says it
    subject_href: str  # its page, when the viewer may read it; "" otherwise
    format: str
    parameters: dict[str, object]
    recipients: list[str]  # where the export goes once made, as the request named it
    requester: str
    mine: bool  # the viewer asked for it
    asked: str
    expires: str
    decided_by: str = ""
    decided: str = ""
    reason: str = ""
    export_href: str = ""
    typed_reason: str = ""  # a refused decision's reason, kept as typed
    decision_error: str = ""  # a refused decision's words, on its row too
    reason_refused: bool = False  # the refusal is of the reason's field

    @property
    def pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING.value


@dataclass
class _Rows:
    """Turns requests into rows, reading each user's email and subject once."""

    context: Container
    principal: Principal
    emails: dict[str, str] = field(default_factory=dict)
    links: dict[tuple[str, str], str] = field(default_factory=dict)

    def email(self, user_id: str | None) -> str:
        if user_id is None:
            return ""
        if user_id not in self.emails:
            self.emails[user_id] = email_of(self.context.accounts, user_id)
        return self.emails[user_id]

    def subject_href(self, request: ApprovalRequest) -> str:
        key = (request.subject_type, request.subject_id)
        if key not in self.links:
            self.links[key] = self._href(request.subject_type, request.subject_id)
        return self.links[key]

    def _href(self, subject_type: str, subject_id: str) -> str:
        requester = self.principal.requester
        catalog = self.context.catalog
        if subject_type == SUBJECT_REPORT:
            readable = can_read_report(requester, catalog.get_report(subject_id))
            return f"/reports/{quote(subject_id, safe='')}" if readable else ""
        readable = can_read(requester, catalog.get_query(subject_id))
        return f"/queries/{quote(subject_id, safe='')}" if readable else ""

    def row(self, request: ApprovalRequest, kept: _Kept | None) -> ApprovalRow:
        status = request.effective_status(self.context.clock.now())
        export_href = f"/exports/{quote(request.export_id, safe='')}" if request.export_id else ""
        return ApprovalRow(
            id=request.id,
            status=status.value,
            label=LABELS[status],
            subject=request.subject_name,
            subject_kind="report" if request.subject_type == SUBJECT_REPORT else "query",
            subject_href=self.subject_href(request),
            format=request.format,
            parameters=dict(request.parameters),
            recipients=[f"{k}: {v}" for r in request.notify for k, v in r.items()],
            requester=self.email(request.requested_by),
            mine=request.requested_by == self.principal.user_id,
            asked=when(request.created_at),
            expires=when(request.expires_at),
            decided_by=self.email(request.decided_by),
            decided=when(request.decided_at),
            reason=request.reason or "",
            export_href=export_href,
            typed_reason=kept.reason if kept is not None and kept.id == request.id else "",
            decision_error=kept.error if kept is not None and kept.id == request.id else "",
            reason_refused=kept is not None and kept.id == request.id and kept.of_reason,
        )


@dataclass(frozen=True)
class _Kept:
    """What a refused decision leaves on its row: the reason as typed and the refusal."""

    id: str
    reason: str
    error: str
    of_reason: bool = False


def _render(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    *,
    notice: str | None = None,
    error: QExportError | None = None,
    kept: _Kept | None = None,
) -> Response:
    found = listed(context.approvals, principal.user_id, principal.workspace_id, principal.role)
    rows = _Rows(context, principal)
    shown = [rows.row(r, kept) for r in found]
    status = 200
    if isinstance(error, InvalidRequestError):
        status = 400  # a refused field, as every form page answers it
    elif error is not None:
        mapped = status_of(error)
        status = mapped[0] if mapped else 500
    return page(
        request,
        "approvals.html",
        status=status,
        session=session,
        admin=principal.sees_workspace,
        waiting=[r for r in shown if r.pending],
        settled=[r for r in shown if not r.pending],
        mine=shown,
        notice=NOTICES.get(notice or ""),
        error=error.detail if error is not None else None,
        max_reason=MAX_REASON_CHARS,
    )


@router.get(PATH)
def approvals_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    notice: str | None = None,
) -> Response:
    """An admin: the workspace's requests, those waiting first; anyone else: their own."""
    return _render(request, context, session, principal, notice=notice)


def _decide(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    approval_id: str,
    decision: Decision,
    reason: str,
) -> Response:
    try:
        decide_request(context, principal, Decide(approval_id, decision, reason))
    except _REFUSALS as exc:
        of_reason = isinstance(exc, InvalidRequestError)
        kept = _Kept(approval_id, reason[: MAX_REASON_CHARS * 2], exc.detail, of_reason)
        return _render(request, context, session, principal, error=exc, kept=kept)
    notice = "approved" if decision is Decision.APPROVE else "denied"
    return RedirectResponse(
        f"{PATH}?notice={notice}#approval-{quote(approval_id, safe='')}", status_code=303
    )


Reason = Annotated[str, Form()]


@router.post(PATH + "/{approval_id}/approve")
def approve(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    approval_id: str,
    reason: Reason = "",
) -> Response:
    """Approve a pending request (an admin other than its requester): its export is queued."""
    return _decide(request, context, session, principal, approval_id, Decision.APPROVE, reason)


@router.post(PATH + "/{approval_id}/deny")
def deny(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    approval_id: str,
    reason: Reason = "",
) -> Response:
    """Deny a pending request (an admin; its requester, if one, withdraws it): nothing is made."""
    return _decide(request, context, session, principal, approval_id, Decision.DENY, reason)
