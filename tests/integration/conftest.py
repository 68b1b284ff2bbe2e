"""Fixtures shared by the integration tests (the store backends are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.support.stores import SqlMetadataStore


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_store(request: pytest.FixtureRequest) -> SqlMetadataStore:
    """The SQL store on each database it supports."""
    return request.getfixturevalue(f"{request.param}_store")  # type: ignore[no-any-return]
