"""Mount the web UI on the API's app: pages, static files and HTML error pages."""

from __future__ import annotations

import structlog
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from qexport.container import Container
from qexport.deliveries.signing import master_secret
from qexport.domain.failures import QExportError
from qexport.http.one_hop import off_the_loop
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

log = structlog.get_logger()


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


async def derive_session_key(app: FastAPI) -> None:
    """Derive the session key at start-up, off the event loop: on the embedded default its
    master secret is read from the database, which the error pages, rendered on the loop,
    never wait for (they show no session until the key is known; any page derives it)."""
    try:
        await off_the_loop(app.state.session_key)
    except QExportError as exc:
        log.warning("session_key_not_derived", error=type(exc).__name__)
