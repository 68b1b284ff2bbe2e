"""Statement deadlines: each statement's `Deadline`, and the one thread of a process that
interrupts the statements whose deadline has passed. Every source's sessions run under one
(DuckDB's cursors; MySQL's, SQLAlchemy's and Spark Connect's connections)."""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Callable

import structlog

# Cancelled deadlines wait in the queue until due, or until the queue grows this long.
_COMPACT_AT = 1024

log = structlog.get_logger()
# What a forked child inherited and must never free (_Deadlines._after_fork).
_INHERITED: list[object] = []


class _Deadlines:
    """The one thread of a process that interrupts statements whose deadline has passed.

    A threading.Timer per statement was a thread started and stopped per export: 0.1 ms of
    CPU of a tiny csv export, and a wait for the scheduler when the cores are busy.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        """In a forked child: a queue of its own. The parent's deadlines hold its DuckDB
        connections; freeing them here would run DuckDB's destructors on state that threads
        of the parent owned at the fork (a segmentation fault in the child), so they are kept,
        never touched."""
        _INHERITED.append(self._queue)
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline, seconds: float) -> None:
        with self._cond:
            due = time.monotonic() + seconds
            heapq.heappush(self._queue, (due, next(self._order), deadline))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def compact(self) -> None:
        """A deadline was cancelled: drop the cancelled ones once there are many."""
        with self._cond:
            if len(self._queue) > _COMPACT_AT:
                self._queue = [entry for entry in self._queue if not entry[2].cancelled]
                heapq.heapify(self._queue)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue or (wait := self._queue[0][0] - time.monotonic()) > 0:
                    self._cond.wait(wait if self._queue else None)
                _due, _order, deadline = heapq.heappop(self._queue)
            try:
                deadline.expire()
            except Exception:  # one statement's trouble must not stop every deadline
                log.exception("deadline_failed")


class Deadline:
    """Interrupts a running statement once `seconds` have passed, unless cancelled first.

    A non-positive or infinite number of seconds sets no deadline.
    """

    def __init__(self, seconds: float, interrupt: Callable[[], None]) -> None:
        self.validate(seconds)
        self.seconds = seconds
        self.expired = False
        self._interrupt = interrupt
        self._lock = threading.Lock()
        self.cancelled = False
        self._queued = 0 < seconds < math.inf
        if self._queued:
            _DEADLINES.add(self, seconds)

    @staticmethod
    def validate(seconds: float) -> None:
        if seconds < 0 or math.isnan(seconds):
            raise ValueError(f"timeout_seconds must be >= 0, got {seconds}")

    def expire(self) -> None:
        """The deadline passed: interrupt the statement, unless cancelled first."""
        # The lock keeps a late timer from interrupting a cursor that close() already released.
        with self._lock:
            if self.cancelled:
                return
            self.expired = True
            self._interrupt()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
        if self._queued:
            _DEADLINES.compact()


_DEADLINES = _Deadlines()
