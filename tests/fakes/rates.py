"""RateLimits in memory: the same sliding window as store/rates.py."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta


class InMemoryRateLimits:
    def __init__(self) -> None:
        self._uses: dict[str, list[datetime]] = {}
        self._lock = threading.Lock()

    def admit(self, key: str, *, now: datetime, limit: int, window: timedelta) -> timedelta:
        with self._lock:
            uses = [at for at in self._uses.get(key, []) if at > now - window]
            if len(uses) >= limit:
                self._uses[key] = uses
                return max(min(uses) + window - now, timedelta(microseconds=1))
            self._uses[key] = [*uses, now]
        return timedelta(0)

    def give_back(self, key: str, *, at: datetime) -> None:
        with self._lock:
            uses = self._uses.get(key, [])
            if at in uses:
                uses.remove(at)
