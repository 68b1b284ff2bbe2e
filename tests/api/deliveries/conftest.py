"""The `deliveries` fixture: the `api` fixture, an SMTP server and a webhook receiver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api
from tests.api.deliveries.env import ALICE, Deliveries
from tests.support.receivers import SmtpServer, WebhookReceiver, smtp_server, webhook_receiver

__all__ = ["smtp_server", "webhook_receiver"]  # fixtures for the tests here


@pytest.fixture
def deliveries(api: Api, request: pytest.FixtureRequest) -> Iterator[Deliveries]:
    """Alice, an editor of "acme" with the query "orders", and both receivers running."""
    api.member(ALICE, "editor")
    api.add_query("orders")
    smtp: SmtpServer = request.getfixturevalue("smtp_server")
    hooks: WebhookReceiver = request.getfixturevalue("webhook_receiver")
    env = Deliveries(api, smtp, hooks)
    yield env
    for dispatcher in env.opened:
        dispatcher.close()
