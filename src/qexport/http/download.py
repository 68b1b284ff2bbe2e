"""Sending an export's file over HTTP: streamed with its validators and byte ranges, or a
redirect to a short-lived presigned URL when the object store can sign one (S3)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, BinaryIO
from urllib.parse import quote

import anyio
from fastapi import Depends, Header
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.background import BackgroundTasks

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.audit import Action, Actor, AuditEvent, Outcome
from qexport.domain.exports import ExportRecord
from qexport.domain.formats import FILE_FORMATS, media_type
from qexport.http.errors import PROBLEM_MEDIA_TYPE, PROBLEM_SCHEMA, problem
from qexport.ports import AuditLog, Clock, ObjectStore, Presigner
from qexport.services.audit import actor_of, event
from qexport.services.exports import downloadable, presigned_link

CHUNK_BYTES = 256 * 1024
# A single range `bytes=first-last`, `bytes=first-` or `bytes=-suffix`; longer numbers than
# any file size are treated as malformed.
_RANGE = re.compile(r"bytes=(\d{0,18})-(\d{0,18})")


class RangeNotSatisfiableError(Exception):
    """The range starts at or beyond the end of the file."""


@dataclass(frozen=True)
class Conditions:
    """What the client asked for beyond the file: a byte range, and validators."""

    range: str | None = None
    if_none_match: str | None = None
    if_range: str | None = None


async def _conditions(  # async: no I/O, so not worth a hand-over to the thread pool
    range_: Annotated[str | None, Header(alias="Range")] = None,
    if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
    if_range: Annotated[str | None, Header(alias="If-Range")] = None,
) -> Conditions:
    return Conditions(range_, if_none_match, if_range)


# A route's parameter: the request headers that shape a download (documented in OpenAPI).
DownloadConditions = Annotated[Conditions, Depends(_conditions)]


def content_disposition(filename: str) -> str:
    """`attachment` with an ASCII fallback name and the exact name in RFC 5987 form."""
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def etag_of(record: ExportRecord) -> str:
    return f'"{record.sha256}"'


def requested_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single range to send, or None to send the whole file.

    Malformed and multi-range headers are ignored, as RFC 9110 allows; a range that starts
    past the end raises RangeNotSatisfiableError.
    """
    match = _RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:  # the last `last` bytes
        if int(last) == 0 or size == 0:
            raise RangeNotSatisfiableError
        return max(0, size - int(last)), size - 1
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        raise RangeNotSatisfiableError
    return start, min(int(last), size - 1) if last else size - 1


def _etag_matches(header: str, etag: str) -> bool:
    """Weak comparison, as If-None-Match uses (RFC 9110 13.1.2)."""
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    return "*" in tags or etag in tags


def presigned_redirect(
    presigner: Presigner | None, record: ExportRecord, now: datetime
) -> Response | None:
    """307 to a signed URL that never outlives the export; None if the store cannot sign."""
    if presigner is None:
        return None
    url, _valid = presigned_link(presigner, record, now)
    return RedirectResponse(url, status_code=307, headers={"Cache-Control": "no-store"})


def audited(
    audit: AuditLog,
    clock: Clock,
    actor: Actor,
    record: ExportRecord,
    conditions: Conditions,
    response: Response,
) -> Response:
    """Record the download `response` makes (or the presigned URL it hands out); never
    fails it. A file streamed in chunks (FileBody) has its event written once its first chunk
    has gone out, or when the transfer ends (cut short, or empty), whichever comes first:
    written before the first byte it cost that byte 2.0 ms at p50 on PostgreSQL (a commit's
    round trips and WAL flush; bench/download_ttfb.py), against a budget of 1 ms. Any other
    response (a file sent whole, a redirect, 304, 416) has its event given to the audit
    log's writer once it has been sent (`record_soon`), and the request ends when it is
    written: the route may run on the event loop (qexport.http.one_hop), where nothing may
    wait for a write, and no thread waits for it either."""
    status = response.status_code
    details: dict[str, object] = {"status": status, "filename": record.filename}
    if status == 307:
        action = Action.FILE_PRESIGNED
    else:
        action = Action.FILE_DOWNLOADED
        details["bytes"] = int(response.headers.get("Content-Length", 0)) if status < 300 else 0
        if conditions.range is not None:
            details["range"] = conditions.range[:100]
    happened = event(
        clock,
        actor,
        action,
        workspace_id=record.workspace_id,
        target=("export", record.id),
        outcome=Outcome.OK if status < 400 else Outcome.REFUSED,
        details=details,
    )
    body = response.body_iterator if isinstance(response, StreamingResponse) else None
    if isinstance(body, FileBody):
        body.after_first = lambda: audit.record(happened)
    else:
        after_sent(response, _written, audit, happened)
    return response


