"""How many describes and previews may hold a source connection at once.

Both open a connection to a member's data source and wait on it (a describe milliseconds, a
preview up to its timeout) on one of the server's request threads. Without a bound, one member
clicking Preview in a loop, or a script, could hold every thread and every source connection
of the installation. So each person holds at most `per_requester` at once (describing a query
when it is saved and previewing share them) and the server process at most `per_process`;
past either the request is refused with 429 and a Retry-After rather than queued, since a
queued one would hold a thread just the same.

The counts live in the process: one `qexport serve` is one process, and an installation that
runs several behind a load balancer bounds each of them (its threads are what is at stake).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from qexport.domain.exports import Requester
from qexport.domain.failures import TooManyRequestsError

PER_REQUESTER = 2
PER_PROCESS = 8
RETRY_AFTER_SECONDS = 5


class SourceSlots:
    """Counts the describes and previews running in this process, per requester and in all."""

    def __init__(self, per_requester: int = PER_REQUESTER, per_process: int = PER_PROCESS) -> None:
        if per_requester < 1 or per_process < 1:
            raise ValueError("source slots must allow at least one at a time")
        self.per_requester = per_requester
        self.per_process = per_process
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._total = 0

    @contextlib.contextmanager
    def hold(self, requester: Requester) -> Iterator[None]:
        """One slot for `requester` while the block runs; TooManyRequestsError when none is
        free (nothing is waited for)."""
        self._take(requester.user_id)
        try:
            yield
        finally:
            self._give_back(requester.user_id)

    def held(self, requester: Requester) -> int:
        """How many slots `requester` holds now."""
        with self._lock:
            return self._held.get(requester.user_id, 0)

    def _take(self, user_id: str) -> None:
        with self._lock:
            mine = self._held.get(user_id, 0)
            if mine >= self.per_requester:
                raise TooManyRequestsError(
                    f"you already have {mine} previews or query checks running (at most"
                    f" {self.per_requester} at once); wait for them to finish",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            if self._total >= self.per_process:
                raise TooManyRequestsError(
                    "the server is running as many previews and query checks as it allows"
                    f" ({self.per_process}); try again in a few seconds",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            self._held[user_id] = mine + 1
            self._total += 1

    def _give_back(self, user_id: str) -> None:
        with self._lock:
            left = self._held[user_id] - 1
            if left:
                self._held[user_id] = left
            else:
                del self._held[user_id]
            self._total -= 1
