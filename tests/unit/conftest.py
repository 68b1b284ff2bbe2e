"""Fixtures shared by the unit tests (a frozen clock is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from tests.fakes import InMemoryAccountStore


@pytest.fixture(autouse=True)
def _plain_tracebacks() -> Iterator[None]:
    """A failure a test logs prints the plain traceback, as qexport's own logging does on a
    terminal (logs.py), not structlog's default rich one, which renders every frame with its
    local variables (about half a second a failure)."""
    saved = structlog.get_config()
    plain = structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
    structlog.configure(processors=[*saved["processors"][:-1], plain])
    yield
    structlog.configure(**saved)


@pytest.fixture
def accounts() -> InMemoryAccountStore:
    """An empty account store in memory."""
    return InMemoryAccountStore()
