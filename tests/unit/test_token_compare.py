"""API tokens are checked with a constant-time comparison, whether the token is good, its
secret was tampered with, or its id is unknown, so timing does not reveal which."""

from __future__ import annotations

import hmac
from collections.abc import Callable

import pytest

from qexport.domain.accounts import hash_secret, parse_api_token
from qexport.domain.failures import UnauthorizedError
from qexport.services import accounts as service
from qexport.services.auth import authenticate
from qexport.testing import FrozenClock, InMemoryAccountStore

Compared = list[tuple[str, str]]


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> Compared:
    """Every call of the constant-time comparison the accounts module makes, delegated."""
    calls: Compared = []
    real: Callable[[str, str], bool] = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("qexport.domain.accounts.hmac.compare_digest", spy)
    return calls


def _issued(clock: FrozenClock) -> tuple[InMemoryAccountStore, str, str]:
    """An account store with one member's token: (store, token, stored hash)."""
    accounts = InMemoryAccountStore()
    service.add_user(accounts, clock, "ann@acme.test", workspace="acme", role="viewer")
    issued = service.issue_token(accounts, clock, "ann@acme.test")
    return accounts, issued.token, _stored(accounts, issued.token)


def _stored(accounts: InMemoryAccountStore, token: str) -> str:
    parsed = parse_api_token(token)
    assert parsed is not None
    record = accounts.get_token(parsed[0])
    assert record is not None
    return record.secret_hash


def _secret(token: str) -> str:
    parsed = parse_api_token(token)
    assert parsed is not None
    return parsed[1]


def _tampered(token: str) -> str:
    """The token with one character in the middle of its secret changed."""
    middle = len(token) - 10
    return token[:middle] + ("B" if token[middle] != "B" else "C") + token[middle + 1 :]


def test_a_valid_token_is_compared_in_constant_time(compared: Compared, clock: FrozenClock) -> None:
    """Accepting a token goes through one constant-time comparison of the presented secret's
    hash with the stored hash."""
    accounts, token, stored = _issued(clock)
    authenticate(accounts, clock, token)
    assert compared == [(hash_secret(_secret(token)), stored)]


def test_a_tampered_secret_is_compared_in_constant_time(
    compared: Compared, clock: FrozenClock
) -> None:
    """A wrong secret for a known id is refused by the same constant-time comparison."""
    accounts, token, stored = _issued(clock)
    tampered = _tampered(token)
    with pytest.raises(UnauthorizedError):
        authenticate(accounts, clock, tampered)
    assert compared == [(hash_secret(_secret(tampered)), stored)]


def test_an_unknown_token_id_costs_a_comparison_too(compared: Compared, clock: FrozenClock) -> None:
    """An id that matches no token is still compared, in constant time, against a stand-in
    hash of the same shape, so it takes as long as a wrong secret for a known id."""
    accounts, token, stored = _issued(clock)
    unknown = "qx_0123456789abcdef_" + _secret(token)
    with pytest.raises(UnauthorizedError):
        authenticate(accounts, clock, unknown)
    assert len(compared) == 1
    presented, against = compared[0]
    assert presented == hash_secret(_secret(token))
    assert against != stored
    assert len(against) == len(stored)
