"""Errors as RFC 9457 problem documents (`application/problem+json`) with a `code` member.

Every qexport error maps to one status and code here; anything unexpected becomes a 500
whose body says nothing more than "internal" (the details go to the log).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from qexport.domain.failures import (
    AccessLostError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    MetadataUnavailableError,
    NotFoundError,
    QExportError,
    StorageUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
)
from qexport.services.exports import ExpiredError, ExportFailedError, NotReadyError

log = structlog.get_logger()

PROBLEM = "application/problem+json"
RETRY_NOT_READY_SECONDS = 5

# Most specific first: the first class an error is an instance of decides.
_STATUS: tuple[tuple[type[QExportError], int, str], ...] = (
    (InvalidRequestError, 422, "invalid_request"),
    (UnauthorizedError, 401, "unauthorized"),
    (ForbiddenError, 403, "forbidden"),
    (AccessLostError, 403, "access_lost"),
    (NotFoundError, 404, "not_found"),
    (NotReadyError, 409, "not_ready"),
    (ExportFailedError, 409, "export_failed"),
    (ConflictError, 409, "conflict"),
    (ExpiredError, 410, "expired"),
    (TooManyRequestsError, 429, "too_many_requests"),
    (MetadataUnavailableError, 503, "unavailable"),
    (StorageUnavailableError, 503, "unavailable"),
)


def problem(
    status: int,
    code: str,
    detail: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    **members: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "code": code,
    }
    if detail:
        body["detail"] = detail
    body.update(members)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM)


def status_of(exc: QExportError) -> tuple[int, str] | None:
    """The HTTP status and problem code of a qexport error; None for an unexpected one."""
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return None


def _qexport_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, QExportError)
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            headers: dict[str, str] = {}
            members: dict[str, Any] = {}
            if status == 401:
                headers["WWW-Authenticate"] = "Bearer"
            if isinstance(exc, NotReadyError):
                headers["Retry-After"] = str(RETRY_NOT_READY_SECONDS)
            if isinstance(exc, TooManyRequestsError):
                headers["Retry-After"] = str(exc.retry_after)
            if isinstance(exc, InvalidRequestError) and exc.field:
                members["field"] = exc.field
            return problem(status, code, exc.detail, headers=headers or None, **members)
    log.error("api.unexpected_error", error=type(exc).__name__, detail=exc.detail)
    return problem(500, "internal", "an unexpected error occurred")


def _field_of(loc: Any) -> str:
    """`("body", "parameters", "day")` -> `parameters.day`; the location kind is dropped."""
    parts = list(loc or ())
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(str(p) for p in parts) or "body"


def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    field = _field_of(first.get("loc", ()))
    return problem(
        422,
        "invalid_request",
        f"{field}: {first.get('msg', 'invalid')}",
        field=field,
        errors=[
            {"field": _field_of(e.get("loc", ())), "message": str(e.get("msg", ""))}
            for e in errors[:20]
        ],
    )


def http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 401: "unauthorized"}
    headers = dict(exc.headers or {})
    return problem(
        exc.status_code,
        codes.get(exc.status_code, HTTPStatus(exc.status_code).phrase.lower().replace(" ", "_")),
        str(exc.detail) if exc.detail else None,
        headers=headers or None,
    )


def unexpected_error(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("api.unexpected_error", error=type(exc).__name__)
    return problem(500, "internal", "an unexpected error occurred")


def install(app: FastAPI) -> None:
    app.add_exception_handler(QExportError, _qexport_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
