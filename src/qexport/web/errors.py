"""Errors on pages are pages: the sign-in redirect, 403/404/409/410/500 in the site's style.

Page routes use `PageRoute`, which turns a qexport error into an HTML page; requests for
unknown paths get an HTML 404 when a browser asks for HTML, the API's problem JSON otherwise.

No page answers a bare 405. A GET (or HEAD) of a POST-only page URL, as a reload after a
form that answered with a page or a URL copied from the address bar sends, is redirected
(303) to the nearest page above it (`/exports/ID/links` to `/exports/ID`); a destructive
action that declared its question with `asks_first` shows its confirmation page instead,
whose button posts the form with its CSRF token. Every `PageRoute` gets this, with no code
of its own; nothing is ever done by the GET.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import quote

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import MetadataUnavailableError, QExportError
from qexport.http import errors as api_errors
from qexport.http.statuses import status_of
from qexport.web.auth import SignInRequiredError, read_session, signed_in_session
from qexport.web.confirm import Confirmation, confirm_page
from qexport.web.render import page
from qexport.web.session import Session

log = structlog.get_logger()

TITLES = {
    400: "The request could not be understood",
    403: "You may not do that",
    404: "Page not found",
    409: "Not possible right now",
    410: "No longer available",
    429: "Too many requests",
    500: "Something went wrong",
    503: "Temporarily unavailable",
}


def error_page(request: Request, status: int, detail: str) -> Response:
    """(Rendered on the event loop: the session is read with the key derived at start-up,
    never with a read of the database, which may be what failed.)"""
    session = read_session(request, derive_key=False)
    return page(
        request,
        "error.html",
        status=status,
        session=session,
        title=TITLES.get(status, HTTPStatus(status).phrase),
        status_code=status,
        detail=detail,
    )


def _sign_in_redirect(request: Request) -> Response:
    target = request.url.path
    if request.url.query:
        target += f"?{request.url.query}"
    return RedirectResponse(f"/sign-in?next={quote(target, safe='')}", status_code=303)


def _qexport_error_page(request: Request, exc: QExportError) -> Response:
    found = status_of(exc)
    if found is None:
        log.exception("web.unexpected_error", error=type(exc).__name__, detail=exc.detail)
        return error_page(request, 500, "An unexpected error occurred.")
    answer = error_page(request, found[0], exc.detail)
    if isinstance(exc, MetadataUnavailableError):
        answer.headers["Retry-After"] = str(api_errors.RETRY_UNAVAILABLE_SECONDS)
    return answer


# Every page route, in the order made: what a GET of a POST-only URL is matched against.
_PAGE_ROUTES: list[APIRoute] = []


class PageRoute(APIRoute):
    """A route whose errors are rendered as pages instead of problem documents."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _PAGE_ROUTES.append(self)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except SignInRequiredError:
                return _sign_in_redirect(request)
            except QExportError as exc:
                return _qexport_error_page(request, exc)
            except RequestValidationError:
                return error_page(request, 400, "The form was incomplete or malformed.")

        return handler


# ---------------------------------------------------------------- GETs of POST-only pages

# The question a destructive action asks, from the URL's path parameters: raise NotFoundError
# (or any qexport error) for something the person may not see, exactly as the POST would.
AskFirst = Callable[[Request, Container, Session, Principal, Mapping[str, str]], Confirmation]
_ASKS_FIRST: dict[str, AskFirst] = {}
Ask = TypeVar("Ask", bound=Callable[..., Confirmation])


def asks_first(path: str) -> Callable[[Ask], Ask]:
    """Declare the question of the destructive POST page route at `path` (its template, as
    given to the router): a GET of its URL shows it instead of redirecting. The function is
    an AskFirst (it may take more, with defaults, for its own POST)."""

    def register(ask: Ask) -> Ask:
        _ASKS_FIRST[path] = ask
        return ask

    return register


def _route_for(path: str, method: str) -> tuple[APIRoute, dict[str, Any]] | None:
    scope = {"type": "http", "path": path, "root_path": "", "method": method}
    for route in _PAGE_ROUTES:
        match, child = route.matches(dict(scope))
        if match is Match.FULL:
            return route, dict(child.get("path_params", {}))
    return None


def _page_above(path: str) -> str:
    """The nearest page (a GET page route) above `path`; the exports page if none is."""
    segments = path.rstrip("/").split("/")[1:]
    for end in range(len(segments) - 1, 0, -1):
        candidate = "/" + "/".join(segments[:end])
        if _route_for(candidate, "GET") is not None:
            return "/" + "/".join(quote(s, safe="") for s in segments[:end])
    return "/"


async def _get_of_a_form(request: Request) -> Response | None:
    """The answer to a GET of a POST-only page URL (None: the URL is no page's form)."""
    found = _route_for(request.url.path, "POST")
    if found is None:
        return None
    route, params = found
    ask = _ASKS_FIRST.get(route.path)
    if ask is None:
        return RedirectResponse(_page_above(request.url.path), status_code=303)

    def confirmation() -> Response:  # on the thread pool: it reads the database
        try:
            session = signed_in_session(request)
        except SignInRequiredError:
            return _sign_in_redirect(request)
        except QExportError as exc:
            return _qexport_error_page(request, exc)
        principal: Principal = request.state.web_principal
        context: Container = request.app.state.context
        try:
            asked = ask(request, context, session, principal, params)
        except QExportError as exc:
            return _qexport_error_page(request, exc)
        return confirm_page(request, session, asked)

    return await run_in_threadpool(confirmation)


def _wants_html(request: Request) -> bool:
    path = request.url.path
    if path.startswith(("/api/", "/p/")):
        return False
    return "text/html" in request.headers.get("accept", "")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED and request.method in ("GET", "HEAD"):
        answer = await _get_of_a_form(request)
        if answer is not None:
            return answer
    if _wants_html(request):
        return error_page(request, exc.status_code, str(exc.detail or ""))
    return api_errors.http_error(request, exc)


async def _unexpected(request: Request, exc: Exception) -> Response:
    if _wants_html(request):
        log.exception("web.unexpected_error", error=type(exc).__name__)
        return error_page(request, 500, "An unexpected error occurred.")
    return api_errors.unexpected_error(request, exc)


def install(app: FastAPI) -> None:
    """HTML error pages for browsers (after `api.errors.install`, which they defer to)."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
