"""The web UI in Debian's Chromium (headless, driven by Playwright) against `qexport serve`
and a worker, both real subprocesses: what a person does, with a screenshot of each page."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import httpx2

from tests.e2e.test_serve import bearer
from tests.web.browser import (
    CHROMIUM,
    Site,
    chromium,
    page,
    require_browser,
    site,
)
from tests.web.browser import request_export as _request
from tests.web.browser import status_badge as _status

require_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

__all__ = ["chromium", "page", "site"]  # fixtures


def test_request_watch_and_download_a_csv(site: Site, page: Page) -> None:
    """A csv export requested in the browser is seen queued, then reaches succeeded on its
    page without a reload (announced to screen readers), and the downloaded file has exactly
    the bytes of the API's download."""
    page.get_by_role("link", name="New export", exact=True).first.click()
    page.get_by_label("Query or report").select_option(label="small_orders")
    page.get_by_role("button", name="Show its options").click()
    page.get_by_label("n (integer)").fill("1500")
    site.shot(page, "new-export")
    site.worker.send_signal(signal.SIGSTOP)  # idle: it holds no lease; resumed below
    try:
        page.get_by_role("button", name="Request export").click()
        expect(_status(page)).to_have_text("Queued")
        page.evaluate("window.notReloaded = true")
    finally:
        site.worker.send_signal(signal.SIGCONT)
    export_id = page.url.split("/exports/")[1].split("?")[0]
    expect(_status(page)).to_have_text("Succeeded")
    assert page.evaluate("window.notReloaded === true"), "the page was reloaded"
    expect(page.locator("#announcer")).to_have_text("small_orders: Succeeded")
    expect(page.locator("#export .status")).to_contain_text("1,500 rows")
    expect(page.locator("#export")).to_contain_text(re.compile(r"expires in [67] days"))
    site.shot(page, "export-succeeded")
    record = httpx2.get(f"{site.url}/api/v1/exports/{export_id}", headers=bearer(site.token))
    filename = f"small_orders_{record.json()['created_at'][:10]}.csv"  # {name}_{date}
    with page.expect_download() as download_info:
        page.get_by_role("link", name=f"Download {filename}").click()
    assert download_info.value.suggested_filename == filename
    downloaded = Path(download_info.value.path()).read_bytes()
    api = httpx2.get(f"{site.url}/api/v1/exports/{export_id}/file", headers=bearer(site.token))
    assert api.status_code == 200
    assert downloaded == api.content
    page.get_by_role("link", name="Exports", exact=True).click()
    expect(page.locator(f"#export-{export_id}")).to_contain_text("Succeeded")
    site.shot(page, "exports")


def test_a_public_link_opens_in_a_fresh_context_until_revoked(
    site: Site, page: Page, chromium: Browser
) -> None:
    """The link shown once after creating it downloads the file without a session; once
    revoked (from the page's list of links, after the question) it opens the invalid-link
    page."""
    _request(page, "small_orders")
    expect(_status(page)).to_have_text("Succeeded")
    page.get_by_role("button", name="Create a public link").click()
    expect(page.get_by_label("Link", exact=True)).to_be_focused()
    url = page.get_by_label("Link", exact=True).input_value()
    assert url.startswith(f"{site.url}/p/")
    expect(page.get_by_role("button", name="Copy link")).to_be_visible()
    site.shot(page, "public-link")
    stranger = chromium.new_context()
    try:
        shared = stranger.request.get(url)
        assert shared.status == 200
        assert shared.body().startswith(b"order_id,total")
        page.locator("#links").get_by_role("button", name=re.compile("^Revoke the link")).click()
        page.get_by_role("dialog").get_by_role("button", name="Revoke the link").click()
        expect(page.get_by_text("The public link was revoked")).to_be_visible()
        invalid = stranger.new_page()
        response = invalid.goto(url)
        assert response is not None
        assert response.status == 410
        expect(invalid.get_by_role("heading", name="This link is not valid")).to_be_visible()
        site.shot(invalid, "invalid-link")
    finally:
        stranger.close()


def test_cancel_a_long_export(site: Site, page: Page) -> None:
    """A running export shows rows written as it goes and can be cancelled from its page,
    once the person says yes in the dialog (Keep it leaves it running)."""
    _request(page, "every_number")
    expect(_status(page)).to_have_text("Running")
    expect(page.locator("#export progress")).to_be_visible()
    site.shot(page, "export-running")
    page.get_by_role("button", name="Cancel this export").click()
    dialog = page.get_by_role("dialog", name="Cancel the export of every_number (csv)?")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Keep it")).to_be_focused()
    site.shot(page, "export-cancel-confirm")
    dialog.get_by_role("button", name="Keep it").click()
    expect(dialog).to_be_hidden()
    expect(_status(page)).to_have_text("Running")
    page.get_by_role("button", name="Cancel this export").click()
    dialog.get_by_role("button", name="Cancel the export").click()
    expect(page.get_by_text("The export was cancelled.").first).to_be_visible()
    expect(_status(page)).to_have_text("Cancelled")
    expect(page.locator("#export .status")).to_contain_text("no file was made")
    site.shot(page, "export-cancelled")


def test_a_failed_export_shows_its_code_and_reason(site: Site, page: Page) -> None:
    """A query that fails at run time settles failed with query_invalid and a readable reason,
    shown without a reload; its history lists the attempt."""
    _request(page, "bad_cast")
    expect(_status(page)).to_have_text("Failed")
    status = page.locator("#export .status")
    expect(status).to_contain_text("query_invalid")
    expect(status).to_contain_text("The query could not run.")
    expect(page.locator("#export table")).to_contain_text("query_invalid")
    site.shot(page, "export-failed")


