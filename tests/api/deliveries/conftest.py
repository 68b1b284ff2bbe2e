"""The `deliveries` fixtures: an API (on SQLite, or on both databases), an SMTP server and a
webhook receiver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api
from tests.api.deliveries.env import Deliveries, deliveries_over
from tests.support.receivers import smtp_server, webhook_receiver

__all__ = ["smtp_server", "webhook_receiver"]  # fixtures for the tests here


@pytest.fixture
def deliveries(api: Api, request: pytest.FixtureRequest) -> Iterator[Deliveries]:
    """Alice, an editor of "acme" with the query "orders", and both receivers running."""
    yield from deliveries_over(api, request)


@pytest.fixture
def deliveries_both(api_both: Api, request: pytest.FixtureRequest) -> Iterator[Deliveries]:
    """`deliveries` on SQLite and on PostgreSQL."""
    yield from deliveries_over(api_both, request)
