"""A client cannot choose the address the audit trail records and sign-in throttling counts
under: X-Forwarded-For is believed only from QEXPORT_TRUSTED_PROXIES (net/proxies.py), on
SQLite and PostgreSQL. The connection's address is set per client, as a socket's would be."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from qexport.domain.audit import AuditFilter
from tests.api.conftest import Api, api_on
from tests.web.conftest import Browser, add_person, csrf_of

CLIENT = "198.51.100.20"  # the connection's own address
CLAIMED = "203.0.113.9"  # what it writes into X-Forwarded-For
ANN = "ann@example.com"


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("pg_url") if request.param == "postgresql" else ""


@contextmanager
def _installation(
    tmp_path: Path, source_template: Path, url: str, trusted: str = ""
) -> Iterator[Api]:
    with api_on(tmp_path, source_template, url, trusted_proxies=trusted or None) as api:
        add_person(api, ANN)
        api.member(ANN, "editor")
        yield api


def _browser(api: Api) -> Browser:
    """A browser whose connection comes from CLIENT and says it forwards for CLAIMED."""
    client = TestClient(
        api.client.app, client=(CLIENT, 50123), headers={"X-Forwarded-For": CLAIMED}
    )
    return Browser(client)


def _wrong_password(browser: Browser) -> int:
    token = csrf_of(browser.page("/sign-in"))
    response = browser.client.post(
        "/sign-in",
        data={"email": ANN, "password": "wrong", "csrf": token},
        follow_redirects=False,
    )
    return response.status_code


def _recorded(api: Api) -> tuple[list[str | None], list[str | None]]:
    """The addresses of the sign-in events and of the API's export request events."""
    audit = api.deps.audit

    def addresses(action: str) -> list[str | None]:
        found = audit.list_events(workspace_id="acme", narrow=AuditFilter(action=action))
        return [e.client_address for e in found]

    return addresses("sign_in"), addresses("export.requested")


def _counted_under(api: Api, address: str) -> int:
    since = api.clock.now() - timedelta(hours=1)
    return api.context.accounts.sign_in_failures(ANN, address, since=since).address.count


def _request_export(api: Api, browser: Browser) -> None:
    query = api.add_query("orders")
    response = browser.client.post(
        "/api/v1/exports",
        headers=api.headers(ANN),
        json={"query_id": query.id, "format": "csv"},
    )
    assert response.status_code == 202, response.text


def test_a_client_that_is_no_trusted_proxy_is_recorded_with_its_own_address(
    tmp_path: Path, source_template: Path, metadata_url: str
) -> None:
    """Without QEXPORT_TRUSTED_PROXIES, a sign-in failure and an API request that carry
    X-Forwarded-For are recorded under the connection's address, and the failure is counted
    under it, never under the address the client claimed."""
    with _installation(tmp_path, source_template, metadata_url) as api:
        browser = _browser(api)
        assert _wrong_password(browser) == 400
        _request_export(api, browser)
        assert _recorded(api) == ([CLIENT], [CLIENT])
        assert _counted_under(api, CLIENT) == 1
        assert _counted_under(api, CLAIMED) == 0


def test_a_trusted_proxys_forwarded_address_is_the_client(
    tmp_path: Path, source_template: Path, metadata_url: str
) -> None:
    """With the connection's address in QEXPORT_TRUSTED_PROXIES, the address it forwards for
    is recorded and counted instead."""
    with _installation(tmp_path, source_template, metadata_url, trusted=f"{CLIENT}/32") as api:
        browser = _browser(api)
        assert _wrong_password(browser) == 400
        _request_export(api, browser)
        assert _recorded(api) == ([CLAIMED], [CLAIMED])
        assert _counted_under(api, CLAIMED) == 1
        assert _counted_under(api, CLIENT) == 0


def test_only_a_trusted_proxy_says_the_client_used_https(
    tmp_path: Path, source_template: Path
) -> None:
    """X-Forwarded-Proto: https from a trusted proxy marks the session cookie Secure; from
    any other client the header changes nothing."""
    with _installation(tmp_path, source_template, "", trusted=CLIENT) as api:
        for peer, secure in ((CLIENT, True), ("198.51.100.21", False)):
            client = TestClient(
                api.client.app, client=(peer, 50123), headers={"X-Forwarded-Proto": "https"}
            )
            cookie = client.get("/sign-in").headers["set-cookie"]
            assert ("secure" in cookie.lower()) is secure, cookie
