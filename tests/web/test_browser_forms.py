"""The forms for people in Debian's Chromium against `qexport serve`: a schedule with five
mistakes refused all at once, its cron said in words as it is typed, its parameters typed;
report sections as rows; deleting with the dialog. Every state is shot and checked by axe."""

from __future__ import annotations

import re

from tests.web.browser import (
    Site,
    chromium,
    page,
    require_browser,
    sign_in,
    site,
)

require_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from qexport.domain.queries import Parameter, ParamType  # noqa: E402

__all__ = ["chromium", "page", "site"]  # fixtures

BY_DAY = (
    "SELECT CAST(ordered_at AS DATE) AS day, count(*) AS orders FROM orders"
    " WHERE ordered_at >= $since GROUP BY 1 ORDER BY 1 LIMIT $top"
)


def _by_day(site: Site) -> None:
    """A query asking for a date and an integer, neither with a default."""
    if not getattr(site, "has_by_day", False):
        site.env.add_query(
            "by_day",
            BY_DAY,
            Parameter("since", ParamType.DATE),
            Parameter("top", ParamType.INTEGER),
        )
        site.has_by_day = True  # type: ignore[attr-defined]


def _new_schedule(page: Page, subject: str) -> None:
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Query or report").select_option(label=subject)
    page.get_by_role("button", name="Show its formats and parameters").click()


def test_a_schedule_with_five_mistakes_shows_all_five_then_saves(site: Site, page: Page) -> None:
    """A cron in words, an unknown zone, an address that is not one and two parameters left
    empty: one submit shows all five in the summary and on their fields, top to bottom.
    Fixed, the cron is said in words with its next runs as it is typed, the email warning
    appears, "Check" says nothing is left to fix, and the saved schedule's page says when."""
    _by_day(site)
    _new_schedule(page, "by_day")
    expect(page.get_by_label("since (date, required)")).to_have_attribute("type", "date")
    expect(page.get_by_label("top (integer, required)")).to_have_attribute("type", "number")
    formats = page.locator("#format option:not([disabled])")
    expect(formats).to_have_text(["csv", "tsv", "jsonl", "parquet", "xlsx"])
    site.shot(page, "schedule-form-typed-parameters")
    page.get_by_label("Cron").fill("every monday")
    page.get_by_label("Time zone").fill("Mars/Olympus")
    page.get_by_label("Recipients").fill("not-an-address")
    page.get_by_role("button", name="Save schedule", exact=True).last.click()
    summary = page.locator(".error-summary")
    expect(summary.get_by_role("heading")).to_have_text("5 things to fix")
    links = summary.get_by_role("link")
    expect(links).to_have_count(5)
    hrefs = [links.nth(i).get_attribute("href") for i in range(5)]
    assert hrefs == ["#cron", "#timezone", "#recipients", "#param-since", "#param-top"]
    shown = page.locator("p.error[id^=error-]")
    assert [shown.nth(i).get_attribute("id") for i in range(shown.count())] == [
        "error-cron",
        "error-timezone",
        "error-recipients",
        "error-param-since",
        "error-param-top",
    ]
    expect(page.get_by_label("Cron")).to_have_attribute("aria-invalid", "true")
    site.shot(page, "schedule-form-five-mistakes")
    page.get_by_label("Cron").fill("0 8 * * 1")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    timetable = page.locator("#timetable")
    expect(timetable).to_contain_text("At 08:00, only on Monday")
    expect(timetable.locator("li")).to_have_count(3)
    expect(timetable.locator("li").first).to_have_text(
        re.compile(r"^Mon \d{4}-\d\d-\d\d 08:00 CES?T$")
    )
    page.get_by_label("Recipients").fill("ops@example.com")
    expect(page.locator("#no-smtp")).to_be_visible()
    page.get_by_label("since (date, required)").fill("2024-03-01")
    page.get_by_label("top (integer, required)").fill("10")
    site.shot(page, "schedule-form-fixed-live")
    page.get_by_role("button", name="Check (saves nothing)").click()
    expect(page.get_by_text("Nothing to fix")).to_be_visible()
    expect(page.locator(".error")).to_have_count(0)
    expect(page.locator("#timetable")).to_contain_text("At 08:00, only on Monday")
    site.shot(page, "schedule-form-checked")
    page.get_by_role("button", name="Save schedule", exact=True).last.click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    expect(page.locator("main")).to_contain_text("At 08:00, only on Monday")
    expect(page.locator(".warning")).to_contain_text("Email is not configured on this server")
    site.shot(page, "schedule-page-saved")


