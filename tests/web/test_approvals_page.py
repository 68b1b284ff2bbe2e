"""The approvals page without JavaScript, over the in-process API: an admin marks a query
sensitive on the policy page; a member's export of it waits on /approvals until another admin
approves it (the export is then made, the member's) or denies it (nothing is made, the reason
reaches the member); the four-eyes rule, another workspace and a viewer are refused on the
page, and nothing changes."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from qexport.domain.exports import ExportRecord
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS = "q-orders-acme"
ANN = "ann@acme.test"  # an editor
ADA = "ada@acme.test"  # an admin
BEA = "bea@acme.test"  # another admin
VIC = "vic@acme.test"  # a viewer
OLGA = "olga@other.test"  # an admin of another workspace
ASKED = (
    "Your request awaits an admin&#39;s approval: the workspace&#39;s policy marks this query"
    " sensitive."
)
POLICY = "/workspace/policy"


def _signed_in(api: Api, email: str, role: str, workspace: str = "acme") -> Browser:
    add_person(api, email, role, workspace)
    browser = Browser(TestClient(api.client.app))
    browser.sign_in(email)
    return browser


def _team(api: Api) -> dict[str, Browser]:
    """Ann, two admins, a viewer and an admin of another workspace, each signed in; the
    workspace has the `orders` and `public` queries, and `orders` is marked sensitive on
    the policy page by Ada."""
    api.add_query("orders")
    api.add_query("public")
    api.add_query("orders", workspace="other")
    people = {
        ANN: _signed_in(api, ANN, "editor"),
        ADA: _signed_in(api, ADA, "admin"),
        BEA: _signed_in(api, BEA, "admin"),
        VIC: _signed_in(api, VIC, "viewer"),
        OLGA: _signed_in(api, OLGA, "admin", "other"),
    }
    saved = _post(people[ADA], POLICY, public_links="on", sensitive_queries=[ORDERS])
    assert saved.status_code == 303, saved.text
    return people


def _post(browser: Browser, path: str, **data: Any) -> Any:
    token = csrf_of(browser.page("/approvals"))
    return browser.client.post(path, data={"csrf": token, **data}, follow_redirects=False)


def _ask(browser: Browser, since: str = "2024-01-10") -> str:
    """Request a csv of orders with the new-export form; the approval's id from where it lands."""
    subject = f"query:{ORDERS}"
    html = browser.page(f"/exports/new?subject={subject}")
    data = {"csrf": csrf_of(html), "subject": subject, "format": "csv", "p.since": since}
    response = browser.client.post("/exports/new", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    location = str(response.headers["location"])
    assert location.startswith("/approvals?notice=asked#approval-"), location
    return location.split("#approval-")[1]


def _decide(browser: Browser, approval_id: str, verb: str, reason: str = "") -> Any:
    return _post(browser, f"/approvals/{approval_id}/{verb}", reason=reason)


def _entry(html: str, approval_id: str) -> str:
    """The page's entry of one request (its <li>), or "" when the page does not show it."""
    found = re.search(rf'<li id="approval-{re.escape(approval_id)}".*?</li>', html, re.S)
    return found.group(0) if found else ""


def _section(html: str, heading_id: str) -> str:
    """The page from a section's heading to the next one."""
    start = html.index(f'<h2 id="{heading_id}">')
    end = html.find("<h2", start + 1)
    return html[start : end if end != -1 else None]


def _exports(api: Api) -> list[ExportRecord]:
    return api.context.exports.list_exports(workspace_id="acme", limit=10)


def test_a_sensitive_export_waits_until_another_admin_approves_it(api: Api) -> None:
    """The member lands on /approvals with the notice and their pending request, and nothing
    is exported; an admin sees it waiting, with who asked, the query's link, the format and
    parameters (the exports page says one waits, to both), and approves it: the export
    exists, the member's, and both see its link."""
    people = _team(api)
    approval_id = _ask(people[ANN])
    mine = people[ANN].page("/approvals?notice=asked")
    assert ASKED in mine
    entry = _entry(mine, approval_id)
    assert "Pending" in entry
    assert 'href="/queries/q-orders-acme">orders</a>' in entry
    assert "Approve" not in entry  # a member may only withdraw their request
    assert f'action="/approvals/{approval_id}/deny"' in entry
    assert "Sent to</dt><dd>nobody" in entry
    assert _exports(api) == []
    assert "1 of your export requests await an admin&#39;s approval." in people[ANN].page("/")
    assert "1 export request(s) of sensitive queries await your decision." in people[BEA].page("/")

    waiting = _section(people[BEA].page("/approvals"), "waiting")
    entry = _entry(waiting, approval_id)
    assert ANN in entry
    assert "<code>since</code> = 2024-01-10" in entry
    assert "<dd>csv</dd>" in entry
    assert f'action="/approvals/{approval_id}/approve"' in entry
    assert f'formaction="/approvals/{approval_id}/deny"' in entry

    approved = _decide(people[BEA], approval_id, "approve", reason="for the audit committee")
    assert approved.status_code == 303, approved.text
    assert approved.headers["location"] == f"/approvals?notice=approved#approval-{approval_id}"
    (export,) = _exports(api)
    assert export.requested_by == api.user_id(ANN)
    assert export.parameters == {"since": "2024-01-10"}
    after = people[BEA].page("/approvals?notice=approved")
    assert "Approved: the export is queued." in after
    assert _entry(_section(after, "waiting"), approval_id) == ""
    decided = _entry(_section(after, "settled"), approval_id)
    assert "Approved" in decided
    assert f'href="/exports/{export.id}"' in decided
    assert "for the audit committee" in decided
    entry = _entry(people[ANN].page("/approvals"), approval_id)
    assert "Approved by" in entry
    assert BEA in entry
    assert f'href="/exports/{export.id}"' in entry
    assert people[ANN].client.get(f"/exports/{export.id}").status_code == 200
    assert "await" not in people[BEA].page("/")  # nothing waits any more


def test_an_admin_may_not_approve_their_own_request(api: Api) -> None:
    """Ada's own request says another admin must approve it and offers only Withdraw; her
    approval posted anyway is refused with the four-eyes rule on the page (403) and makes no
    export; withdrawing it denies it."""
    people = _team(api)
    approval_id = _ask(people[ADA])
    entry = _entry(people[ADA].page("/approvals"), approval_id)
    assert "Yours: another admin must approve it." in entry
    assert "/approve" not in entry
    assert ">Withdraw</button>" in entry
    refused = _decide(people[ADA], approval_id, "approve")
    assert refused.status_code == 403
    assert "you cannot approve your own request: another admin must (four eyes)" in refused.text
    assert 'role="alert"' in refused.text
    assert _exports(api) == []
    withdrawn = _decide(people[ADA], approval_id, "deny")
    assert withdrawn.status_code == 303
    assert "Denied" in _entry(people[ADA].page("/approvals"), approval_id)
    assert _exports(api) == []


def test_a_member_withdraws_their_own_request(api: Api) -> None:
    """An editor's Withdraw denies their pending request: nothing is made, and it no longer
    waits for the admins."""
    people = _team(api)
    approval_id = _ask(people[ANN])
    withdrawn = _decide(people[ANN], approval_id, "deny")
    assert withdrawn.status_code == 303, withdrawn.text
    assert "Denied" in _entry(people[ANN].page("/approvals"), approval_id)
    assert _entry(_section(people[BEA].page("/approvals"), "waiting"), approval_id) == ""
    assert _exports(api) == []


def test_a_denied_request_makes_nothing_and_its_reason_reaches_the_requester(api: Api) -> None:
    """A reason longer than 500 characters is refused and kept as typed; the denial then
    makes no export, the member reads it with its reason, and deciding again is a 409 on
    the page."""
    people = _team(api)
    approval_id = _ask(people[ANN])
    too_long = _decide(people[BEA], approval_id, "deny", reason="x" * 501)
    assert too_long.status_code == 400
    assert "reason is at most 500 characters" in too_long.text
    entry = _entry(too_long.text, approval_id)
    assert "x" * 501 in entry  # kept as typed
    assert 'aria-invalid="true"' in entry
    denied = _decide(people[BEA], approval_id, "deny", reason="not for contractors")
    assert denied.status_code == 303
    assert "Denied." in people[BEA].page("/approvals?notice=denied")
    assert _exports(api) == []
    entry = _entry(people[ANN].page("/approvals"), approval_id)
    assert "Denied" in entry
    assert "not for contractors" in entry
    assert 'href="/exports/new"' in entry  # where to ask again
    assert 'href="/exports/' not in entry.replace('href="/exports/new"', "")  # no export
    again = _decide(people[ADA], approval_id, "approve")
    assert again.status_code == 409
    assert "the request was already denied" in again.text
    assert _exports(api) == []


def test_another_workspace_and_a_viewer_cannot_decide(api: Api) -> None:
    """An admin of another workspace approving the id gets a 404 page (it is not theirs to
    see); a viewer approving their own request gets a 403, someone else's a 404; the request
    stays pending and no export is made."""
    people = _team(api)
    approval_id = _ask(people[ANN])
    viewer_own = _ask(people[VIC])
    elsewhere = _decide(people[OLGA], approval_id, "approve")
    assert elsewhere.status_code == 404
    assert f"no approval request &#39;{approval_id}&#39;" in elsewhere.text
    assert _entry(people[OLGA].page("/approvals"), approval_id) == ""
    own = _decide(people[VIC], viewer_own, "approve")
    assert own.status_code == 403
    assert "only workspace admins may approve or deny export requests" in own.text
    assert _decide(people[VIC], approval_id, "approve").status_code == 404
    assert _decide(people[VIC], approval_id, "deny").status_code == 404
    assert _exports(api) == []
    waiting = _section(people[BEA].page("/approvals"), "waiting")
    assert "Pending" in _entry(waiting, approval_id)
    assert "Pending" in _entry(waiting, viewer_own)


def test_an_unanswered_request_expires_and_can_no_longer_be_approved(api: Api) -> None:
    """Past QEXPORT_APPROVAL_TTL the request is listed as expired among the decided ones;
    approving it then is a 409 saying it expired, and nothing is exported."""
    people = _team(api)
    approval_id = _ask(people[ANN])
    api.clock.advance(3 * 24 * 3600 + 1)
    bea = _signed_in(api, BEA, "admin")  # the earlier session is past its age
    html = bea.page("/approvals")
    assert _entry(_section(html, "waiting"), approval_id) == ""
    assert "Expired" in _entry(_section(html, "settled"), approval_id)
    refused = _decide(bea, approval_id, "approve")
    assert refused.status_code == 409
    assert "the request expired unanswered" in refused.text
    assert _exports(api) == []


def test_the_policy_page_ticks_the_sensitive_queries(api: Api) -> None:
    """The policy form lists the workspace's live queries (not another workspace's), ticks the
    sensitive ones, saves what is ticked, and clears them when none is; every member finds
    Approvals in the navigation."""
    people = _team(api)
    html = people[ADA].page(POLICY)
    boxes = re.findall(
        r'<input type="checkbox" id="sensitive-[^"]+" name="sensitive_queries"[^>]*>', html
    )
    assert len(boxes) == 2  # orders and public, of acme only
    assert any(f'value="{ORDERS}" checked' in b for b in boxes)
    assert any('value="q-public-acme">' in b for b in boxes)
    assert "exports of a ticked query, or of a report that holds one" in html
    assert api.context.accounts.workspace_policy("acme").sensitive_queries == {ORDERS}
    _post(people[ADA], POLICY, public_links="on", sensitive_queries=[ORDERS, "q-public-acme"])
    assert api.context.accounts.workspace_policy("acme").sensitive_queries == {
        ORDERS,
        "q-public-acme",
    }
    refused = _post(people[ADA], POLICY, public_links="on", sensitive_queries=["q-orders-other"])
    assert refused.status_code == 400
    assert "no query &#39;q-orders-other&#39; in this workspace" in refused.text
    cleared = _post(people[ADA], POLICY, public_links="on")
    assert cleared.status_code == 303
    assert api.context.accounts.workspace_policy("acme").sensitive_queries == frozenset()
    assert "checked" not in "".join(
        re.findall(r'<input type="checkbox" id="sensitive-[^>]*>', people[ADA].page(POLICY))
    )
    for browser in (people[ANN], people[VIC]):
        assert '<a href="/approvals">Approvals</a>' in browser.page("/")
