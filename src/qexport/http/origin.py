"""ASGI middleware: the request's client address and user agent, for the audit trail."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from qexport.services.audit import Origin, reset_origin, set_origin


class RequestOrigin:
    """Sets the audit origin (services/audit.py) for the handlers of one request.

    The address is the peer's as uvicorn reports it (behind a proxy it trusts,
    FORWARDED_ALLOW_IPS, the forwarded one): the same the sign-in throttle counts under.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        agent = dict(scope.get("headers", [])).get(b"user-agent")
        token = set_origin(
            Origin(
                address=client[0] if client else None,
                user_agent=agent.decode("latin-1") if agent is not None else None,
            )
        )
        try:
            await self.app(scope, receive, send)
        finally:
            reset_origin(token)
