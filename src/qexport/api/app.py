"""The HTTP API's routers, mounted by `qexport.app.create_app`."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from qexport.api import (
    approvals,
    audit,
    deliveries,
    exports,
    health,
    links,
    public,
    queries,
    reports,
    schedules,
    sources,
    workspaces,
)
from qexport.api.auth import authenticated_first
from qexport.domain.failures import QExportError
from qexport.http import errors


async def _validation_error(request: Request, exc: Exception) -> Response:
    """An invalid API request: its token is checked first (every /api/v1 route takes one)."""
    if request.url.path.startswith("/api/v1/"):
        try:
            await authenticated_first(request)
        except QExportError as refused:
            return errors.qexport_problem(refused)
    return await errors.validation_error(request, exc)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(health.router)
    app.include_router(queries.router, prefix="/api/v1")
    app.include_router(reports.router, prefix="/api/v1")
    app.include_router(exports.router, prefix="/api/v1")
    app.include_router(links.router, prefix="/api/v1")
    app.include_router(schedules.router, prefix="/api/v1")
    app.include_router(deliveries.router, prefix="/api/v1")
    app.include_router(workspaces.router, prefix="/api/v1")
    app.include_router(sources.router, prefix="/api/v1")
    app.include_router(audit.router, prefix="/api/v1")
    app.include_router(approvals.router, prefix="/api/v1")
    app.include_router(public.router)
