"""Every page state at 375 px wide, as on a phone (WCAG 1.4.10 reflow), in Debian's Chromium:
the navigation wraps, tables scroll sideways inside their own focusable region, forms and
SQL fit, and no page scrolls sideways (`site.shot` checks that and axe-core at each state).
The preview states are also seen at 1100 px."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator

import httpx2
import pytest

from tests.e2e.test_serve import bearer
from tests.web.browser import (
    Site,
    chromium,
    page,
    request_export,
    require_browser,
    sign_in,
    site,
    status_badge,
)

require_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

__all__ = ["chromium", "page", "site"]  # fixtures

NARROW = 375


@pytest.fixture
def narrow(site: Site, chromium: Browser) -> Iterator[Page]:
    """A phone-sized browser, signed in with the form (its sign-in page checked too)."""
    phone = sign_in(site, chromium, width=NARROW, shot="narrow-sign-in")
    yield phone
    phone.context.close()


@pytest.fixture(scope="module")
def report_and_schedule(site: Site) -> tuple[str, str]:
    """A report and a schedule of small_orders, made through the API; their ids."""
    with httpx2.Client(base_url=site.url, headers=bearer(site.token), timeout=30) as api:
        queries = api.get("/api/v1/queries").json()["items"]
        query_id = next(q["id"] for q in queries if q["name"] == "small_orders")
        section = {"heading": "First orders", "query_id": query_id, "display": "table"}
        report = api.post(
            "/api/v1/reports",
            json={"title": "Orders review, every week, for the whole team", "sections": [section]},
        )
        schedule = api.post(
            "/api/v1/schedules",
            json={
                "query_id": query_id,
                "format": "csv",
                "cron": "0 8 * * 1",
                "timezone": "America/Argentina/ComodRivadavia",
                "recipients": [
                    {"email": "operations-team-with-a-long-name@example.com"},
                    {"webhook": "https://hooks.example.com/qexport/a/very/long/path/indeed"},
                ],
            },
        )
        assert report.status_code == schedule.status_code == 201, schedule.text
        return report.json()["id"], schedule.json()["id"]


def _fits(page: Page, selector: str) -> None:
    """Every element matching `selector` lies within the window's width."""
    for box in page.locator(selector).all():
        found = box.bounding_box()
        assert found is not None
        assert found["x"] >= 0
        assert found["x"] + found["width"] <= NARROW + 0.5, selector


def _scrolls_inside(page: Page, region: str) -> None:
    """The table in `region` is wider than the window, and its own box scrolls (it is
    focusable, for the keyboard), while the page does not."""
    box = page.locator(region)
    widths = box.evaluate("b => [b.scrollWidth, b.clientWidth, b.tabIndex]")
    assert widths[0] > widths[1], "the table fits: nothing to scroll"
    assert widths[2] == 0
    box.focus()
    page.keyboard.press("ArrowRight")
    # Scrolled by the key (smoothly: the position moves over a few frames).
    page.wait_for_function("b => b.scrollLeft > 0", arg=box.element_handle())


def test_the_navigation_wraps_and_the_exports_list_fits(site: Site, narrow: Page) -> None:
    """Every navigation link and the sign-out button are on screen; the exports list's table
    scrolls inside its region."""
    _fits(narrow, "header.top nav a")
    _fits(narrow, ".signout button")
    request_export(narrow, "small_orders")
    expect(status_badge(narrow)).to_have_text("Succeeded")
    site.shot(narrow, "narrow-export-succeeded")
    request_export(narrow, "bad_cast")
    expect(status_badge(narrow)).to_have_text("Failed")
    site.shot(narrow, "narrow-export-failed")
    narrow.get_by_role("link", name="Exports", exact=True).click()
    expect(narrow.locator("#exports table tbody tr")).to_have_count(2)
    site.shot(narrow, "narrow-exports")
    _scrolls_inside(narrow, "#exports .table-scroll")


def test_a_queued_and_a_running_export_and_the_confirmations(site: Site, narrow: Page) -> None:
    """Queued (the worker paused), then running; Cancel asks in a dialog that fits; without
    JavaScript the confirmation page fits too."""
    site.worker.send_signal(signal.SIGSTOP)
    try:
        request_export(narrow, "small_orders")
        expect(status_badge(narrow)).to_have_text("Queued")
        site.shot(narrow, "narrow-export-queued")
    finally:
        site.worker.send_signal(signal.SIGCONT)
    request_export(narrow, "every_number")
    expect(status_badge(narrow)).to_have_text("Running")
    site.shot(narrow, "narrow-export-running")
    narrow.get_by_role("button", name="Cancel this export").click()
    dialog = narrow.get_by_role("dialog")
    expect(dialog).to_be_visible()
    _fits(narrow, "dialog#confirm")
    site.shot(narrow, "narrow-export-cancel-dialog")
    dialog.get_by_role("button", name="Cancel the export").click()
    expect(narrow.locator("#export .status")).to_contain_text("Cancelled")
    site.shot(narrow, "narrow-export-cancelled")

    request_export(narrow, "every_number")
    expect(status_badge(narrow)).to_have_text(re.compile("Queued|Running"))
    # Sent as a browser without JavaScript sends it (no dialog): the server asks on a page.
    narrow.evaluate("document.querySelector('form[data-confirm]').submit()")
    expect(
        narrow.get_by_role("heading", name="Cancel the export of every_number (csv)?")
    ).to_be_visible()
    site.shot(narrow, "narrow-confirm-page")
    narrow.get_by_role("button", name="Cancel the export").click()
    expect(narrow.locator("#export .status")).to_contain_text("Cancelled")


