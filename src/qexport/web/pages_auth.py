"""Sign-in with email and password, and sign-out."""

from __future__ import annotations

from functools import cache
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.domain.accounts import normalize_email
from qexport.domain.failures import ForbiddenError
from qexport.services.accounts import MAX_PASSWORD_CHARS, hash_password, password_matches
from qexport.web.auth import CheckedForm, Context, principal_of, read_session
from qexport.web.errors import PageRoute
from qexport.web.render import page, set_session_cookie
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

FAILED = "The email or password is not right."


@cache
def _dummy_hash() -> str:
    """Checked when no user has the email, so a wrong email takes as long as a wrong password."""
    return hash_password("not a password anyone has")


def safe_next(target: str | None) -> str:
    """Only a path on this site: never `//host` or a full URL elsewhere."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _form(request: Request, session: Session, *, status: int = 200, **context: object) -> Response:
    return page(
        request, "sign_in.html", status=status, session=session, new_session=True, **context
    )


@router.get("/sign-in")
def sign_in_form(request: Request, context: Context, next: str = "/") -> Response:
    session = read_session(request)
    if principal_of(context, session) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return _form(request, session or Session.fresh(context.clock.now()), next=safe_next(next))


@router.post("/sign-in")
def sign_in(
    request: Request,
    context: Context,
    email: Annotated[str, Form(max_length=320)] = "",
    password: Annotated[str, Form(max_length=MAX_PASSWORD_CHARS)] = "",
    csrf: Annotated[str | None, Form()] = None,
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    """A session for the user's first workspace when the password matches."""
    session = read_session(request)
    if session is None or not session.csrf_matches(csrf):
        raise ForbiddenError("the form has expired or did not come from this site; try again")
    try:
        user = context.accounts.find_user(normalize_email(email))
    except ValueError:
        user = None
    matches = password_matches(user.password_hash if user else _dummy_hash(), password)
    workspaces = (
        sorted(m.workspace_id for m in context.accounts.memberships_of(user.id))
        if (user and matches)
        else []
    )
    if user is None or not matches or not workspaces:
        return _form(request, session, status=400, error=FAILED, email=email, next=safe_next(next))
    signed = Session.fresh(context.clock.now(), user.id, workspaces[0])
    response = RedirectResponse(safe_next(next), status_code=303)
    set_session_cookie(response, request, signed)
    return response


@router.post("/sign-out")
def sign_out(request: Request, context: Context, _session: CheckedForm) -> Response:
    response = RedirectResponse("/sign-in", status_code=303)
    set_session_cookie(response, request, Session.fresh(context.clock.now()))
    return response
