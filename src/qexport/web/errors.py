"""Errors on pages are pages: the sign-in redirect, 403/404/409/410/500 in the site's style.

Page routes use `PageRoute`, which turns a qexport error into an HTML page; requests for
unknown paths get an HTML 404 when a browser asks for HTML, the API's problem JSON otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from qexport.domain.failures import QExportError
from qexport.http import errors as api_errors
from qexport.web.auth import SignInRequiredError, read_session
from qexport.web.render import page

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
    session = read_session(request)
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


class PageRoute(APIRoute):
    """A route whose errors are rendered as pages instead of problem documents."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except SignInRequiredError:
                return _sign_in_redirect(request)
            except QExportError as exc:
                found = api_errors.status_of(exc)
                if found is None:
                    log.exception(
                        "web.unexpected_error", error=type(exc).__name__, detail=exc.detail
                    )
                    return error_page(request, 500, "An unexpected error occurred.")
                return error_page(request, found[0], exc.detail)
            except RequestValidationError:
                return error_page(request, 400, "The form was incomplete or malformed.")

        return handler


def _wants_html(request: Request) -> bool:
    path = request.url.path
    if path.startswith(("/api/", "/p/")):
        return False
    return "text/html" in request.headers.get("accept", "")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
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
