"""Sign-in throttling and the argon2 gate, in memory."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from qexport.domain.sign_in import (
    ACCOUNT_CEILING,
    ACCOUNT_DELAY,
    PAIR_LIMIT,
    WINDOW,
    FailureCounts,
    Failures,
    address_key,
    wait_after,
)
from qexport.services import sign_in as service
from qexport.services.accounts import add_user
from tests.fakes import FrozenClock, InMemoryAccountStore
from tests.support.passwords import argon2_once_per_pair

__all__ = ["argon2_once_per_pair"]  # autouse: the throttle is under test, not the hash

PASSWORD = "correct horse battery staple"  # noqa: S105 - a test account's password


@pytest.fixture
def accounts_with_ann(clock: FrozenClock) -> InMemoryAccountStore:
    """Ann, a viewer of acme with a password."""
    store = InMemoryAccountStore()
    add_user(store, clock, "ann@acme.test", workspace="acme", role="viewer", password=PASSWORD)
    return store


def _attempt(
    accounts: InMemoryAccountStore,
    clock: FrozenClock,
    password: str,
    *,
    gate: service.VerificationGate | None = None,
    email: str = "ann@acme.test",
    address: str = "10.0.0.1",
    known_user: str | None = None,
) -> service.Attempt:
    return service.sign_in(
        accounts,
        clock,
        gate or service.VerificationGate(2),
        email=email,
        password=password,
        address=address,
        known_user=known_user,
    )


def test_the_wait_doubles_with_each_failure_past_the_limit_up_to_the_window() -> None:
    """Under the limit no wait; at it 30 s; then 60, 120, ... and never more than 15 min."""
    now = FrozenClock().now()
    waits = [wait_after(Failures(n, now), PAIR_LIMIT).total_seconds() for n in range(4, 12)]
    assert waits == [0, 30, 60, 120, 240, 480, 900, 900]
    assert wait_after(Failures(10_000, now), PAIR_LIMIT) == WINDOW


def test_a_right_password_signs_in_to_the_first_workspace(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The outcome names the user and their first workspace by name."""
    add_user(accounts_with_ann, clock, "ann@acme.test", workspace="a-first", role="viewer")
    attempt = _attempt(accounts_with_ann, clock, PASSWORD)
    assert attempt.outcome is service.Outcome.SIGNED_IN
    assert attempt.user is not None
    assert attempt.user.email == "ann@acme.test"
    assert attempt.workspace_id == "a-first"


def test_a_failure_is_counted_and_a_success_forgets_the_accounts_failures(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Each refusal records one failure for the email and the address; signing in clears
    the email's (the address's stay)."""
    assert _attempt(accounts_with_ann, clock, "wrong").outcome is service.Outcome.REFUSED
    since = clock.now() - WINDOW
    assert (
        accounts_with_ann.sign_in_failures("ann@acme.test", "10.0.0.1", since=since).pair.count == 1
    )
    assert _attempt(accounts_with_ann, clock, PASSWORD).outcome is service.Outcome.SIGNED_IN
    counts = accounts_with_ann.sign_in_failures("ann@acme.test", "10.0.0.1", since=since)
    assert (counts.pair.count, counts.account.count, counts.address.count) == (0, 0, 1)


def test_failures_are_counted_under_the_typed_email_whatever_its_case(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """`Ann@ACME.test ` and `ann@acme.test` are one account to the throttle."""
    for _ in range(PAIR_LIMIT):
        _attempt(accounts_with_ann, clock, "wrong", email=" Ann@ACME.test ")
    attempt = _attempt(accounts_with_ann, clock, PASSWORD)
    assert (attempt.outcome, attempt.retry_after) == (service.Outcome.THROTTLED, 30)


def test_a_sign_in_that_finds_no_free_slot_in_time_is_told_to_come_back(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the gate's one slot taken by a verification in progress, another sign-in is
    BUSY with a Retry-After and records no failure; once the slot is free it signs in."""
    started, finish = threading.Event(), threading.Event()
    real = service.password_matches  # argon2 once per pair (argon2_once_per_pair)

    def slow(password_hash: str, password: str) -> bool:
        started.set()
        finish.wait(timeout=30)
        return real(password_hash, password)

    gate = service.VerificationGate(1, timeout=0.05)
    monkeypatch.setattr(service, "password_matches", slow)
    first = threading.Thread(
        target=_attempt, args=(accounts_with_ann, clock, PASSWORD), kwargs={"gate": gate}
    )
    first.start()
    assert started.wait(timeout=30)
    busy = _attempt(accounts_with_ann, clock, PASSWORD, gate=gate)
    finish.set()
    first.join(timeout=30)
    assert (busy.outcome, busy.retry_after) == (service.Outcome.BUSY, 2)
    since = clock.now() - timedelta(hours=1)
    assert (
        accounts_with_ann.sign_in_failures("ann@acme.test", "10.0.0.1", since=since).address.count
        == 0
    )
    monkeypatch.setattr(service, "password_matches", real)
    assert (
        _attempt(accounts_with_ann, clock, PASSWORD, gate=gate).outcome is service.Outcome.SIGNED_IN
    )


