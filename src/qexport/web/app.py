"""Mount the web UI on the API's app: pages, static files and HTML error pages."""

from __future__ import annotations

import structlog
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from qexport.container import Container
from qexport.domain.failures import QExportError
from qexport.http.one_hop import off_the_loop
from qexport.services.sign_in import VerificationGate
from qexport.services.signing import master_secret
from qexport.web import errors
from qexport.web.pages import (
    approvals,
    audit,
    auth,
    exports,
    new,
    policy,
    preview,
    queries,
    reports,
    schedules,
    subscriptions,
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
    app.include_router(auth.router)
    app.include_router(new.router)  # /exports/new before /exports/{export_id}
    app.include_router(preview.router)  # /exports/new/preview too
    app.include_router(exports.router)
    app.include_router(queries.router)
    app.include_router(reports.router)
    app.include_router(schedules.router)
    app.include_router(subscriptions.router)
    app.include_router(policy.router)
    app.include_router(audit.router)
    app.include_router(approvals.router)


async def derive_session_key(app: FastAPI) -> None:
    """Derive the session key at start-up, off the event loop: on the embedded default its
    master secret is read from the database, which the error pages, rendered on the loop,
    never wait for (they show no session until the key is known; any page derives it)."""
    try:
        await off_the_loop(app.state.session_key)
    except QExportError as exc:
        log.warning("session_key_not_derived", error=type(exc).__name__)
