"""Exports with recipients over the `api` fixture, the real receivers and a dispatcher.

`deliveries.export(...)` requests an export with recipients and lets a worker settle it;
`deliveries.dispatcher(**settings)` sends whatever is due, as the scheduler process does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

import pytest

from qexport import bootstrap
from qexport.config import Settings
from qexport.deliveries.dispatch import DeliveryDispatcher
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.schedules import Delivery, parse_recipients
from qexport.services.requests import Admission, record_request
from tests.api.conftest import Api
from tests.support.receivers import SmtpServer, WebhookReceiver

ALICE = "alice@acme.test"
LINK = re.compile(r"https?://\S+/p/[A-Za-z0-9_-]{43}")


@dataclass
class Deliveries:
    api: Api
    smtp: SmtpServer
    hooks: WebhookReceiver
    opened: list[DeliveryDispatcher] = field(default_factory=list)

    def settings(self, **changes: Any) -> Settings:
        """The api fixture's settings with the SMTP server, and the egress policy opened for
        the receivers' own address (they listen on 127.0.0.1, which it refuses by default)."""
        defaults = {"smtp_url": self.smtp.url, "egress_allow": "127.0.0.1/32"}
        return replace(self.api.deps.settings, **{**defaults, **changes})

    def dispatcher(self, **changes: Any) -> DeliveryDispatcher:
        dispatcher = bootstrap.dispatcher(self.api.deps, settings=self.settings(**changes))
        self.opened.append(dispatcher)
        return dispatcher

    def export(self, *recipients: dict[str, str], query: str = "q-orders-acme") -> ExportRecord:
        """An export of `query` for Alice with `recipients`, settled by a worker."""
        record = record_request(
            self.api.deps.exports,
            self.api.deps.catalog,
            self.api.clock,
            Requester(self.api.user_id(ALICE), "acme"),
            RequestExport(SubjectRef("query", query, by_name=True), "csv"),
            Admission(notify=parse_recipients(list(recipients))),
        )
        self.api.drain()
        settled = self.api.deps.exports.get_export(record.id)
        assert settled is not None
        assert settled.settled
        return settled

    def of(self, export_id: str) -> dict[str, Delivery]:
        """The export's deliveries by target (address or URL)."""
        found = self.api.context.deliveries.list_deliveries(export_id)
        return {d.recipient.target: d for d in found}

    def file(self, export_id: str) -> bytes:
        response = self.api.get(f"/api/v1/exports/{export_id}/file", ALICE)
        assert response.status_code == 200, response.text
        return bytes(response.content)

    def open_link(self, url: str) -> Any:
        """Fetch a public link as anyone would: without credentials."""
        return self.api.client.get(urlparse(url).path, follow_redirects=False)


def deliveries_over(api: Api, request: pytest.FixtureRequest) -> Iterator[Deliveries]:
    """Alice, an editor of "acme" with the query "orders", on `api`, and both receivers
    running; the dispatchers opened are closed after."""
    api.member(ALICE, "editor")
    api.add_query("orders")
    smtp: SmtpServer = request.getfixturevalue("smtp_server")
    hooks: WebhookReceiver = request.getfixturevalue("webhook_receiver")
    env = Deliveries(api, smtp, hooks)
    yield env
    for dispatcher in env.opened:
        dispatcher.close()
