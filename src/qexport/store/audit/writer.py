"""The writer thread behind `SqlAuditLog.record_soon` (store/audit/log.py): events handed over
without waiting, written together by one thread per process.

Its own module so that the trail's store reads in one sitting; it knows nothing of the
database: it is given the function that writes one workspace's events.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from qexport.domain.audit import AuditEvent


def by_workspace_of_waiting(batch: list[Waiting]) -> dict[str, list[Waiting]]:
    """`batch` by the workspace of each event, each in its order."""
    grouped: dict[str, list[Waiting]] = {}
    for waiting in batch:
        grouped.setdefault(waiting.event.workspace_id, []).append(waiting)
    return grouped


@dataclass(eq=False)
class Waiting:
    """An event `record` was given, until it is written (`recorded`) or failed."""

    event: AuditEvent
    settled: threading.Event = field(default_factory=threading.Event)
    recorded: bool = False
    leads: bool = False
    # Settled by the writer of `record_soon` once the event is written (or failed).
    written: Future[bool] | None = None


class Writer:
    """The thread that writes the events given to `record_soon`: the first to arrive waits
    up to `linger` seconds for more, then they are written together, one statement (or
    transaction) per workspace, and their futures settled.

    Started at the first event, it stops after a while with nothing to write, and is
    started anew in a forked process (threads do not survive a fork).
    """

    _MOST = 500  # events in one batch
    _IDLE_SECONDS = 30.0

    def __init__(self, write: Callable[[list[Waiting]], None], linger: float) -> None:
        self._write = write
        self._linger = linger
        self._queue: queue.SimpleQueue[Waiting] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running_in: int | None = None  # the pid whose thread takes from the queue
        self.thread: threading.Thread | None = None

    def submit(self, waiting: Waiting) -> Future[bool]:
        waiting.written = Future()
        self._queue.put(waiting)
        with self._lock:
            if self._running_in != os.getpid():
                self._running_in = os.getpid()
                self.thread = threading.Thread(
                    target=self._run, name="qexport-audit-writer", daemon=True
                )
                self.thread.start()
        return waiting.written

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._IDLE_SECONDS)
            except queue.Empty:
                with self._lock:  # an event given meanwhile would find no thread: look again
                    if self._queue.empty():
                        self._running_in = None
                        return
                continue
            # Those given meanwhile gather without waking this thread (one wake a batch).
            time.sleep(self._linger)
            batch = [first]
            with contextlib.suppress(queue.Empty):
                while len(batch) < self._MOST:
                    batch.append(self._queue.get(block=False))
            try:
                for group in by_workspace_of_waiting(batch).values():
                    self._write(group)  # counts and logs what it could not write
            finally:  # whatever happens, no one waits for ever
                for waiting in batch:
                    assert waiting.written is not None
                    waiting.written.set_result(waiting.recorded)