async def _written(audit: AuditLog, happened: AuditEvent) -> None:
    await asyncio.wrap_future(audit.record_soon(happened))


def after_sent(response: Response, task: Callable[..., object], *args: object) -> None:
    """Run `task(*args)` once `response` has been sent (on the thread pool if it blocks),
    after what it was to run already."""
    tasks = response.background
    if not isinstance(tasks, BackgroundTasks):
        tasks = BackgroundTasks([tasks] if tasks is not None else [])
        response.background = tasks
    tasks.add_task(task, *args)


class FileBody:
    """The body of a file response over one chunk (file_response sends less whole), which
    takes as few trips to the thread pool as it can.

    Its first chunk is read when it is made, on the request's own trip; each later read is a
    trip of its own, and the first of them also runs `after_first` (the download's event),
    so that it is written once the first chunk has gone out. A body that goes out whole in
    its first chunk reads nothing more: its `after_first` is left to `finish`, which
    FileStream runs once the response is complete, so that the client's next request on the
    connection does not wait for the event. `after_first` runs at the end instead when the
    body did not all go out (a transfer cut short): handed to a thread then and not awaited,
    since a cancelled transfer must not wait, nor the event loop write to the database.
    """

    def __init__(self, chunks: Iterator[bytes], length: int) -> None:
        self._chunks = chunks
        self._length = length
        self._sent = 0
        self._first = next(chunks, None)
        self.after_first: Callable[[], object] | None = None
        self._finishing = threading.Lock()  # the loop and a pool thread may both try

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    def finish(self) -> None:
        """Run `after_first` if it has not run yet (blocking: on the thread pool)."""
        with self._finishing:
            run, self.after_first = self.after_first, None
        if run is not None:
            run()

    def finish_elsewhere(self) -> None:
        """`finish` on a thread of its own, not awaited (on the event loop, which must neither
        wait nor write to the database); at once where there is no loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.finish()
            return
        loop.run_in_executor(None, self.finish)

    def _then_next(self) -> bytes | None:
        self.finish()
        return next(self._chunks, None)

    async def _iterate(self) -> AsyncIterator[bytes]:
        try:
            chunk = self._first
            self._first = None
            while chunk is not None:
                yield chunk
                self._sent += len(chunk)
                if self._sent >= self._length:
                    return  # all of it went out: nothing more to read
                chunk = await anyio.to_thread.run_sync(self._then_next)
        finally:
            if self._sent < self._length:
                self.finish_elsewhere()  # cut short: no awaiting here
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()


class FileStream(StreamingResponse):
    """A StreamingResponse of a FileBody that finishes the body once the response is
    complete (the server reads the connection's next request meanwhile)."""

    def __init__(self, body: FileBody, **kwargs: Any) -> None:
        super().__init__(body, **kwargs)
        self._file_body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except BaseException:
            self._file_body.finish_elsewhere()  # the transfer failed: as when cut short
            raise
        await anyio.to_thread.run_sync(self._file_body.finish)


def _chunks(stream: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    try:
        if start and stream.seekable():
            stream.seek(start)
        elif start:  # a stream that cannot seek: read past the bytes before the range
            skip = start
            while skip > 0 and (data := stream.read(min(CHUNK_BYTES, skip))):
                skip -= len(data)
        remaining = length
        while remaining > 0 and (data := stream.read(min(CHUNK_BYTES, remaining))):
            remaining -= len(data)
            yield data
    finally:
        stream.close()


def file_response(
    objects: ObjectStore,
    record: ExportRecord,
    conditions: Conditions,
    *,
    extra_headers: Mapping[str, str] | None = None,
) -> Response:
    """The file of a succeeded export: 200, 206 for a single range, 304 when the client's
    copy is current, 416 for a range past the end."""
    assert record.size_bytes is not None  # a succeeded record describes its object
    size, etag = record.size_bytes, etag_of(record)
    headers = {
        "ETag": etag,
        "Accept-Ranges": "bytes",
        "Content-Disposition": content_disposition(record.filename),
        # Browsers may keep a copy but must ask again before using it (it may have expired
        # or its link been revoked); shared caches must not keep it.
        "Cache-Control": "private, no-cache",
        "X-Content-Type-Options": "nosniff",
        **(extra_headers or {}),
    }
    if conditions.if_none_match is not None and _etag_matches(conditions.if_none_match, etag):
        return Response(status_code=304, headers=headers)
    if_range = conditions.if_range
    try:
        chosen = (
            requested_range(conditions.range, size)
            if if_range is None or if_range.strip() == etag
            else None
        )
    except RangeNotSatisfiableError:
        response = problem(416, "range_not_satisfiable", f"the file has {size} bytes")
        response.headers.update({**headers, "Content-Range": f"bytes */{size}"})
        return response
    start, end = chosen if chosen else (0, size - 1)
    length = end - start + 1  # 0 for an empty file (end is -1)
    stream = objects.open(record.storage_key)  # errors here are still problem documents
    headers["Content-Length"] = str(length)
    if chosen:
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    if length <= CHUNK_BYTES:
        # Read whole and sent as one body: a StreamingResponse's task group and iteration
        # cost 0.6 ms of CPU for a 64 KiB range (one client, PostgreSQL: 1.9 against 2.5 ms
        # a range without its event).
        return Response(
            b"".join(_chunks(stream, start, length)),
            status_code=206 if chosen else 200,
            media_type=media_type(record.format),
            headers=headers,
        )
    return FileStream(
        FileBody(_chunks(stream, start, length), length),
        status_code=206 if chosen else 200,
        media_type=media_type(record.format),
        headers=headers,
    )


# ---------------------------------------------------------------- OpenAPI

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_STRING = {"schema": {"type": "string"}}


def download(
    context: Container, principal: Principal, export_id: str, conditions: Conditions
) -> Response:
    """An export's file for its requester (or a workspace admin), as the API and the pages
    serve it: refused as `downloadable` refuses (not ready, expired, access lost, not theirs);
    a redirect to a short-lived presigned URL where the object store makes one, else the
    bytes (ranges and validators honoured); on the audit trail once it is sent."""
    record = downloadable(
        context.exports,
        context.catalog,
        context.clock,
        principal.requester,
        export_id,
        whole_workspace=principal.sees_workspace,
    )
    redirect = presigned_redirect(context.presigner, record, context.clock.now())
    response = redirect or file_response(context.objects, record, conditions)
    return audited(context.audit, context.clock, actor_of(principal), record, conditions, response)


def _file_content() -> dict[str, Any]:
    return {f.media_type: _BINARY for f in FILE_FORMATS.values()}


def file_responses() -> dict[int | str, dict[str, Any]]:
    """The success side of a file download, for `responses=` in a route."""
    header = {
        name: {"schema": {"type": "string"}}
        for name in ("ETag", "Content-Disposition", "Content-Length", "Accept-Ranges")
    }
    return {
        200: {"description": "The file.", "content": _file_content(), "headers": header},
        206: {
            "description": "The requested byte range of the file.",
            "content": _file_content(),
            "headers": {**header, "Content-Range": _STRING},
        },
        304: {"description": "The copy the client has (If-None-Match) is current."},
        307: {
            "description": "A short-lived presigned URL to download from (S3 object stores).",
            "headers": {"Location": _STRING},
        },
        416: {
            "description": "The requested range starts past the end of the file.",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}},
            "headers": {"Content-Range": _STRING},
        },
    }
