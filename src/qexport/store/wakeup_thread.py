"""The thread behind a worker's wake-ups (PostgreSQL's LISTEN, SQLite's change watch).

It runs one watch after another until stopped: a watch that fails with one of the database's
errors is logged and tried again a little later, while polling carries on underneath.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

RETRY_SECONDS = 2.0

log = structlog.get_logger()


class WakeupThread:
    """Calls `on_wake` from a daemon thread each time `_watch` sees something worth a claim."""

    # What a subclass's `_watch` may raise when the database is away, and how that is logged.
    errors: tuple[type[Exception], ...] = ()
    failure_event = "wakeup_failed"

    def __init__(self, on_wake: Callable[[], None], *, name: str) -> None:
        self._on_wake = on_wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.received = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _wake(self) -> None:
        self.received += 1
        self._on_wake()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except self.errors:
                log.warning(self.failure_event, exc_info=True)
                self._stop.wait(RETRY_SECONDS)

    def _watch(self) -> None:
        """Watch until `_stop` is set, calling `_wake` for each change seen."""
        raise NotImplementedError
