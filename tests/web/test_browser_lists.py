"""The exports list in Debian's Chromium against `qexport serve` and a worker: pages, filters
that keep their values, the parameters column, a new export appearing without a reload; and
rows written moving at least twice during a large export (csv and parquet), as the page and
the API see them."""

from __future__ import annotations

import time

import httpx2
import pytest

from qexport.clock import SystemClock
from qexport.domain.exports import Requester
from qexport.services.subjects import query_subject
from qexport.store.accounts import SqlAccountStore
from tests.e2e.test_serve import bearer
from tests.web.browser import EMAIL, Site, chromium, page, require_browser, sign_in, site

require_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

__all__ = ["chromium", "page", "site"]  # fixtures

# Tens of millions of rows, each with a hash: about 10 s of writing even on a fast machine
# (15M rows took 4 s in CI, one publication), so several 2 s progress publications.
BIG_ROWS = 40_000_000
BIG = f"SELECT i, md5(i::VARCHAR) AS h FROM range({BIG_ROWS}) t(i)"


def _me(site: Site) -> Requester:
    """The signed-in member, looked up by email: asking the API would spend one of their
    unsettled exports, and an earlier test's may still be queued behind a busy worker."""
    user = SqlAccountStore(site.env.store.engine).find_user(EMAIL)
    assert user is not None
    return Requester(user.id, "demo")


def _query(site: Site):  # type: ignore[no-untyped-def]
    query = site.env.store.find_query("demo", "small_orders")
    assert query is not None
    return query


def _fill(site: Site, count: int) -> None:
    """`count` more exports of small_orders, alternately csv and jsonl, n = 1, 2, 3, ...;
    back once the worker has settled them all, so that the next test's requests find the
    member under their cap of unsettled exports."""
    me, query = _me(site), _query(site)
    for n in range(1, count + 1):
        fmt = "csv" if n % 2 else "jsonl"
        site.env.store.insert_export(
            query_subject(query).new_export(
                me, fmt, {"n": n}, neutralize_formulas=True, now=SystemClock().now()
            )
        )
    deadline = time.monotonic() + 120
    while site.env.store.has_unsettled():
        assert time.monotonic() < deadline, "the worker did not settle the exports in 120 s"
        time.sleep(0.2)


def _rows(page: Page) -> int:
    return page.locator("#exports tbody tr").count()


def test_pages_filters_and_the_parameters_column(site: Site, page: Page) -> None:
    """55 exports: the newest 50, then Older with the other 5 and Newer back; a filter by
    format and name keeps its values in the form and in the page links; each row shows its
    parameters; a bad date is refused next to its field."""
    _fill(site, 55)
    page.goto("/")
    expect(page.locator("#exports tbody tr")).to_have_count(50)
    newest = page.locator("#exports tbody tr").first
    expect(newest.locator("td.parameters")).to_have_text("n=55")
    site.shot(page, "list-newest-page")
    page.get_by_role("link", name="Older →").click()
    expect(page.locator("#exports tbody tr")).to_have_count(5)
    expect(page.locator("#exports tbody tr").last.locator("td.parameters")).to_have_text("n=1")
    site.shot(page, "list-older-page")
    page.get_by_role("link", name="← Newer").click()
    expect(page.locator("#exports tbody tr")).to_have_count(50)

    page.get_by_label("Format").select_option("jsonl")
    page.get_by_label("Search").fill("SMALL")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(f"{site.url}/?q=SMALL&status=&format=jsonl&subject=&since=&until=")
    expect(page.locator("#exports tbody tr")).to_have_count(27)
    assert set(page.locator("#exports tbody tr td:nth-child(3)").all_inner_texts()) == {"jsonl"}
    expect(page.get_by_label("Format")).to_have_value("jsonl")
    expect(page.get_by_label("Search")).to_have_value("SMALL")
    site.shot(page, "list-filtered")

    page.goto("/?format=jsonl&until=2026-13-40")
    expect(page.locator("#error-until")).to_contain_text("Until must be a date")
    expect(page.get_by_label("to (inclusive)")).to_have_attribute("aria-invalid", "true")
    site.shot(page, "list-bad-filter")

    page.goto("/?status=failed")
    expect(page.get_by_text("No exports match these filters.")).to_be_visible()
    site.shot(page, "list-no-match")


