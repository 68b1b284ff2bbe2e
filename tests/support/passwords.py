"""Sign-in tests that pay for argon2 once: it costs 64 MiB and about half a second a hash or a
check here, and those tests are about the throttle, not the hash (which tests/unit/
test_accounts.py pins)."""

from __future__ import annotations

import functools

import pytest

from qexport.services import accounts
from qexport.services import sign_in as service

# Shared by every test of the process: a password hashed once keeps its hash (and its salt),
# so each (hash, password) pair is checked with argon2 once, whichever test asks first.
_hash_once = functools.cache(accounts.hash_password)
_check_once = functools.cache(accounts.password_matches)


@pytest.fixture(autouse=True)
def argon2_once_per_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a user hashes each password once, and sign-in checks each (hash, password) pair
    once, in the whole test process; imported into a test module, it applies to each of its
    tests."""
    monkeypatch.setattr(accounts, "hash_password", _hash_once)
    monkeypatch.setattr(service, "password_matches", _check_once)
