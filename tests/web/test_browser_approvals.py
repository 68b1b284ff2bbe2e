"""Sensitive queries in Debian's Chromium: an admin marks one on the policy page, the member's
export of it waits on the approvals page, another admin approves it there and the member
follows the link to the export; each state with no axe-core violation and no sideways
scrolling, wide and at 375 px."""

from __future__ import annotations

from qexport.clock import SystemClock
from qexport.services.accounts import add_user
from qexport.store.accounts import SqlAccountStore
from tests.web.browser import EMAIL, PASSWORD, Site, chromium, require_browser, sign_in, site

require_browser()

from playwright.sync_api import Browser, expect  # noqa: E402

__all__ = ["chromium", "site"]  # fixtures

ADA, BEA = "ada@example.com", "bea@example.com"  # the workspace's admins


def test_a_sensitive_export_waits_for_another_admins_approval(
    site: Site, chromium: Browser
) -> None:
    """Ada ticks small_orders as sensitive; the member's request of it lands on Approvals
    with the notice and nothing queued; Bea approves it with a reason from her Approvals
    page; the member then sees it approved and opens the export, which succeeds."""
    accounts = SqlAccountStore(site.env.store.engine)
    for admin in (ADA, BEA):
        add_user(accounts, SystemClock(), admin, workspace="demo", role="admin", password=PASSWORD)

    ada = sign_in(site, chromium, ADA, shot=None)
    ada.get_by_role("link", name="Policy", exact=True).click()
    sensitive = ada.get_by_role("group", name="Sensitive queries")
    sensitive.get_by_label("small_orders", exact=True).check()
    site.shot(ada, "policy-sensitive-queries")
    ada.get_by_role("button", name="Save the policy").click()
    expect(ada.get_by_text("The policy was saved.")).to_be_visible()
    expect(sensitive.get_by_label("small_orders", exact=True)).to_be_checked()
    ada.context.close()

    member = sign_in(site, chromium, shot=None)
    member.get_by_role("link", name="New export", exact=True).first.click()
    member.get_by_label("Query or report").select_option(label="small_orders")
    member.get_by_role("button", name="Show its options").click()
    member.get_by_role("button", name="Request export").click()
    expect(member.get_by_text("Your request awaits an admin's approval")).to_be_visible()
    request = member.locator("ul.approvals > li").first
    expect(request).to_contain_text("Pending")
    approval_id = (request.get_attribute("id") or "").removeprefix("approval-")
    assert member.url.endswith(f"#approval-{approval_id}")
    site.shot(member, "approvals-asked")

    bea = sign_in(site, chromium, BEA, shot=None)
    bea.get_by_role("link", name="Approvals", exact=True).click()
    waiting = bea.locator(f"#approval-{approval_id}")
    expect(waiting).to_contain_text(EMAIL)  # who asked
    site.shot(bea, "approvals-waiting")
    bea.set_viewport_size({"width": 375, "height": 700})
    site.shot(bea, "approvals-waiting-narrow")
    bea.set_viewport_size({"width": 1100, "height": 700})
    waiting.get_by_label("Reason").fill("for the quarterly review")
    waiting.get_by_role("button", name="Approve").click()
    expect(bea.get_by_text("Approved: the export is queued.")).to_be_visible()
    expect(bea.locator(f"#approval-{approval_id}")).to_contain_text("for the quarterly review")
    site.shot(bea, "approvals-approved")
    bea.context.close()

    member.reload()
    decided = member.locator(f"#approval-{approval_id}")
    expect(decided).to_contain_text("Approved by")
    decided.get_by_role("link", name="The export of small_orders").click()
    expect(member.locator("#export .status .badge")).to_have_text("Succeeded")
    member.context.close()