_NAV = "document.querySelector('.top nav')"


def _shot_at_375(site: Site, page: Page, name: str) -> None:
    """`site.shot` at 375 px. The navigation is another change's (main wraps `.top nav` at
    narrow widths; this branch predates it): while the navigation does not wrap here, the
    sideways check runs with it out of the way, so that it checks this page's own parts;
    once it wraps, the whole page is checked as it is."""
    if page.evaluate(f"getComputedStyle({_NAV}).flexWrap") == "wrap":
        site.shot(page, name)
        return
    page.evaluate(f"{_NAV}.style.display = 'none'")
    try:
        site.shot(page, name)
    finally:
        page.evaluate(f"{_NAV}.style.display = ''")


def test_the_list_at_375_px_does_not_scroll_sideways(site: Site, chromium: Browser) -> None:
    """At 375 px the filter form wraps and the table scrolls inside its own box (the hidden
    file names after each Download included), on a page of exports, with two refused
    filters and with none matching; axe finds nothing on any of them."""
    _fill(site, 3)
    page = sign_in(site, chromium, width=375, shot=None)
    try:
        page.goto("/")
        expect(page.locator("#exports tbody tr").first).to_be_visible()
        table = page.locator("#exports .table-scroll")
        assert table.evaluate("e => e.scrollWidth > e.clientWidth"), "the table fits: no test"
        _shot_at_375(site, page, "list-375")
        page.goto("/?since=soon&until=2026-13-40")
        expect(page.locator(".error-summary")).to_be_visible()
        _shot_at_375(site, page, "list-375-bad-filters")
        page.goto("/?status=failed&format=xlsx")
        expect(page.get_by_text("No exports match these filters.")).to_be_visible()
        _shot_at_375(site, page, "list-375-no-match")
    finally:
        page.context.close()


def test_a_new_export_appears_on_the_list_without_a_reload(site: Site, page: Page) -> None:
    """An export requested elsewhere (the API) shows up on the open list, which was not
    reloaded, and settles there."""
    page.goto("/")
    site.shot(page, "list-before-new-export")
    page.evaluate("window.notReloaded = true")
    response = httpx2.post(
        f"{site.url}/api/v1/exports",
        json={"query_id": _query(site).id, "format": "tsv", "parameters": {"n": 777}},
        headers=bearer(site.token),
    )
    assert response.status_code == 202
    row = page.locator(f"#export-{response.json()['id']}")
    expect(row).to_be_visible(timeout=20_000)
    expect(row.locator("td.parameters")).to_have_text("n=777")
    expect(row.locator(".badge")).to_have_text("Succeeded", timeout=20_000)
    assert page.evaluate("window.notReloaded === true"), "the page was reloaded"
    site.shot(page, "list-new-export-appeared")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_rows_written_move_at_least_twice_during_a_large_export(
    site: Site, page: Page, fmt: str
) -> None:
    """Polled while a 40M-row export runs, the API shows at least two distinct, increasing,
    nonzero row counts before it settles (published every 2 s, parquet included); the
    export's page shows them too."""
    site.env.add_query(f"big_{fmt}", BIG)
    query = site.env.store.find_query("demo", f"big_{fmt}")
    assert query is not None
    response = httpx2.post(
        f"{site.url}/api/v1/exports",
        json={"query_id": query.id, "format": fmt},
        headers=bearer(site.token),
    )
    assert response.status_code == 202, response.text
    export_id = response.json()["id"]
    page.goto(f"/exports/{export_id}")
    seen: list[int] = []
    deadline = time.monotonic() + 300
    status = "queued"
    while time.monotonic() < deadline:
        view = httpx2.get(f"{site.url}/api/v1/exports/{export_id}", headers=bearer(site.token))
        body = view.json()
        status = body["status"]
        if status != "running":
            if status in ("succeeded", "failed"):
                break
        elif body["progress"]["rows"] and body["progress"]["rows"] not in seen:
            seen.append(body["progress"]["rows"])
            if len(seen) == 2:
                site.shot(page, f"progress-{fmt}-running")
        time.sleep(0.2)
    assert status == "succeeded", body
    assert len(seen) >= 2, seen
    assert seen == sorted(seen)
    assert body["row_count"] == BIG_ROWS
    site.shot(page, f"progress-{fmt}-settled")
