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
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from qexport.domain.failures import (
    InvalidRequestError,
    MetadataUnavailableError,
    QExportError,
    StatementRefusedError,
    TooManyRequestsError,
)
from qexport.http.statuses import status_of
from qexport.services.exports import NotReadyError

log = structlog.get_logger()

PROBLEM = "application/problem+json"
PROBLEM_MEDIA_TYPE = PROBLEM
RETRY_NOT_READY_SECONDS = 5
# When to try again after the metadata database was unavailable or too slow: about one
# server deadline (QEXPORT_DATABASE_TIMEOUT_SECONDS' default), long enough for a lock or a
# failover to pass, short enough for a client's retry loop.
RETRY_UNAVAILABLE_SECONDS = 5


class Problem(BaseModel):
    """An RFC 9457 problem document; `code` is the stable, machine-readable reason."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    code: str
    detail: str | None = None
    field: str | None = Field(None, description="The request member at fault (422).")
    errors: list[dict[str, Any]] | None = Field(
        None,
        description="Every invalid member (422), in the request's order: {field, message}"
        " (and `position` for a refused SQL).",
    )
    position: dict[str, int] | None = Field(
        None,
        description="Where in `sql` the source found the mistake, {line, column} from 1"
        " (422 on a saved query's SQL, when the source says).",
    )


# Inlined in each response (not a $ref): FastAPI files a response `model` under
# application/json, and these documents are application/problem+json.
PROBLEM_SCHEMA: dict[str, Any] = Problem.model_json_schema()


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


async def _qexport_error(_request: Request, exc: Exception) -> JSONResponse:
    """(async: it does no I/O, and a plain function would take a trip to the thread pool)"""
    assert isinstance(exc, QExportError)
    return qexport_problem(exc)


def qexport_problem(exc: QExportError) -> JSONResponse:
    found = status_of(exc)
    if found is None:
        log.error("api.unexpected_error", error=type(exc).__name__, detail=exc.detail)
        return problem(500, "internal", "an unexpected error occurred")
    status, code = found
    headers: dict[str, str] = {}
    members: dict[str, Any] = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, NotReadyError):
        headers["Retry-After"] = str(RETRY_NOT_READY_SECONDS)
    if isinstance(exc, MetadataUnavailableError):
        headers["Retry-After"] = str(RETRY_UNAVAILABLE_SECONDS)
    if isinstance(exc, TooManyRequestsError):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, InvalidRequestError):
        members.update(_invalid_members(exc))
    return problem(status, code, exc.detail, headers=headers or None, **members)


def _position(exc: InvalidRequestError) -> dict[str, int] | None:
    if isinstance(exc, StatementRefusedError) and exc.position is not None:
        return {"line": exc.position.line, "column": exc.position.column}
    return None


def _invalid_members(exc: InvalidRequestError) -> dict[str, Any]:
    """`field` and `position` of the first problem, and `errors`: every problem, in order."""
    members: dict[str, Any] = {}
    if exc.field:
        members["field"] = exc.field
    if (position := _position(exc.problems[0])) is not None:
        members["position"] = position
    errors: list[dict[str, Any]] = []
    for found in exc.problems:
        entry: dict[str, Any] = {"field": found.field or "body", "message": found.detail}
        if (where := _position(found)) is not None:
            entry["position"] = where
        errors.append(entry)
    members["errors"] = errors
    return members


def _member(loc: Any, body: Any) -> tuple[str, bool]:
    """The dotted request member an error's `loc` names, and whether the request gave it.

    `("body", "parameters", "day")` -> `parameters.day`; the location kind is dropped. In a
    body, the parts pydantic adds for the alternatives of a union (`EmailRecipient`,
    `list[union[...]]`, `str`) are dropped too: kept are the parts the body has, and a last
    one (a member left out).
    """
    parts = list(loc or ())
    kind = parts.pop(0) if parts and parts[0] in ("body", "query", "path", "header") else None
    if kind != "body":
        return ".".join(str(p) for p in parts) or "body", True
    kept: list[str] = []
    node, given = body, True
    for index, part in enumerate(parts):
        in_body = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if in_body:
            node = node[part]
        elif isinstance(node, dict) and index == len(parts) - 1:
            given = False  # a member left out
        else:
            continue  # the name of a union's alternative
        kept.append(str(part))
    return ".".join(kept) or "body", given


async def validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """(async: no I/O)"""
    assert isinstance(exc, RequestValidationError)
    errors = [(e, *_member(e.get("loc", ()), exc.body)) for e in exc.errors()]
    # A member the request gave is at fault before one it left out: of the alternatives of a
    # union, the one the caller meant is the one whose members they gave.
    ranked = sorted(errors, key=lambda found: not found[2])
    first, field, _ = ranked[0] if ranked else ({"msg": "invalid request"}, "body", True)
    return problem(
        422,
        "invalid_request",
        f"{field}: {first.get('msg', 'invalid')}",
        field=field,
        errors=[
            {"field": member, "message": str(e.get("msg", ""))} for e, member, _ in errors[:20]
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
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
