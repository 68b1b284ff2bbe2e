"""The export page in Debian's Chromium against `qexport serve`, a worker and a scheduler (which
sends deliveries), all real subprocesses: deliveries and send again, public links after a
reload, the cancelled badge, request again, a readable failure and a schedule's recent runs;
every page state kept as a screenshot and checked by axe-core."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.conftest import wait_for
from tests.e2e.test_serve import bearer
from tests.support.receivers import WebhookReceiver, running_receiver
from tests.web.browser import (
    TIMEOUT_MS,
    Site,
    chromium,
    make_site,
    require_browser,
    sign_in,
)
from tests.web.browser import request_export as _request
from tests.web.browser import status_badge as _status

require_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

__all__ = ["chromium"]  # the fixture

TEAM = "team@example.com"
MISSING = "SELECT order_id FROM no_such_table"
NEUTRAL = "rgb(90, 100, 112)"  # the badge colour of Cancelled, as of Queued
RED = "rgb(164, 18, 27)"
# A failing receiver is tried twice, a second apart, then the delivery fails.
DELIVERY_ENV = {
    "QEXPORT_EGRESS_ALLOW": "127.0.0.1/32",  # the receiver listens here
    "QEXPORT_DELIVERY_MAX_ATTEMPTS": "2",
    "QEXPORT_DELIVERY_RETRY_BASE_SECONDS": "1",
    "QEXPORT_DELIVERY_RETRY_MAX_SECONDS": "1",
}


@pytest.fixture(scope="module")
def delivering_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The browser site, with the egress policy opened for the local receiver, no SMTP
    server, a query of a missing table, and `qexport scheduler` sending deliveries."""
    for site in make_site(tmp_path_factory, "export-page", DELIVERY_ENV):
        site.env.add_query("missing_table", MISSING)
        log = (site.env.data_dir / "scheduler.log").open("wb")
        scheduler = subprocess.Popen(
            [sys.executable, "-m", "qexport", "scheduler"],
            env={
                **site.env.environ,
                "QEXPORT_PUBLIC_BASE_URL": site.url,
                "QEXPORT_SCHEDULER_POLL_SECONDS": "0.2",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        site.env.procs.append(scheduler)
        yield site
        log.close()


@pytest.fixture
def delivering_page(delivering_site: Site, chromium: Browser) -> Iterator[Page]:
    """A fresh browser context on `delivering_site`, signed in as the member."""
    page = sign_in(delivering_site, chromium)
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def page_hooks() -> Iterator[WebhookReceiver]:
    with running_receiver() as receiver:
        yield receiver


def _api(site: Site) -> httpx2.Client:
    return httpx2.Client(base_url=site.url, headers=bearer(site.token), timeout=30)


def _query_id(site: Site, name: str) -> str:
    with _api(site) as api:
        items = api.get("/api/v1/queries").json()["items"]
    return str(next(q["id"] for q in items if q["name"] == name))


def _link_used(site: Site, export_id: str) -> None:
    """Wait (up to 10 s) until the export's link records its last use."""
    with _api(site) as api:
        wait_for(
            lambda: api.get(f"/api/v1/exports/{export_id}/links").json()["items"][0][
                "last_used_at"
            ],
            timeout=10,
        )


def _delivery(page: Page, target: str) -> Any:
    return page.locator("#deliveries tr", has_text=target)


def test_deliveries_show_their_states_and_a_failed_one_is_sent_again(
    delivering_site: Site, delivering_page: Page, page_hooks: WebhookReceiver
) -> None:
    """An export for a webhook that fails twice and an email with no SMTP server: the page
    shows both waiting, then failed with their reasons, without a reload; Send again puts
    the webhook back to waiting and it is sent on its next attempt."""
    page_hooks.script["/flaky"] = [503, 503]
    hook = page_hooks.url("/flaky")
    body = {
        "query_id": _query_id(delivering_site, "small_orders"),
        "format": "csv",
        "notify": [{"webhook": hook}, {"email": TEAM}],
    }
    with _api(delivering_site) as api:
        created = api.post("/api/v1/exports", json=body)
    assert created.status_code == 202, created.text
    export_id = created.json()["id"]
    delivering_page.goto(f"/exports/{export_id}")
    expect(delivering_page.get_by_role("heading", name="Deliveries")).to_be_visible()
    expect(_delivery(delivering_page, TEAM)).to_contain_text("Email")
    delivering_site.shot(delivering_page, "export-deliveries")
    expect(_delivery(delivering_page, hook).locator(".badge")).to_have_text("Failed")
    expect(_delivery(delivering_page, TEAM).locator(".badge")).to_have_text("Failed")
    expect(_delivery(delivering_page, TEAM)).to_contain_text(
        "email is not configured (set QEXPORT_SMTP_URL)"
    )
    expect(_delivery(delivering_page, hook)).to_contain_text("the receiver answered HTTP 503")
    delivering_site.shot(delivering_page, "export-deliveries-failed")
    _delivery(delivering_page, hook).get_by_role("button", name=f"Send again to {hook}").click()
    expect(delivering_page.get_by_text("The delivery is waiting to be sent again")).to_be_visible()
    expect(_delivery(delivering_page, hook)).to_contain_text("sent again by ann@example.com")
    delivering_site.shot(delivering_page, "export-delivery-sent-again")
    expect(_delivery(delivering_page, hook).locator(".badge")).to_have_text("Sent")
    expect(_delivery(delivering_page, hook)).to_contain_text("with the file's link")
    delivering_site.shot(delivering_page, "export-delivery-sent")
    assert [h.status for h in page_hooks.at("/flaky")] == [503, 503, 200]


def test_a_public_link_is_listed_after_a_reload_and_revoked(
    delivering_site: Site, delivering_page: Page, chromium: Browser
) -> None:
    """The new link is shown, focused and announced; a reload shows its URL no more, makes
    no other link and lists it (last used once opened); a GET of the form's URL lands on
    the page; Revoke asks first, and then the link opens the invalid-link page."""
    export_id = _request(delivering_page, "small_orders")
    expect(_status(delivering_page)).to_have_text("Succeeded")
    delivering_page.get_by_role("button", name="Create a public link").click()
    expect(delivering_page).to_have_url(f"{delivering_site.url}/exports/{export_id}")
    url_field = delivering_page.get_by_label("Link", exact=True)
    expect(url_field).to_be_focused()
    expect(delivering_page.locator("#announcer")).to_contain_text("A public link was created.")
    url = url_field.input_value()
    delivering_site.shot(delivering_page, "export-new-link")
    delivering_page.reload()
    expect(delivering_page.get_by_label("Link", exact=True)).to_have_count(0)
    rows = delivering_page.locator("#links tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("ann@example.com")
    expect(rows).to_contain_text("never")
    with _api(delivering_site) as api:
        assert len(api.get(f"/api/v1/exports/{export_id}/links").json()["items"]) == 1
    delivering_site.shot(delivering_page, "export-links-after-reload")
    stranger = chromium.new_context()
    try:
        assert stranger.request.get(url).status == 200
        _link_used(delivering_site, export_id)  # recorded once the file has gone out, not before
        delivering_page.reload()
        expect(rows).not_to_contain_text("never")
        delivering_page.goto(
            f"/exports/{export_id}/links"
        )  # the form's URL, as from the address bar
        expect(delivering_page).to_have_url(f"{delivering_site.url}/exports/{export_id}")
        delivering_site.shot(delivering_page, "export-links-get-of-the-form")
        rows.get_by_role("button", name=re.compile("^Revoke the link created")).click()
        dialog = delivering_page.get_by_role("dialog", name=re.compile("^Revoke this public link"))
        expect(dialog).to_be_visible()
        delivering_site.shot(delivering_page, "export-link-revoke-confirm")
        dialog.get_by_role("button", name="Revoke the link").click()
        expect(delivering_page.get_by_text("The public link was revoked")).to_be_visible()
        expect(delivering_page.get_by_text("No live public links.")).to_be_visible()
        delivering_site.shot(delivering_page, "export-link-revoked")
        assert stranger.request.get(url).status == 410
    finally:
        stranger.close()


def test_a_cancelled_export_is_neutral_and_is_requested_again(
    delivering_site: Site, delivering_page: Page
) -> None:
    """Running, the page shows rows written, the time so far and the rate; cancelled, its
    badge says Cancelled in the neutral colour (not the red of a failure); Request again
    lands on a new export of the same query."""
    export_id = _request(delivering_page, "every_number")
    expect(_status(delivering_page)).to_have_text("Running")
    expect(delivering_page.locator("#export .status .detail")).to_contain_text(re.compile(r"\d+ s"))
    delivering_site.shot(delivering_page, "export-running-progress")
    delivering_page.get_by_role("button", name="Cancel this export").click()
    delivering_page.get_by_role("dialog").get_by_role("button", name="Cancel the export").click()
    expect(_status(delivering_page)).to_have_text("Cancelled")
    assert _status(delivering_page).evaluate("e => getComputedStyle(e).color") == NEUTRAL
    expect(delivering_page.get_by_text("This page updates as it progresses.")).to_have_count(0)
    delivering_site.shot(delivering_page, "export-cancelled-badge")
    delivering_page.get_by_role("button", name="Request again").click()
    expect(delivering_page.get_by_text("The export was requested.")).to_be_visible()
    again = delivering_page.url.split("/exports/")[1].split("?")[0]
    assert again != export_id
    expect(delivering_page.get_by_role("heading", name="every_number")).to_be_visible()
    expect(_status(delivering_page)).to_have_text(re.compile("Queued|Running"))
    delivering_site.shot(delivering_page, "export-requested-again")
    with _api(delivering_site) as api:
        assert api.post(f"/api/v1/exports/{again}/cancel").status_code == 200


def test_a_failure_reads_cleanly_and_keeps_the_engines_words(
    delivering_site: Site, delivering_page: Page
) -> None:
    """A missing table: Failed in red with the readable reason, no internal suggestion; the
    history's disclosure holds DuckDB's own message."""
    _request(delivering_page, "missing_table")
    expect(_status(delivering_page)).to_have_text("Failed")
    assert _status(delivering_page).evaluate("e => getComputedStyle(e).color") == RED
    status = delivering_page.locator("#export .status")
    expect(status).to_contain_text("query_invalid")
    expect(status).to_contain_text("no_such_table does not exist")
    expect(status).not_to_contain_text("pg_tables")
    expect(delivering_page.get_by_text("This page updates as it progresses.")).to_have_count(0)
    delivering_site.shot(delivering_page, "export-failed-readable")
    delivering_page.get_by_text("The source's full message").click()
    expect(delivering_page.locator("details.engine")).to_contain_text('Did you mean "pg_tables"?')
    delivering_site.shot(delivering_page, "export-failed-engine-message")


def test_a_schedules_page_shows_its_recent_runs(
    delivering_site: Site, delivering_page: Page
) -> None:
    """Run now, then the schedule's page: the run's due time, its export's badge linking to
    the export, and its email delivery failed (no SMTP server) with the reason."""
    with _api(delivering_site) as api:
        created = api.post(
            "/api/v1/schedules",
            json={
                "query_id": _query_id(delivering_site, "small_orders"),
                "format": "csv",
                "cron": "0 8 1 1 *",
                "recipients": [{"email": TEAM}],
            },
        )
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    delivering_page.goto(f"/schedules/{schedule_id}")
    expect(delivering_page.get_by_text("It has not run yet.")).to_be_visible()
    delivering_site.shot(delivering_page, "schedule-no-runs")
    delivering_page.get_by_role("button", name="Run now").click()
    expect(_status(delivering_page)).to_have_text("Succeeded")
    delivering_page.goto(f"/schedules/{schedule_id}")
    runs = delivering_page.locator("#runs tbody tr")
    expect(runs).to_have_count(1)
    expect(runs.locator(".badge").first).to_have_text("Succeeded")
    expect(runs).to_contain_text(f"Email {TEAM}")
    expect(runs).to_contain_text("Failed", timeout=TIMEOUT_MS)
    expect(runs).to_contain_text("email is not configured")
    delivering_site.shot(delivering_page, "schedule-runs")
    runs.get_by_role("link").click()
    expect(delivering_page.get_by_role("heading", name="Deliveries")).to_be_visible()
    delivering_site.shot(delivering_page, "schedule-run-export")


def test_the_export_page_at_375_px(delivering_site: Site, chromium: Browser) -> None:
    """On a narrow screen the tables of links, deliveries and history become cards: no
    sideways scrolling, nothing unreadable to axe."""
    narrow = sign_in(delivering_site, chromium, width=375, shot=None)
    try:
        export_id = _request(narrow, "small_orders")
        expect(_status(narrow)).to_have_text("Succeeded")
        narrow.get_by_role("button", name="Create a public link").click()
        narrow.reload()
        expect(narrow.locator("#links tbody tr")).to_have_count(1)
        delivering_site.shot(narrow, "export-375")
        with _api(delivering_site) as api:
            schedules = api.get("/api/v1/schedules").json()["items"]
        if schedules:
            narrow.goto(f"/schedules/{schedules[-1]['id']}")
            delivering_site.shot(narrow, "schedule-375")
        narrow.goto(f"/exports/{export_id}")
    finally:
        narrow.context.close()
