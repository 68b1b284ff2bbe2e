"""When a sign-in may be tried: failures counted per account and per client address.

After LIMIT failures within WINDOW, the next attempt must wait DELAY after the latest one,
and each failure past the limit doubles the wait (up to WINDOW). An attempt that is made to
wait checks no password, so it tells nothing, whether or not the account exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

WINDOW = timedelta(minutes=15)
ACCOUNT_LIMIT = 5
ADDRESS_LIMIT = 20
FIRST_DELAY = timedelta(seconds=30)
MAX_EMAIL_KEY_CHARS = 320


@dataclass(frozen=True)
class Failures:
    """Failures within WINDOW for one key (an email or an address): how many, the latest."""

    count: int = 0
    latest: datetime | None = None


def wait_after(failures: Failures, limit: int) -> timedelta:
    """How long after the latest failure the next attempt must wait (zero under the limit)."""
    if failures.count < limit:
        return timedelta(0)
    doublings = min(failures.count - limit, 10)  # 30 s * 2**5 already passes WINDOW
    wait: timedelta = FIRST_DELAY * 2**doublings
    return min(WINDOW, wait)


def retry_after(account: Failures, address: Failures, now: datetime) -> int:
    """Whole seconds until an attempt is allowed; 0 when it is allowed now."""
    waits = [
        failures.latest + wait_after(failures, limit) - now
        for failures, limit in ((account, ACCOUNT_LIMIT), (address, ADDRESS_LIMIT))
        if failures.latest is not None
    ]
    longest = max(waits, default=timedelta(0))
    return max(0, math.ceil(longest.total_seconds()))


def email_key(email: str) -> str:
    """What failures are counted under for a typed email, existing account or not."""
    return email.strip().lower()[:MAX_EMAIL_KEY_CHARS]
