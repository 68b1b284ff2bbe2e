"""The audit page in Debian's Chromium: an admin finds it in the navigation, reads the
trail (a download among it), narrows it by action, with no axe-core violation and no
sideways scrolling, wide or narrow."""

from __future__ import annotations

from qexport.clock import SystemClock
from qexport.services.accounts import add_user
from qexport.store.accounts import SqlAccountStore
from tests.web.browser import PASSWORD, Site, chromium, require_browser, sign_in, site
from tests.web.browser import request_export as _request

require_browser()

from playwright.sync_api import Browser, expect  # noqa: E402

__all__ = ["chromium", "site"]  # fixtures

ADMIN = "ada@example.com"


def test_an_admin_reads_and_narrows_the_audit_trail(site: Site, chromium: Browser) -> None:
    """The admin requests and downloads a file, then opens Audit from the navigation: the
    download and the request are listed; filtering by action keeps the download only."""
    add_user(
        SqlAccountStore(site.env.store.engine),
        SystemClock(),
        ADMIN,
        workspace="demo",
        role="admin",
        password=PASSWORD,
    )
    page = sign_in(site, chromium, ADMIN, shot=None)
    export_id = _request(page, "small_orders")
    expect(page.get_by_role("link", name="Download")).to_be_visible(timeout=60_000)
    with page.expect_download():
        page.get_by_role("link", name="Download").click()
    page.get_by_role("link", name="Audit", exact=True).click()
    expect(page.get_by_role("heading", name="Audit trail")).to_be_visible()
    table = page.locator("table")
    expect(table).to_contain_text("file.downloaded")
    expect(table).to_contain_text("export.requested")
    expect(table).to_contain_text(export_id)
    site.shot(page, "audit")
    page.get_by_label("Action").fill("file.downloaded")
    page.get_by_role("button", name="Filter").click()
    expect(table).to_contain_text("file.downloaded")
    expect(table).not_to_contain_text("export.requested")
    page.set_viewport_size({"width": 380, "height": 700})
    site.shot(page, "audit-narrow")
    page.context.close()
