"""The HTTP API's routers, mounted by `qexport.app.create_app`."""

from __future__ import annotations

from fastapi import FastAPI

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


def install(app: FastAPI) -> None:
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
