"""Mount the web UI on the API's app: pages, static files and HTML error pages."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from qexport.container import Container
from qexport.deliveries.signing import master_secret
from qexport.services.sign_in import VerificationGate
from qexport.web import (
    errors,
    pages_approvals,
    pages_audit,
    pages_auth,
    pages_exports,
    pages_new,
    pages_policy,
    pages_preview,
    pages_queries,
    pages_reports,
    pages_schedules,
    pages_subscriptions,
)
from qexport.web.session import SessionKey


def install(app: FastAPI, context: Container) -> None:
    app.state.sign_in_gate = VerificationGate(context.settings.signin_concurrency)
    app.state.session_key = SessionKey(
        lambda: master_secret(context.settings, context.schedules, context.clock)
    )
    errors.install(app)
    app.mount("/static", StaticFiles(packages=[("qexport.web", "static")]), name="static")
    app.include_router(pages_auth.router)
    app.include_router(pages_new.router)  # /exports/new before /exports/{export_id}
    app.include_router(pages_preview.router)  # /exports/new/preview too
    app.include_router(pages_exports.router)
    app.include_router(pages_queries.router)
    app.include_router(pages_reports.router)
    app.include_router(pages_schedules.router)
    app.include_router(pages_subscriptions.router)
    app.include_router(pages_policy.router)
    app.include_router(pages_audit.router)
    app.include_router(pages_approvals.router)
