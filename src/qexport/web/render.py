"""Templates (Jinja2, autoescaped) and the headers every page is sent with."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from qexport.web.session import COOKIE, MAX_AGE, Session, encode

_env = Environment(
    loader=PackageLoader("qexport.web", "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
    ),
}


def set_session_cookie(response: Any, request: Request, session: Session) -> None:
    """HttpOnly, SameSite=Lax, and Secure whenever the page was served over HTTPS."""
    response.set_cookie(
        COOKIE,
        encode(session, request.app.state.session_key()),
        max_age=int(MAX_AGE.total_seconds()),
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


def page(
    request: Request,
    template: str,
    *,
    status: int = 200,
    session: Session | None = None,
    new_session: bool = False,
    **context: Any,
) -> HTMLResponse:
    """A rendered page; `new_session` (re)sets the cookie to `session`."""
    principal = getattr(request.state, "web_principal", None)
    html = _env.get_template(template).render(
        principal=principal,
        csrf=session.csrf if session else "",
        **context,
    )
    response = HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
    if new_session and session is not None:
        set_session_cookie(response, request, session)
    return response