def test_a_disabled_user_or_one_without_a_password_is_refused(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The right password of a disabled user, and any password of a user without one, get
    the same refusal as a wrong password."""
    user = accounts_with_ann.find_user("ann@acme.test")
    assert user is not None
    accounts_with_ann.set_disabled(user.id, disabled_at=clock.now())
    assert _attempt(accounts_with_ann, clock, PASSWORD).outcome is service.Outcome.REFUSED
    add_user(accounts_with_ann, clock, "bob@acme.test", workspace="acme", role="viewer")
    assert (
        _attempt(accounts_with_ann, clock, "", email="bob@acme.test").outcome
        is service.Outcome.REFUSED
    )


class _AllAtOnce(InMemoryAccountStore):
    """An account store whose first `n` failure look-ups all return together, as when `n`
    sign-ins are sent at the same moment and each checks before any has failed."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self._barrier = threading.Barrier(n)
        self._first = threading.local()

    def sign_in_failures(self, email: str, address: str, *, since: datetime) -> FailureCounts:
        found = super().sign_in_failures(email, address, since=since)
        if not getattr(self._first, "done", False):
            self._first.done = True
            self._barrier.wait(timeout=30)
        return found


def test_sign_ins_sent_at_once_are_stopped_at_the_limit(clock: FrozenClock) -> None:
    """Twelve wrong passwords sent at once from one address cost the account five guesses,
    not twelve: the rest are throttled, although each passed the first check before any had
    failed."""
    attempts = 12
    accounts = _AllAtOnce(attempts)
    add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer", password=PASSWORD)
    gate = service.VerificationGate(1, timeout=60)
    outcomes: list[service.Outcome] = []

    def attempt() -> None:
        outcomes.append(_attempt(accounts, clock, "wrong", gate=gate).outcome)

    threads = [threading.Thread(target=attempt) for _ in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert outcomes.count(service.Outcome.REFUSED) == PAIR_LIMIT
    assert outcomes.count(service.Outcome.THROTTLED) == attempts - PAIR_LIMIT


def test_a_flood_from_one_address_does_not_stop_the_owner_elsewhere(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Wrong passwords from address A throttle A (the right password included: nothing is
    checked); the right password from B signs in at once, and A stays throttled."""
    for _ in range(PAIR_LIMIT + 3):
        _attempt(accounts_with_ann, clock, "wrong", address="203.0.113.1")
    from_a = _attempt(accounts_with_ann, clock, PASSWORD, address="203.0.113.1")
    assert (from_a.outcome, from_a.retry_after) == (service.Outcome.THROTTLED, 30)
    assert _attempt(accounts_with_ann, clock, PASSWORD, address="198.51.100.2").outcome is (
        service.Outcome.SIGNED_IN
    )
    assert _attempt(accounts_with_ann, clock, PASSWORD, address="203.0.113.1").outcome is (
        service.Outcome.THROTTLED
    )


def _spread_failures(accounts: InMemoryAccountStore, clock: FrozenClock, count: int) -> None:
    """`count` wrong passwords for ann, each from an address of its own."""
    for i in range(count):
        assert _attempt(accounts, clock, "wrong", address=f"203.0.113.{i + 1}").outcome is (
            service.Outcome.REFUSED
        )


def test_guesses_spread_over_addresses_are_slowed_past_the_ceiling_never_locked(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Past ACCOUNT_CEILING failures from many addresses, any new address waits
    ACCOUNT_DELAY after the latest failure (429 with a few seconds), then its right password
    signs in; however many more failures come, the wait never grows."""
    _spread_failures(accounts_with_ann, clock, ACCOUNT_CEILING)
    slowed = _attempt(accounts_with_ann, clock, PASSWORD, address="198.51.100.2")
    assert (slowed.outcome, slowed.retry_after) == (
        service.Outcome.THROTTLED,
        ACCOUNT_DELAY.total_seconds(),
    )
    clock.advance(ACCOUNT_DELAY.total_seconds())
    for i in range(10):  # 30 failures in all, one per ACCOUNT_DELAY
        assert _attempt(accounts_with_ann, clock, "wrong", address=f"192.0.2.{i + 1}").outcome is (
            service.Outcome.REFUSED
        )
        assert _attempt(accounts_with_ann, clock, "wrong", address="192.0.2.250").retry_after == 5
        clock.advance(ACCOUNT_DELAY.total_seconds())
    assert _attempt(accounts_with_ann, clock, PASSWORD, address="198.51.100.2").outcome is (
        service.Outcome.SIGNED_IN
    )


def test_a_browser_the_owner_signed_in_from_is_not_slowed_by_the_ceiling(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """While the account is past its ceiling, the owner's known browser signs in at once;
    naming another user's id (or none) does not exempt anyone."""
    _spread_failures(accounts_with_ann, clock, ACCOUNT_CEILING)
    ann = accounts_with_ann.find_user("ann@acme.test")
    assert ann is not None
    known = _attempt(accounts_with_ann, clock, PASSWORD, address="198.51.100.2", known_user=ann.id)
    assert known.outcome is service.Outcome.SIGNED_IN
    clock.advance(ACCOUNT_DELAY.total_seconds())
    _spread_failures(accounts_with_ann, clock, 1)
    stranger = _attempt(accounts_with_ann, clock, PASSWORD, address="198.51.100.3", known_user="x")
    assert stranger.outcome is service.Outcome.THROTTLED


def test_a_sign_in_forgets_only_the_failures_from_its_own_address(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """The owner signing in from B does not give an attacker at A five fresh guesses: A's
    failures on the account still count, and so do the account's for its ceiling."""
    for _ in range(PAIR_LIMIT):
        _attempt(accounts_with_ann, clock, "wrong", address="203.0.113.1")
    _attempt(accounts_with_ann, clock, "wrong", address="198.51.100.2")
    assert _attempt(accounts_with_ann, clock, PASSWORD, address="198.51.100.2").outcome is (
        service.Outcome.SIGNED_IN
    )
    counts = accounts_with_ann.sign_in_failures(
        "ann@acme.test", "203.0.113.1", since=clock.now() - WINDOW
    )
    assert (counts.pair.count, counts.account.count) == (PAIR_LIMIT, PAIR_LIMIT)
    assert _attempt(accounts_with_ann, clock, "wrong", address="203.0.113.1").outcome is (
        service.Outcome.THROTTLED
    )


def test_an_ipv6_64_is_one_address_to_the_throttle(
    accounts_with_ann: InMemoryAccountStore, clock: FrozenClock
) -> None:
    """Guesses from five addresses of one IPv6 /64 throttle the whole /64 (a host given one
    has 2**64 addresses); another /64 signs in; an IPv4-mapped address is its IPv4 one."""
    for i in range(PAIR_LIMIT):
        _attempt(accounts_with_ann, clock, "wrong", address=f"2001:db8:1:2::{i + 1:x}")
    moved = _attempt(accounts_with_ann, clock, PASSWORD, address="2001:db8:1:2:ffff::9")
    assert (moved.outcome, moved.retry_after) == (service.Outcome.THROTTLED, 30)
    assert _attempt(accounts_with_ann, clock, PASSWORD, address="2001:db8:1:3::1").outcome is (
        service.Outcome.SIGNED_IN
    )
    assert address_key("::ffff:203.0.113.7") == "203.0.113.7"
    assert address_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert address_key("testclient") == "testclient"
