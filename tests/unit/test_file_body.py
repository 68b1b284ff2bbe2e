"""A file response's body writes the download's event once its first chunk has gone out, or
at the end when none went out (an empty file, a transfer cut short), and always closes the
file it reads."""

from __future__ import annotations

from collections.abc import Iterator

import anyio

from qexport.http.download import FileBody


class _File:
    """Chunks to read, a log of what happened, and whether the file was closed."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.log, self.closed = chunks, list[str](), False

    def read(self) -> Iterator[bytes]:
        try:
            for chunk in self.chunks:
                self.log.append(f"read {chunk.decode()}")
                yield chunk
        finally:
            self.closed = True


def _body(file: _File) -> FileBody:
    body = FileBody(file.read())
    body.after_first = lambda: file.log.append("recorded")
    return body


def test_the_event_is_written_after_the_first_chunk_went_out() -> None:
    file = _File([b"a", b"b", b"c"])
    body = _body(file)

    async def send_all() -> None:
        async for chunk in body:
            file.log.append(f"sent {chunk.decode()}")

    anyio.run(send_all)
    assert file.log == [
        "read a",  # when the response was made, on the request's own trip
        "sent a",
        "recorded",
        "read b",
        "sent b",
        "read c",
        "sent c",
    ]
    assert file.closed


def test_an_empty_file_is_recorded_at_the_end() -> None:
    file = _File([])
    body = _body(file)

    async def send_all() -> None:
        async for chunk in body:
            file.log.append(f"sent {chunk.decode()}")

    anyio.run(send_all)
    assert file.log == ["recorded"]
    assert file.closed


def test_a_transfer_cut_short_is_recorded_and_its_file_closed() -> None:
    """The client went away while the first chunk was on its way (the sender stops asking
    for more): the event is still written, on the spot, and the file is closed unread."""
    file = _File([b"a", b"b"])
    body = _body(file)

    async def give_up() -> None:
        chunks = aiter(body)
        file.log.append(f"sent {(await anext(chunks)).decode()}")
        await chunks.aclose()  # type: ignore[attr-defined]

    anyio.run(give_up)
    assert file.log == ["read a", "sent a", "recorded"]
    assert file.closed
