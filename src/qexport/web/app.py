"""Mount the web UI on the API's app: pages, static files and HTML error pages."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from qexport.api.context import ApiContext
from qexport.web import errors, pages_auth, pages_exports, pages_new
from qexport.web.session import session_key


def install(app: FastAPI, context: ApiContext) -> None:
    app.state.session_key = session_key(context.settings)
    errors.install(app)
    app.mount("/static", StaticFiles(packages=[("qexport.web", "static")]), name="static")
    app.include_router(pages_auth.router)
    app.include_router(pages_new.router)  # /exports/new before /exports/{export_id}
    app.include_router(pages_exports.router)
