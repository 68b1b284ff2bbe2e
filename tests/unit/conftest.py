"""Fixtures shared by the unit tests (a frozen clock is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.fakes import InMemoryAccountStore


@pytest.fixture
def accounts() -> InMemoryAccountStore:
    """An empty account store in memory."""
    return InMemoryAccountStore()
