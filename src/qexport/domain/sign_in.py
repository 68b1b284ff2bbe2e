"""When a sign-in may be tried: failures counted per account and address together, per
address, and per account.

Counted per account alone, five wrong passwords sent from anywhere made the account's owner
wait 30 s, then minutes, wherever they were: anyone could lock anyone out. So:

- per account and address: after PAIR_LIMIT failures within WINDOW, the next attempt for
  that account from that address must wait FIRST_DELAY after the latest, and each failure
  past the limit doubles the wait (up to WINDOW). Guessing from one place is slow, and only
  that place is held back: the owner elsewhere signs in as usual.
- per address, whatever the account (credential stuffing): after ADDRESS_LIMIT, the same
  growing wait for every account tried from it.
- per account, from every address (guessing spread over many addresses): past
  ACCOUNT_CEILING failures within WINDOW, each attempt waits ACCOUNT_DELAY after the
  account's latest failure. A ceiling that slows and never locks: however many addresses
  guess, the account takes at most one guess per ACCOUNT_DELAY (720 an hour, where 1,000
  addresses made 5,000 guesses in the first minutes without it), and its owner waits a few
  seconds. A browser that signed in to
  the account before (`known_browser`, a signed cookie) is not slowed by it, so an attack
  that keeps the account's wait open still cannot keep its owner out.

An address is an IPv4 address, or an IPv6 address's /64 (`address_key`): a host given a
/64 would otherwise have 2**64 addresses, each with limits of its own. An attempt that is
made to wait checks no password, so it tells nothing, whether or not the account exists.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

WINDOW = timedelta(minutes=15)
PAIR_LIMIT = 5
ADDRESS_LIMIT = 20
ACCOUNT_CEILING = 20
FIRST_DELAY = timedelta(seconds=30)
ACCOUNT_DELAY = timedelta(seconds=5)
MAX_EMAIL_KEY_CHARS = 320


@dataclass(frozen=True)
class Failures:
    """Failures within WINDOW for one key (an email, an address, or both): how many, and
    the latest."""

    count: int = 0
    latest: datetime | None = None


@dataclass(frozen=True)
class FailureCounts:
    """What an attempt is judged by: the failures for the email from this address, for the
    email from anywhere, and from this address for any email."""

    pair: Failures = Failures()
    account: Failures = Failures()
    address: Failures = Failures()


def wait_after(failures: Failures, limit: int) -> timedelta:
    """How long after the latest failure the next attempt must wait (zero under the limit)."""
    if failures.count < limit:
        return timedelta(0)
    doublings = min(failures.count - limit, 10)  # 30 s * 2**5 already passes WINDOW
    wait: timedelta = FIRST_DELAY * 2**doublings
    return min(WINDOW, wait)


def retry_after(counts: FailureCounts, now: datetime, *, known_browser: bool = False) -> int:
    """Whole seconds until an attempt is allowed; 0 when it is allowed now."""
    waits = [
        failures.latest + wait_after(failures, limit) - now
        for failures, limit in ((counts.pair, PAIR_LIMIT), (counts.address, ADDRESS_LIMIT))
        if failures.latest is not None
    ]
    account = counts.account
    if not known_browser and account.count >= ACCOUNT_CEILING and account.latest is not None:
        waits.append(account.latest + ACCOUNT_DELAY - now)
    longest = max(waits, default=timedelta(0))
    return max(0, math.ceil(longest.total_seconds()))


def address_key(address: str) -> str:
    """What failures from a client address are counted under: an IPv4 address itself (also
    when it arrives IPv4-mapped), an IPv6 address's /64, which one host or link holds whole
    (one customer gets 2**64 addresses to guess from), anything else as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def email_key(email: str) -> str:
    """What failures are counted under for a typed email, existing account or not."""
    return email.strip().lower()[:MAX_EMAIL_KEY_CHARS]
