"""The request body limit holds however the body is sent: a streamed (chunked) body without
Content-Length is refused with the same 413 problem document as a declared one, and a small
streamed body reaches the handler intact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
from starlette.types import Message, Receive, Scope, Send

from qexport.http.limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimit
from tests.api.conftest import EDITOR, Api

ORDERS = "q-orders-acme"  # the id conftest's add_query() gives the "orders" query


def _chunks(body: bytes, size: int = 4096) -> Iterator[bytes]:
    """The body as a generator, so the client sends it chunked, without Content-Length."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def _export_body(since: str) -> bytes:
    return json.dumps(
        {"query_id": ORDERS, "format": "csv", "parameters": {"since": since}}
    ).encode()


def _post_streamed(api: Api, body: bytes) -> Any:
    headers = {**api.headers(EDITOR), "Content-Type": "application/json"}
    return api.client.post("/api/v1/exports", headers=headers, content=_chunks(body))


def test_a_streamed_body_over_the_limit_gets_413(editor_api: Api) -> None:
    """A chunked body over the limit is 413 too_large as a problem document, like a declared
    one, and no export is recorded."""
    body = _export_body("9" * (DEFAULT_MAX_BODY_BYTES + 10))
    response = _post_streamed(editor_api, body)
    assert response.status_code == 413, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert (problem["status"], problem["code"]) == (413, "too_large")
    assert editor_api.deps.exports.list_exports(workspace_id="acme") == []


def test_a_declared_body_over_the_limit_gets_the_same_answer(editor_api: Api) -> None:
    """With Content-Length the refusal is identical to the streamed one."""
    body = _export_body("9" * (DEFAULT_MAX_BODY_BYTES + 10))
    headers = {**editor_api.headers(EDITOR), "Content-Type": "application/json"}
    declared = editor_api.client.post("/api/v1/exports", headers=headers, content=body)
    streamed = _post_streamed(editor_api, body)
    assert declared.status_code == streamed.status_code == 413
    assert declared.json() == streamed.json()


def test_a_small_streamed_body_reaches_the_handler(editor_api: Api) -> None:
    """A valid chunked request under the limit is accepted (202); an invalid one gets the
    handler's own 422 naming the field, so the body arrived whole."""
    accepted = _post_streamed(editor_api, _export_body("2024-01-20"))
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["parameters"] == {"since": "2024-01-20"}
    refused = _post_streamed(editor_api, _export_body("not a date"))
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert "parameters.since" in refused.text


# ---------------------------------------------------------------- at the ASGI level


class _Client:
    """Delivers a body in the given chunks, then reports a disconnect."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.messages: list[Message] = [
            {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
            for i, chunk in enumerate(chunks)
        ]
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        return self.messages.pop(0) if self.messages else {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)


class _EchoApp:
    """Reads the whole body, answers it back, and then waits for the disconnect."""

    def __init__(self) -> None:
        self.called = False
        self.after_body: Message | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.called = True
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        self.after_body = await receive()


def _run(chunks: list[bytes], max_bytes: int) -> tuple[_EchoApp, _Client]:
    app, client = _EchoApp(), _Client(chunks)
    scope: Scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
    anyio.run(BodySizeLimit(app, max_bytes=max_bytes), scope, client.receive, client.send)
    return app, client


def test_chunks_under_the_limit_are_replayed_in_order() -> None:
    """Several chunks adding up to exactly the limit reach the app unchanged, and the
    client's later messages (the disconnect) still reach it after the body."""
    app, client = _run([b"abc", b"", b"defg", b"hij"], max_bytes=10)
    assert app.called
    assert [m["status"] for m in client.sent if m["type"] == "http.response.start"] == [200]
    assert client.sent[-1]["body"] == b"abcdefghij"
    assert app.after_body == {"type": "http.disconnect"}


def test_chunks_over_the_limit_never_reach_the_app() -> None:
    """One byte over the limit, spread over chunks: 413 too_large, and the app is not run."""
    app, client = _run([b"abc", b"defg", b"hijk"], max_bytes=10)
    assert not app.called
    assert client.sent[0]["status"] == 413
    assert json.loads(client.sent[-1]["body"])["code"] == "too_large"


def test_a_length_that_is_no_number_is_held_to_the_limit_as_streamed() -> None:
    """A Content-Length that is no number (an HTTP server refuses it; an in-process client
    passes it on) does not make the request a 413 "larger than" it is: the body is read as a
    streamed one, and reaches the app whole when under the limit, refused when over it."""
    header = [(b"content-length", b"bv")]
    for chunks, reached in (([b"abc", b"de"], True), ([b"abcdef", b"ghijk"], False)):
        app, client = _EchoApp(), _Client(chunks)
        scope: Scope = {"type": "http", "method": "POST", "path": "/", "headers": header}
        anyio.run(BodySizeLimit(app, max_bytes=10), scope, client.receive, client.send)
        assert app.called is reached
        assert client.sent[0]["status"] == (200 if reached else 413)
