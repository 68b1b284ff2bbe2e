"""Rate limits: how often a member may do what is rationed, over every process."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol


class RateLimits(Protocol):
    """How often something may be done, per key, over every process of the installation."""

    def admit(self, key: str, *, now: datetime, limit: int, window: timedelta) -> timedelta:
        """Record one use of `key` at `now` when fewer than `limit` fall within `window`
        before it, and return zero; otherwise record nothing and return how long until the
        oldest leaves the window. Atomic per key: concurrent callers are admitted exactly
        `limit` times."""
        ...

    def give_back(self, key: str, *, at: datetime) -> None:
        """Forget one use of `key` recorded at `at` (an admission that turned out not to
        count); nothing when there is none."""
        ...
