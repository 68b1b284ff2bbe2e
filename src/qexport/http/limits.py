"""A maximum request body size, enforced before a handler reads the body."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY_BYTES = 64 * 1024


class BodySizeLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit():
            # The server holds the body to its declared length, so checking that is enough.
            if int(declared) > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        # A streamed body (or one whose declared length is no number, which an HTTP server
        # refuses before the app but an in-process client passes on) is read here, before
        # the app: an error raised while the app reads it would be turned into a 400 by the
        # framework's body parser.
        buffered = await self._read_at_most(receive)
        if buffered is None:
            await self._refuse(send)
            return

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)

    async def _read_at_most(self, receive: Receive) -> list[Message] | None:
        """The request's messages up to the end of its body; None once it passes the limit."""
        messages: list[Message] = []
        received = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages  # a disconnect: the app sees it as it would have
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                return None
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "type": "about:blank",
                "title": "Content Too Large",
                "status": 413,
                "code": "too_large",
                "detail": f"the request body is larger than {self.max_bytes} bytes",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
