"""The streaming plumbing every writer shares: task sizing, ordered parallel encoding, output.

Writers turn record batches into bytes. Encoding is the expensive part and pyarrow releases
the GIL while it works, so batches are encoded on a small thread pool; results are written
in input order, and at most a few tasks are in flight so memory stays flat.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import pyarrow as pa

from qexport.writers.textual import value_bounds

if TYPE_CHECKING:
    from qexport.ports import Sink

T = TypeVar("T")
R = TypeVar("R")

# 32Ki rows per task: a 1M-row xlsx export peaked at 580 MiB RSS, against 702 MiB with 64Ki,
# at the same speed.
TASK_ROWS = 32_768
TASK_BYTES = 8 * 1024 * 1024
# Wide results get fewer rows per task, so a task's text (a cell costs tens of bytes of
# markup in JSON or XLSX) stays far below the 2 GiB that 32-bit string offsets allow.
TASK_CELLS = 2_000_000
CHUNK_BYTES = 1024 * 1024
MAX_WORKERS = 4


_END = object()


@dataclass(frozen=True)
class _Failed:
    error: BaseException


@contextmanager
def prefetched(items: Iterator[T], *, depth: int = 1) -> Iterator[Iterator[T]]:
    """Read `items` on a background thread, up to `depth` ahead of the consumer.

    The source (a DuckDB or PostgreSQL cursor) then keeps producing while the pool encodes;
    read in the writer's own thread, fetching and encoding would take turns. On exit the
    reader thread is stopped and joined (after the batch it is reading, if any), so the
    source is never read after `write` returns and can be closed safely.
    """
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def read() -> None:
        try:
            for item in items:
                ready.put(item)
                if stop.is_set():
                    return
            ready.put(_END)
        except BaseException as exc:
            ready.put(_Failed(exc))

    # The reader runs in a copy of this context, so log lines it causes keep their bindings.
    context = contextvars.copy_context()
    reader = threading.Thread(target=context.run, args=(read,), name="qexport-read", daemon=True)
    reader.start()

    def consume() -> Iterator[T]:
        while (item := ready.get()) is not _END:
            if isinstance(item, _Failed):
                raise item.error
            yield cast("T", item)

    try:
        yield consume()
    finally:
        stop.set()
        while reader.is_alive():  # unblock a reader waiting for room in the queue
            with suppress(queue.Empty):
                ready.get(timeout=0.05)
        reader.join()


def task_rows(schema: pa.Schema) -> int:
    """Rows per encoding task for this schema: `TASK_ROWS`, fewer for wide results."""
    return max(1, min(TASK_ROWS, TASK_CELLS // max(1, len(schema))))


def regroup(
    batches: Iterable[pa.RecordBatch], *, max_rows: int = TASK_ROWS, max_bytes: int = TASK_BYTES
) -> Iterator[list[pa.RecordBatch]]:
    """Re-cut the stream into tasks of about `max_rows` rows or `max_bytes` of Arrow data.

    Small batches are grouped (fewer, larger writes) and big ones sliced (bounded memory per
    task, and 32-bit string offsets never overflow while a task builds its text).
    """
    pending: list[pa.RecordBatch] = []
    rows = 0
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        row_bytes = max(1, batch.nbytes // batch.num_rows)
        step = max(1, min(max_rows, max_bytes // row_bytes))
        for start in range(0, batch.num_rows, step):
            piece = batch.slice(start, step)
            pending.append(piece)
            rows += piece.num_rows
            size += piece.num_rows * row_bytes
            if rows >= max_rows or size >= max_bytes:
                yield pending
                pending, rows, size = [], 0, 0
    if pending:
        yield pending


def ordered_map(
    func: Callable[[T], R], items: Iterable[T], *, max_in_flight: int | None = None
) -> Generator[R, None, None]:
    """`map(func, items)` on a thread pool, yielding results in input order.

    At most `max_in_flight` tasks exist at once, so a slow consumer (the upload) holds the
    producer back instead of letting encoded output pile up in memory.
    """
    workers = max(1, min(MAX_WORKERS, os.cpu_count() or 1))
    limit = max_in_flight or workers + 2
    pending: deque[Future[R]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qexport-encode") as pool:
        try:
            for item in items:
                pending.append(pool.submit(func, item))
                if len(pending) >= limit:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            # On an error (or an abandoned consumer) queued tasks are dropped, not run.
            for future in pending:
                future.cancel()


class SinkFile:
    """A write-only, non-seekable file over a `Sink` that hands it ~1 MiB chunks.

    pyarrow's Parquet writer and `zipfile` emit many small writes (headers, pages); the
    sink is better served by fewer, larger ones. `tell()` counts bytes written, which both
    libraries need to record offsets in a non-seekable stream.
    """

    def __init__(self, sink: Sink, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._sink = sink
        self._chunk_bytes = chunk_bytes
        self._buffer = bytearray()
        self._position = 0
        self.closed = False
        self._discarding = False

    def write(self, data: bytes | bytearray | memoryview | pa.Buffer) -> int:
        view = memoryview(data)
        size = view.nbytes
        self._position += size
        if self._discarding:
            return size
        if not self._buffer and size >= self._chunk_bytes:
            self._sink.write(view)
            return size
        self._buffer += view
        if len(self._buffer) >= self._chunk_bytes:
            self._drain()
        return size

    def flush(self) -> None:
        if self._buffer and not self._discarding:
            self._drain()

    def close(self) -> None:
        self.flush()
        self.closed = True

    def discard(self) -> None:
        """The output failed: drop what is buffered and ignore later writes.

        Lets a half-written container (zip, Parquet footer) be closed after an error without
        touching the sink again, so the original error is the one that propagates.
        """
        self._discarding = True
        self._buffer = bytearray()

    def tell(self) -> int:
        return self._position

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def _drain(self) -> None:
        # The buffer is handed over, never reused, in case the sink keeps a reference to it.
        chunk, self._buffer = self._buffer, bytearray()
        self._sink.write(chunk)


def text_buffer(strings: pa.Array) -> pa.Buffer:
    """The bytes of a string array without nulls, back to back, without copying them."""
    data = strings.buffers()[2]
    if len(strings) == 0 or data is None:
        return pa.py_buffer(b"")
    start, end = value_bounds(strings)
    return data.slice(start, end - start)
