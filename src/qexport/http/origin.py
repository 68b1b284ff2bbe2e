"""ASGI middleware: the request's client address and user agent, for the audit trail and the
sign-in throttle."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from qexport.net.proxies import TrustedProxies
from qexport.services.audit import Origin, reset_origin, set_origin


def _values(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope.get("headers", []) if key == name]


class RequestOrigin:
    """Sets the request's client address, and the audit origin (services/audit.py) for its
    handlers.

    The address is the connection's peer, or, when the peer is one of `trusted`
    (QEXPORT_TRUSTED_PROXIES), the client its X-Forwarded-For names (net/proxies.py). It is
    written back into the scope, so that everything reading `request.client` (the sign-in
    throttle) sees the same address the audit trail records; uvicorn's own reading of the
    header is off (api/server.py).
    """

    def __init__(self, app: ASGIApp, trusted: TrustedProxies | None = None) -> None:
        self.app = app
        self.trusted = trusted or TrustedProxies()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if client and self.trusted.networks:
            scope = self._forwarded(scope, client[0])
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

    def _forwarded(self, scope: Scope, peer: str) -> Scope:
        """The scope as a trusted proxy's headers describe the client (unchanged otherwise)."""
        address = self.trusted.client(peer, _values(scope, b"x-forwarded-for"))
        scheme = self.trusted.scheme(peer, _values(scope, b"x-forwarded-proto"))
        if address == peer and scheme is None:
            return scope
        scope = dict(scope)
        if address != peer:
            scope["client"] = (address, 0)
        if scheme is not None:
            scope["scheme"] = scheme
        return scope
