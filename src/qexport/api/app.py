"""The application factory: routers, error handlers and limits over one ApiContext."""

from __future__ import annotations

from fastapi import FastAPI

from qexport import __version__
from qexport.api import (
    errors,
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
from qexport.api.context import ApiContext
from qexport.api.limits import BodySizeLimit
from qexport.web.app import install as install_web


def create_app(context: ApiContext) -> FastAPI:
    app = FastAPI(
        title="qexport",
        version=__version__,
        description="Saved SQL queries turned into files people can download.",
    )
    app.state.context = context
    errors.install(app)
    app.add_middleware(BodySizeLimit)
    app.include_router(health.router)
    app.include_router(queries.router, prefix="/api/v1")
    app.include_router(reports.router, prefix="/api/v1")
    app.include_router(exports.router, prefix="/api/v1")
    app.include_router(links.router, prefix="/api/v1")
    app.include_router(schedules.router, prefix="/api/v1")
    app.include_router(workspaces.router, prefix="/api/v1")
    app.include_router(sources.router, prefix="/api/v1")
    app.include_router(public.router)
    install_web(app, context)
    return app
