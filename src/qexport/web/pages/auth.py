"""Sign-in with email and password, and sign-out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.domain.audit import INSTALLATION, Action, Actor, ActorKind
from qexport.domain.audit import Outcome as AuditOutcome
from qexport.domain.failures import ForbiddenError
from qexport.http.one_hop import off_the_loop
from qexport.services import sign_in as service
from qexport.services.accounts import MAX_PASSWORD_CHARS
from qexport.services.audit import event
from qexport.web import known_browser
from qexport.web.auth import CheckedForm, Context, principal_of, read_session
from qexport.web.errors import PageRoute
from qexport.web.render import page, set_session_cookie
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

FAILED = "The email or password is not right."
THROTTLED = "Too many failed sign-ins. Try again in {seconds} seconds."
BUSY = "The server is busy signing people in. Try again in a few seconds."


def safe_next(target: str | None) -> str:
    """Only a path on this site: never `//host` or a full URL elsewhere."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _form(request: Request, session: Session, *, status: int = 200, **context: object) -> Response:
    return page(
        request, "sign_in.html", status=status, session=session, new_session=True, **context
    )


def client_address(request: Request) -> str:
    """The address sign-in failures are counted under, the one the audit trail records: the
    peer's, or behind a proxy named in QEXPORT_TRUSTED_PROXIES the client its X-Forwarded-For
    names (http/origin.py)."""
    return request.client.host if request.client else "unknown"


@router.get("/sign-in")
def sign_in_form(request: Request, context: Context, next: str = "/") -> Response:
    session = read_session(request)
    if principal_of(context, session) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return _form(request, session or Session.fresh(context.clock.now()), next=safe_next(next))


@router.post("/sign-in")
async def sign_in(
    request: Request,
    context: Context,
    email: Annotated[str, Form(max_length=320)] = "",
    password: Annotated[str, Form(max_length=MAX_PASSWORD_CHARS)] = "",
    csrf: Annotated[str | None, Form()] = None,
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    """A session for the user's first workspace when the password matches; 429 after too
    many failures, 503 when too many sign-ins are being checked at once. Checked on the
    threads kept for sign-ins: a flood of them holds none of the requests' threads."""
    return await off_the_loop(
        lambda: _signed_in(request, context, email, password, csrf, next), apart="sign-in"
    )


def _signed_in(
    request: Request,
    context: Context,
    email: str,
    password: str,
    csrf: str | None,
    next: str,
) -> Response:
    session = read_session(request)
    if session is None or not session.csrf_matches(csrf):
        raise ForbiddenError("the form has expired or did not come from this site; try again")
    attempt = service.sign_in(
        context.accounts,
        context.clock,
        request.app.state.sign_in_gate,
        email=email,
        password=password,
        address=client_address(request),
        known_user=known_browser.known_user(request, context.clock.now()),
    )
    _record(context, attempt)
    if attempt.outcome is service.Outcome.SIGNED_IN:
        assert attempt.user is not None
        signed = Session.fresh(
            context.clock.now(), attempt.user.id, attempt.workspace_id, attempt.user.session_epoch
        )
        redirect = RedirectResponse(safe_next(next), status_code=303)
        set_session_cookie(redirect, request, signed)
        known_browser.remember(redirect, request, attempt.user.id, context.clock.now())
        return redirect
    status, error = {
        service.Outcome.REFUSED: (400, FAILED),
        service.Outcome.THROTTLED: (429, THROTTLED.format(seconds=attempt.retry_after)),
        service.Outcome.BUSY: (503, BUSY),
    }[attempt.outcome]
    response = _form(
        request, session, status=status, error=error, email=email, next=safe_next(next)
    )
    if attempt.retry_after:
        response.headers["Retry-After"] = str(attempt.retry_after)
    return response


def _record(context: Context, attempt: service.Attempt) -> None:
    """One sign-in event: in the workspace signed into (or the user's first), by the user;
    with an unknown email, by nobody, on the installation's chain (the email typed is not
    kept: people type passwords into it). Never the password."""
    user = attempt.user
    workspace = attempt.workspace_id
    if workspace is None and user is not None:
        workspace = next((m.workspace_id for m in context.accounts.memberships_of(user.id)), None)
    actor = Actor(ActorKind.USER, user.id) if user else Actor(ActorKind.ANONYMOUS)
    signed_in = attempt.outcome is service.Outcome.SIGNED_IN
    context.audit.record(
        event(
            context.clock,
            actor,
            Action.SIGN_IN,
            workspace_id=workspace or INSTALLATION,
            target=("user", user.id) if user else None,
            outcome=AuditOutcome.OK if signed_in else AuditOutcome.REFUSED,
            details={"reason": attempt.reason.value} if attempt.reason else {},
        )
    )


@router.post("/sign-out")
def sign_out(request: Request, context: Context, session: CheckedForm) -> Response:
    """End every session of the signed-in user, on every device."""
    assert session.user_id is not None
    context.accounts.end_sessions(session.user_id)
    response = RedirectResponse("/sign-in", status_code=303)
    set_session_cookie(response, request, Session.fresh(context.clock.now()))
    return response
