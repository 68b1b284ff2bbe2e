"""Wake-ups for a worker's idle slots: one slot per notification, none lost, no herd."""

from __future__ import annotations

import threading


class Wakeups:
    """Idle slots wait here between polls; a notification sends one of them to claim at once.

    Each `wake_one` wakes a single waiting slot, so one new export does not send every idle
    slot of the process to the queue at the same time (one would win, the others would take
    the claim's lock for nothing). A wake-up that arrives while no slot is waiting (every slot
    busy, or one between a missed claim and its wait) is kept for the next slot to wait, so it
    is never lost; at most `limit` are kept.
    """

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._pending = 0
        self._limit = limit
        self._released = False

    def wake_one(self) -> None:
        with self._cond:
            self._pending = min(self._pending + 1, self._limit)
            self._cond.notify()

    def release_all(self) -> None:
        """End every wait, now and from now on (the worker is stopping)."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Return when woken, or after `timeout` seconds (the poll)."""
        with self._cond:
            if not self._pending and not self._released:
                self._cond.wait(timeout)
            if self._pending:
                self._pending -= 1
