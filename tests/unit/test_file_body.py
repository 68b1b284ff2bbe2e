"""A file response's body writes the download's event once its first chunk has gone out: on
the trip that reads the next chunk, or, for a body that goes out whole in its first chunk,
once the response is complete; at once, on a thread, when the transfer is cut short; never
on the event loop; and it always closes the file it reads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from starlette.requests import ClientDisconnect

from qexport.http.download import FileBody, FileStream


class _File:
    """Chunks to read, a log of what happened, whether the file was closed, and the threads
    the event was recorded on."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.log, self.closed = chunks, list[str](), False
        self.recorded_on: list[threading.Thread] = []

    def record(self) -> None:
        self.log.append("recorded")
        self.recorded_on.append(threading.current_thread())

    def read(self) -> Iterator[bytes]:
        try:
            for chunk in self.chunks:
                self.log.append(f"read {chunk.decode()}")
                yield chunk
        finally:
            self.closed = True


def _body(file: _File) -> FileBody:
    body = FileBody(file.read(), sum(len(chunk) for chunk in file.chunks))
    body.after_first = file.record
    return body


def _respond(file: _File, body: FileBody, *, fail_on: str | None = None) -> None:
    """Send `body` as a FileStream through an ASGI `send` that logs what goes out (and
    raises as a client gone away would at the message `fail_on`)."""

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            name = f"sent {message['body'].decode()}" if message["more_body"] else "complete"
            if name == fail_on:
                raise OSError("the client went away")
            file.log.append(name)

    scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    anyio.run(FileStream(body), scope, receive, send)
    assert threading.main_thread() not in file.recorded_on  # the loop's thread


def test_the_event_is_written_after_the_first_chunk_went_out() -> None:
    file = _File([b"a", b"b", b"c"])
    _respond(file, _body(file))
    assert file.log == [
        "read a",  # when the response was made, on the request's own trip
        "sent a",
        "recorded",
        "read b",
        "sent b",
        "read c",
        "sent c",
        "complete",
    ]
    assert file.closed


def test_a_body_sent_whole_in_its_first_chunk_is_recorded_once_the_response_is_complete() -> None:
    """A 64 KiB range: nothing more is read after its one chunk, and the event waits until
    the response is complete, so that the connection's next request need not."""
    file = _File([b"abc"])
    _respond(file, _body(file))
    assert file.log == ["read abc", "sent abc", "complete", "recorded"]
    assert file.closed


def test_an_empty_file_is_recorded_at_the_end() -> None:
    file = _File([])
    _respond(file, _body(file))
    assert file.log == ["complete", "recorded"]
    assert file.closed


def test_a_transfer_cut_short_is_recorded_and_its_file_closed() -> None:
    """The client went away while the first chunk was on its way (the sender stops asking
    for more): the event is still written, at once on a thread of its own (not on the event
    loop, which must not wait), and the file is closed unread."""
    file = _File([b"a", b"b"])
    body = _body(file)

    async def give_up() -> None:
        chunks = aiter(body)
        file.log.append(f"sent {(await anext(chunks)).decode()}")
        await chunks.aclose()  # type: ignore[attr-defined]

    anyio.run(give_up)  # returns once the loop's threads have finished
    assert file.log == ["read a", "sent a", "recorded"]
    assert file.recorded_on
    assert threading.main_thread() not in file.recorded_on
    assert file.closed


def test_a_response_that_fails_before_it_is_complete_is_still_recorded_once() -> None:
    """All of a one-chunk body went out but the final message could not be sent: the event
    is written anyway, once, off the event loop, and the file is closed."""
    file = _File([b"abc"])
    with pytest.raises(ClientDisconnect):
        _respond(file, _body(file), fail_on="complete")
    assert file.log == ["read abc", "sent abc", "recorded"]
    assert threading.main_thread() not in file.recorded_on
    assert file.closed