def test_a_report_format_list_follows_the_subject(site: Site, page: Page) -> None:
    """Choosing a report narrows the formats at once (no csv for a report); choosing a query
    again brings the tabular ones back."""
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="New schedule").click()
    _report(page, "Narrowing")
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.get_by_role("link", name="New schedule").click()
    page.get_by_label("Query or report").select_option(label="Narrowing")
    enabled = page.locator("#format option:not([disabled])")
    expect(enabled).to_have_text(["xlsx", "html", "pdf"])
    site.shot(page, "schedule-form-report-formats")
    page.get_by_label("Query or report").select_option(label="small_orders")
    expect(enabled).to_have_text(["csv", "tsv", "jsonl", "parquet", "xlsx"])


def _report(page: Page, title: str) -> None:
    """A one-section report of small_orders, made with the form."""
    page.goto("/reports/new")
    page.get_by_label("Title").fill(title)
    page.get_by_label("Heading").fill("Orders")
    page.get_by_label("Query").select_option(label="small_orders")
    page.get_by_role("button", name="Save report", exact=True).last.click()
    expect(page.get_by_text("Saved.")).to_be_visible()


def test_report_sections_are_rows_added_moved_removed_and_saved(site: Site, page: Page) -> None:
    """Rows as a person edits them: "Add a section" brings a second row, a line chart shows
    its chart columns, "Move section 2 up" swaps them as typed, "Remove section 2" drops
    one, and "Save report" saves what is shown, in that order."""
    page.get_by_role("link", name="Reports", exact=True).click()
    page.get_by_role("link", name="New report").click()
    page.get_by_label("Title").fill("Orders review")
    first = page.locator("#section-1")
    first.get_by_label("Heading").fill("All orders")
    first.get_by_label("Query").select_option(label="small_orders")
    expect(first.locator("[data-chart-columns]")).to_be_hidden()  # a table has none
    site.shot(page, "report-form-one-row")
    page.get_by_role("button", name="Add a section").click()
    expect(page).to_have_url(re.compile(r"/reports/new#section-2$"))
    second = page.locator("#section-2")
    expect(first.get_by_label("Heading")).to_have_value("All orders")
    second.get_by_label("Heading").fill("Totals")
    second.get_by_label("Query").select_option(label="small_orders")
    second.get_by_label("Shown as").select_option(label="Line chart")
    expect(second.get_by_label("Value columns (charts only)")).to_be_visible()
    second.get_by_label("Value columns (charts only)").fill("total")
    second.get_by_label("Rows at most").fill("50")
    site.shot(page, "report-form-two-rows")
    page.get_by_role("button", name="Move section 2 up").click()
    expect(page.locator("#section-1").get_by_label("Heading")).to_have_value("Totals")
    expect(page.locator("#section-1").get_by_label("Value columns (charts only)")).to_have_value(
        "total"
    )
    expect(page.locator("#section-2").get_by_label("Heading")).to_have_value("All orders")
    site.shot(page, "report-form-moved")
    page.get_by_role("button", name="Add a section").click()
    expect(page.locator("#section-3")).to_be_visible()
    page.get_by_role("button", name="Remove section 3").click()
    expect(page.locator("#section-3")).to_have_count(0)
    page.get_by_role("button", name="Save report", exact=True).last.click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    rows = page.locator("main table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("Totals")
    expect(rows.nth(0)).to_contain_text("line of total")
    expect(rows.nth(1)).to_contain_text("All orders")
    site.shot(page, "report-saved-from-rows")


def test_a_report_row_shows_its_own_mistakes(site: Site, page: Page) -> None:
    """No title (the browser does not stop at it: the server tells everything at once) and a
    row without a heading or query and with rows at most that is not a number: each refusal
    is on its row's field and in the summary, led by the section's number."""
    page.goto("/reports/new")
    page.locator("#section-1").get_by_label("Rows at most").fill("lots")
    page.get_by_role("button", name="Save report", exact=True).last.click()
    summary = page.locator(".error-summary")
    expect(summary.get_by_role("link")).to_have_text(
        [
            re.compile("^a title has 1 to 200 characters"),
            re.compile("^Section 1: a heading"),
            re.compile("^Section 1: choose"),
            re.compile("^Section 1: rows at most"),
        ]
    )
    expect(page.locator("#section-1-rows")).to_have_attribute("aria-invalid", "true")
    site.shot(page, "report-form-row-mistakes")


def test_delete_asks_in_the_dialog_and_says_what_happens(
    site: Site, page: Page, chromium: Browser
) -> None:
    """The red Delete on a query's page opens the dialog with what follows; "Keep it" keeps
    the query, yes deletes it and the list says so. A viewer's page has no Delete."""
    site.env.add_query("to_delete", "SELECT 1 AS one")
    page.get_by_role("link", name="Queries", exact=True).click()
    page.get_by_role("link", name="to_delete").click()
    delete = page.get_by_role("button", name="Delete this query")
    expect(delete).to_have_class("danger")
    site.shot(page, "query-page-with-delete")
    delete.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_have_text("Delete the query to_delete?")
    expect(dialog).to_contain_text("fail as access lost before they run")
    site.shot(page, "query-delete-dialog")
    dialog.get_by_role("button", name="Keep it").click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_role("heading", name="to_delete")).to_be_visible()
    delete.click()
    page.get_by_role("dialog").get_by_role("button", name="Delete the query").click()
    expect(page.get_by_text("The query was deleted.")).to_be_visible()
    expect(page.get_by_role("link", name="to_delete")).to_have_count(0)
    site.shot(page, "queries-after-delete")
    viewer_email = "val@example.com"
    from qexport.clock import SystemClock
    from qexport.services.accounts import add_user
    from qexport.store.accounts import SqlAccountStore
    from tests.web.conftest import PASSWORD

    add_user(
        SqlAccountStore(site.env.store.engine),
        SystemClock(),
        viewer_email,
        workspace="demo",
        role="viewer",
        password=PASSWORD,
    )
    viewer = sign_in(site, chromium, viewer_email, shot=None)
    viewer.get_by_role("link", name="Queries", exact=True).click()
    viewer.get_by_role("link", name="small_orders").click()
    expect(viewer.get_by_role("button", name="Delete this query")).to_have_count(0)
    site.shot(viewer, "query-page-viewer")
    viewer.context.close()


def test_the_forms_fit_a_phone(site: Site, chromium: Browser) -> None:
    """At 375 px the report rows, the schedule form with its refusals and its cron in words,
    and the lists of queries, reports and schedules neither scroll sideways nor break axe's
    rules."""
    _by_day(site)
    phone = sign_in(site, chromium, width=375, shot=None)
    phone.goto("/reports/new")
    phone.get_by_role("button", name="Add a section").click()
    site.shot(phone, "report-form-375")
    _new_schedule(phone, "by_day")
    phone.get_by_label("Cron").fill("30 7 * * 1-5")
    expect(phone.locator("#timetable")).to_contain_text("At 07:30, Monday through Friday")
    phone.get_by_role("button", name="Save schedule", exact=True).last.click()
    expect(phone.locator(".error-summary")).to_be_visible()
    site.shot(phone, "schedule-form-375")
    for listing in ("queries", "reports", "schedules"):  # each row a card at this width
        phone.goto(f"/{listing}")
        site.shot(phone, f"{listing}-375")
    phone.context.close()