def test_error_pages_and_keyboard_focus(site: Site, page: Page) -> None:
    """An unknown export is the 404 page in the site's style; the sign-out button is reached
    with the keyboard and shows a focus outline."""
    page.goto("/")
    site.shot(page, "exports-list")  # every export of the module's tests, for the README
    response = page.goto("/exports/00000000-0000-0000-0000-000000000000")
    assert response is not None
    assert response.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    site.shot(page, "not-found")
    page.keyboard.press("Tab")  # the skip link
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"
    page.get_by_role("button", name="Sign out").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{site.url}/sign-in")


def _catalog(site: Site) -> tuple[str, str]:
    """A report and a schedule of small_orders, made through the API; their ids."""
    with httpx2.Client(base_url=site.url, headers=bearer(site.token), timeout=30) as api:
        queries = api.get("/api/v1/queries").json()["items"]
        query_id = next(q["id"] for q in queries if q["name"] == "small_orders")
        section = {"heading": "First orders", "query_id": query_id, "display": "bar"}
        report = api.post("/api/v1/reports", json={"title": "Review", "sections": [section]})
        schedule = api.post(
            "/api/v1/schedules",
            json={
                "query_id": query_id,
                "format": "xlsx",
                "cron": "0 8 * * 1",
                "timezone": "Europe/Berlin",
                "recipients": [{"email": "ops@example.com"}],
            },
        )
        assert report.status_code == schedule.status_code == 201, schedule.text
        return report.json()["id"], schedule.json()["id"]


def test_browse_queries_reports_and_schedules(site: Site, page: Page) -> None:
    """From the navigation: a query's page shows its SQL and its Export button opens the
    new-export form for it; an editor saves a new query with the form; the schedules page
    shows the next run in the schedule's zone, and its owner pauses it."""
    report_id, schedule_id = _catalog(site)
    page.get_by_role("link", name="Queries", exact=True).click()
    expect(page.get_by_role("heading", name="Queries")).to_be_visible()
    site.shot(page, "queries")
    page.get_by_role("link", name="small_orders", exact=True).click()
    expect(page.locator("pre.sql")).to_contain_text("WHERE order_id <= $n")
    site.shot(page, "query")
    page.get_by_role("link", name="Export", exact=True).click()
    expect(page.get_by_label("Query or report")).to_have_value(re.compile(r"^query:"))
    expect(page.get_by_label("n (integer)")).to_have_value("100")
    page.get_by_role("link", name="Queries", exact=True).click()
    page.get_by_role("link", name="New query").click()
    page.get_by_label("Name", exact=True).fill("first_orders")
    page.get_by_label("Source").select_option(index=1)
    page.get_by_label("SQL").fill("SELECT order_id FROM orders WHERE order_id <= $n")
    page.get_by_label("Parameters").fill("n:integer=10")
    site.shot(page, "query-form")
    page.get_by_role("button", name="Save query").click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    expect(page.get_by_role("heading", name="first_orders")).to_be_visible()
    page.get_by_role("link", name="Reports", exact=True).click()
    site.shot(page, "reports")
    page.goto(f"/reports/{report_id}")
    expect(page.get_by_role("cell", name="First orders")).to_be_visible()
    site.shot(page, "report")
    page.get_by_role("link", name="Schedules", exact=True).click()
    row = page.locator(f"#schedule-{schedule_id}")
    expect(row).to_contain_text(re.compile(r"08:00 CES?T"))
    expect(row).to_contain_text("active")
    site.shot(page, "schedules")
    row.get_by_role("link", name="small_orders").click()
    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_text("The schedule is paused")).to_be_visible()
    expect(page.locator(".status")).to_contain_text("paused")
    site.shot(page, "schedule")
    page.get_by_role("link", name="Edit").click()
    expect(page.get_by_label("Cron")).to_have_value("0 8 * * 1")
    site.shot(page, "schedule-form")


def test_a_broken_query_is_refused_at_the_sql_field(site: Site, page: Page) -> None:
    """Saving `SELECT * FROM no_such_table` with the query form is refused: the source's
    message is next to the SQL field and tied to it (aria-describedby, aria-invalid), the
    SQL typed is kept, and no query is saved; fixed, it saves and its page lists the
    columns."""
    page.get_by_role("link", name="Queries", exact=True).click()
    page.get_by_role("link", name="New query").click()
    page.get_by_label("Name", exact=True).fill("broken_orders")
    page.get_by_label("Source").select_option(index=1)
    page.get_by_label("SQL").fill("SELECT order_id FROM no_such_table")
    page.get_by_role("button", name="Save query").click()
    sql = page.get_by_label("SQL")
    expect(sql).to_have_attribute("aria-invalid", "true")
    expect(sql).to_have_attribute("aria-describedby", re.compile(r"\berror-sql\b"))
    expect(page.locator("#error-sql")).to_contain_text("no_such_table does not exist")
    expect(sql).to_have_value("SELECT order_id FROM no_such_table")
    site.shot(page, "query-form-refused")
    queries = httpx2.get(f"{site.url}/api/v1/queries", headers=bearer(site.token)).json()
    assert "broken_orders" not in [q["name"] for q in queries["items"]]
    sql.fill("SELECT order_id, total FROM orders")
    page.get_by_role("button", name="Save query").click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    expect(page.get_by_role("cell", name="DECIMAL(12,2)")).to_be_visible()
    site.shot(page, "query-columns")


def test_chromium_is_debians(site: Site) -> None:
    """The browser under test is the system's Chromium, not a downloaded one."""
    version = subprocess.run(
        [str(CHROMIUM), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert "Chromium" in version
