"""The audit page in Debian's Chromium: an admin finds it in the navigation, reads the
trail (a download among it), narrows it by action, with no axe-core violation and no
sideways scrolling, wide or narrow."""

from __future__ import annotations

from qexport.clock import SystemClock
from qexport.domain.audit import Action
from qexport.services.accounts import add_user
from qexport.store.accounts import SqlAccountStore
from qexport.store.audit.log import SqlAuditLog
from tests.e2e.conftest import wait_for
from tests.web.browser import PASSWORD, Site, chromium, require_browser, sign_in, site
from tests.web.browser import request_export as _request

require_browser()

from playwright.sync_api import Browser, expect  # noqa: E402

__all__ = ["chromium", "site"]  # fixtures

ADMIN = "ada@example.com"


def _downloaded(site: Site, export_id: str) -> None:
    """Wait (up to 10 s) until the export's download is in the audit trail."""
    log = SqlAuditLog(site.env.store.engine)
    wait_for(
        lambda: any(
            event.target_id == export_id and event.action == Action.FILE_DOWNLOADED
            for event in log.chain("demo")
        ),
        timeout=10,
    )


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
    with page.expect_download() as download:
        page.get_by_role("link", name="Download").click()
    download.value.path()  # the whole file has arrived
    _downloaded(site, export_id)  # its event is written once the file has gone out
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
