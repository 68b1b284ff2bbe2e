"""Who is signed in: the session cookie checked against the account store on each request,
as the same Principal the API builds from a token."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Form, Request

from qexport.container import Container
from qexport.domain.accounts import SESSION_TOKEN_ID, Principal
from qexport.domain.failures import ForbiddenError, QExportError
from qexport.http.context import get_context
from qexport.web.session import COOKIE, Session, SessionKey, decode


class SignInRequiredError(QExportError):
    """No valid session: the person is sent to the sign-in page."""


def read_session(request: Request, *, derive_key: bool = True) -> Session | None:
    """The session the cookie carries, if its signature holds. Without `derive_key` (on the
    event loop), none until the session key has been derived (at start-up, from the master
    secret that the embedded default keeps in the database)."""
    context: Container = request.app.state.context
    key_of: SessionKey = request.app.state.session_key
    key = key_of() if derive_key else key_of.known()
    if key is None:
        return None
    return decode(request.cookies.get(COOKIE), key, context.clock.now())


def principal_of(context: Container, session: Session | None) -> Principal | None:
    """The member the session names, if they still are one and the session was not ended."""
    if session is None or session.user_id is None or session.workspace_id is None:
        return None
    member = context.accounts.member(session.workspace_id, session.user_id)  # one read
    if member is None or member.role is None:
        return None
    user = member.user
    if user.disabled or user.session_epoch != session.epoch:
        return None
    return Principal(user.id, user.email, session.workspace_id, member.role, SESSION_TOKEN_ID)


def signed_in_session(request: Request) -> Session:
    session = read_session(request)
    principal = principal_of(request.app.state.context, session)
    if session is None or principal is None:
        raise SignInRequiredError("sign in first")
    request.state.web_principal = principal
    return session


def current_principal(
    request: Request, _session: Annotated[Session, Depends(signed_in_session)]
) -> Principal:
    principal: Principal = request.state.web_principal
    return principal


def checked_session(
    session: Annotated[Session, Depends(signed_in_session)],
    csrf: Annotated[str | None, Form()] = None,
) -> Session:
    """For every POST: the form's hidden `csrf` field must match the session's token."""
    if not session.csrf_matches(csrf):
        raise ForbiddenError("the form has expired or did not come from this site; try again")
    return session


SignedIn = Annotated[Session, Depends(signed_in_session)]
CheckedForm = Annotated[Session, Depends(checked_session)]
WebPrincipal = Annotated[Principal, Depends(current_principal)]
Context = Annotated[Container, Depends(get_context)]