def test_queries_preview_and_the_query_form(site: Site, narrow: Page) -> None:
    """The queries list, a query's page with its SQL, its preview (the table scrolls inside
    its region), and the query form refusing a broken query."""
    narrow.get_by_role("link", name="Queries", exact=True).click()
    site.shot(narrow, "narrow-queries")
    narrow.get_by_role("link", name="small_orders", exact=True).click()
    expect(narrow.locator("pre.sql")).to_be_visible()
    _fits(narrow, "pre.sql")
    site.shot(narrow, "narrow-query")
    narrow.get_by_label("n (integer)").fill("30")
    narrow.get_by_role("button", name="Preview").click()
    expect(narrow.get_by_text("30 rows.")).to_be_visible()
    expect(narrow.locator(".preview-table tbody tr")).to_have_count(30)
    site.shot(narrow, "narrow-query-preview")
    narrow.goto("/queries")
    narrow.get_by_role("link", name="every_number", exact=True).click()
    narrow.get_by_role("button", name="Preview").click()
    expect(narrow.get_by_text("The first 100 rows; the result goes on")).to_be_visible()
    site.shot(narrow, "narrow-query-preview-wide")
    _scrolls_inside(narrow, "#preview .table-scroll")

    narrow.get_by_role("link", name="Queries", exact=True).click()
    narrow.get_by_role("link", name="New query").click()
    narrow.get_by_label("Name", exact=True).fill("broken_orders")
    narrow.get_by_label("Source").select_option(index=1)
    narrow.get_by_label("SQL").fill("SELECT order_id, a_column_that_does_not_exist FROM orders")
    narrow.get_by_label("Parameters").fill("n:integer=10")
    narrow.get_by_role("button", name="Save query").click()
    expect(narrow.locator("#error-sql")).to_be_visible()
    _fits(narrow, "form textarea")
    site.shot(narrow, "narrow-query-form-errors")


def test_new_export_with_its_preview(site: Site, narrow: Page) -> None:
    """The new-export form, then its preview of the chosen query below it."""
    narrow.get_by_role("link", name="New export", exact=True).first.click()
    narrow.get_by_label("Query or report").select_option(label="small_orders")
    narrow.get_by_role("button", name="Show its options").click()
    site.shot(narrow, "narrow-new-export")
    narrow.get_by_label("n (integer)").fill("3")
    narrow.get_by_role("button", name="Preview").click()
    expect(narrow.get_by_text("3 rows.")).to_be_visible()
    expect(narrow.get_by_label("n (integer)")).to_have_value("3")
    site.shot(narrow, "narrow-new-export-preview")


def test_reports_and_schedules(
    site: Site, narrow: Page, report_and_schedule: tuple[str, str]
) -> None:
    """The reports list, a report, the report form; the schedules list, a schedule (then
    subscribed), the schedule form; and the 404 page."""
    report_id, schedule_id = report_and_schedule
    narrow.get_by_role("link", name="Reports", exact=True).click()
    site.shot(narrow, "narrow-reports")
    narrow.goto(f"/reports/{report_id}")
    expect(narrow.get_by_role("cell", name="First orders")).to_be_visible()
    site.shot(narrow, "narrow-report")
    narrow.goto("/reports/new")
    site.shot(narrow, "narrow-report-form")
    narrow.get_by_role("link", name="Schedules", exact=True).click()
    expect(narrow.locator(f"#schedule-{schedule_id}")).to_be_visible()
    site.shot(narrow, "narrow-schedules")
    narrow.locator(f"#schedule-{schedule_id}").get_by_role("link").first.click()
    expect(narrow.get_by_role("button", name="Subscribe")).to_be_visible()
    site.shot(narrow, "narrow-schedule")
    narrow.get_by_role("button", name="Subscribe").click()
    expect(
        narrow.get_by_text("You are subscribed: each run's export is mailed to you")
    ).to_be_visible()
    expect(narrow.get_by_role("button", name="Unsubscribe")).to_be_visible()
    site.shot(narrow, "narrow-schedule-subscribed")
    narrow.get_by_role("link", name="Schedules", exact=True).click()
    expect(narrow.locator(f"#schedule-{schedule_id}")).to_contain_text("subscribed")
    narrow.goto(f"/schedules/{schedule_id}/edit")
    site.shot(narrow, "narrow-schedule-form")
    narrow.goto("/schedules/new")
    site.shot(narrow, "narrow-schedule-form-new")
    narrow.goto("/workspace/policy")
    expect(narrow.get_by_role("heading", name="Workspace policy")).to_be_visible()
    site.shot(narrow, "narrow-policy")
    response = narrow.goto("/queries/no-such-query")
    assert response is not None
    assert response.status == 404
    site.shot(narrow, "narrow-not-found")


def test_the_preview_states_at_1100_px(site: Site, page: Page) -> None:
    """The query page's and the new-export page's previews at a desktop width."""
    page.get_by_role("link", name="Queries", exact=True).click()
    page.get_by_role("link", name="small_orders", exact=True).click()
    page.get_by_label("n (integer)").fill("12")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("table", name="First rows of small_orders")).to_be_visible()
    expect(page.get_by_text("12 rows.")).to_be_visible()
    site.shot(page, "query-preview")
    page.get_by_role("link", name="New export", exact=True).first.click()
    page.get_by_label("Query or report").select_option(label="small_orders")
    page.get_by_role("button", name="Show its options").click()
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_text("100 rows.")).to_be_visible()
    site.shot(page, "new-export-preview")
