"""Sign-in tests that check each password once: argon2 costs 64 MiB and about half a second a
check here, and those tests are about the throttle, not the hash."""

from __future__ import annotations

import functools

import pytest

from qexport.services import sign_in as service
from qexport.services.accounts import password_matches


@pytest.fixture(autouse=True)
def argon2_once_per_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sign-in checks each (hash, password) pair with argon2 once; imported into a test module,
    it applies to each of its tests."""
    monkeypatch.setattr(service, "password_matches", functools.cache(password_matches))
