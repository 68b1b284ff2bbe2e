"""Signing in with an email and a password: throttled, and a few argon2 checks at a time.

Each argon2 verification takes 64 MiB for tens of milliseconds; twelve clients signing in
for 8 s took a server's peak RSS from 156 to 925 MiB. `VerificationGate` lets a few run at
once (QEXPORT_SIGNIN_CONCURRENCY, 2: peak 285 MiB under the same flood) and turns anyone who
waits longer than a moment away (503), so a flood costs a bounded amount of memory.

Failures are counted in the metadata database, per email and client address together, per
address and per email, so every server process sharing it throttles alike
(domain/sign_in.py says how long one must wait, and why per account alone locked owners out).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache

from qexport.domain.accounts import User, normalize_email
from qexport.domain.sign_in import WINDOW, address_key, email_key, retry_after
from qexport.ports import AccountStore, Clock, TokenStore
from qexport.services.accounts import hash_password, password_matches

# How long a sign-in waits for a verification slot before it is told to come back.
GATE_TIMEOUT_SECONDS = 3.0
BUSY_RETRY_AFTER_SECONDS = 2


class VerificationGate:
    """At most `slots` password verifications at once in this process."""

    def __init__(self, slots: int, timeout: float = GATE_TIMEOUT_SECONDS) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        self._timeout = timeout

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """Hold a verification slot; yields False when none came free in time."""
        if not self._slots.acquire(timeout=self._timeout):
            yield False
            return
        try:
            yield True
        finally:
            self._slots.release()


@cache
def _dummy_hash() -> str:
    """Checked when no user has the email, so a wrong email takes as long as a wrong password."""
    return hash_password("not a password anyone has")


class Outcome(StrEnum):
    SIGNED_IN = "signed_in"
    REFUSED = "refused"  # wrong email or password, no workspace, or disabled: one answer
    THROTTLED = "throttled"  # too many failures: try again after `retry_after`
    BUSY = "busy"  # no verification slot in time: try again shortly


class Reason(StrEnum):
    """Why a sign-in was refused, for the audit trail only: the person is told one answer."""

    UNKNOWN_EMAIL = "unknown_email"
    # Including a user who has no password.
    WRONG_PASSWORD = "wrong_password"  # noqa: S105 - the name of a refusal, not a secret
    DISABLED = "disabled"
    NO_WORKSPACE = "no_workspace"
    THROTTLED = "throttled"
    BUSY = "busy"


@dataclass(frozen=True)
class Attempt:
    outcome: Outcome
    user: User | None = None
    workspace_id: str | None = None
    retry_after: int = 0
    reason: Reason | None = None


def _refusal(user: User | None, matches: bool) -> Reason:
    if user is None:
        return Reason.UNKNOWN_EMAIL
    if not matches or not user.password_hash:
        return Reason.WRONG_PASSWORD
    return Reason.DISABLED if user.disabled else Reason.NO_WORKSPACE


def sign_in(
    accounts: AccountStore,
    clock: Clock,
    gate: VerificationGate,
    *,
    email: str,
    password: str,
    address: str,
    known_user: str | None = None,
) -> Attempt:
    """Check an email and password from a client address; `known_user`, the user a browser
    signed in as before (web/known_browser.py), is not slowed by the account's ceiling. A
    throttled attempt checks no password: it answers the same for every email, existing or
    not, right password or not."""
    key, now = email_key(email), clock.now()
    address = address_key(address)
    try:
        user = accounts.find_user(normalize_email(email))
    except ValueError:
        user = None
    known = user is not None and known_user is not None and user.id == known_user
    wait = _throttled(accounts, key, address, now, known)
    if wait:
        return Attempt(Outcome.THROTTLED, user, retry_after=wait, reason=Reason.THROTTLED)
    stored = user.password_hash if user and user.password_hash else _dummy_hash()
    with gate.slot() as free:
        if not free:
            return Attempt(
                Outcome.BUSY, user, retry_after=BUSY_RETRY_AFTER_SECONDS, reason=Reason.BUSY
            )
        # Attempts sent at once all passed the check above before any of them failed; looked
        # at again in the slot, after those ahead recorded their failures, they stop at the
        # limit instead of each costing a guess.
        wait = _throttled(accounts, key, address, now, known)
        if wait:
            return Attempt(Outcome.THROTTLED, user, retry_after=wait, reason=Reason.THROTTLED)
        matches = password_matches(stored, password)
        workspaces = (
            sorted(m.workspace_id for m in accounts.memberships_of(user.id))
            if user is not None and matches and user.password_hash and not user.disabled
            else []
        )
        if user is None or not workspaces:
            accounts.record_sign_in_failure(key, address, now=now, forget_before=now - WINDOW)
            return Attempt(Outcome.REFUSED, user, reason=_refusal(user, matches))
    accounts.clear_sign_in_failures(key, address)
    return Attempt(Outcome.SIGNED_IN, user, workspaces[0])


def _throttled(
    accounts: TokenStore, key: str, address: str, now: datetime, known_browser: bool
) -> int:
    """Seconds the attempt must wait (0: it may be made now)."""
    counts = accounts.sign_in_failures(key, address, since=now - WINDOW)
    return retry_after(counts, now, known_browser=known_browser)
