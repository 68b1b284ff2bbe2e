"""The workspace's policy page: members read the rules; admins change them with the form,
which refuses mistakes on their fields and keeps what was typed."""

from __future__ import annotations

from qexport.domain.policies import WorkspacePolicy
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

PATH = "/workspace/policy"


def _save(browser: Browser, **fields: object) -> object:
    token = csrf_of(browser.page(PATH))
    return browser.client.post(PATH, data={"csrf": token, **fields}, follow_redirects=False)


def test_an_admin_sets_the_policy_with_the_form(api: Api, browser: Browser) -> None:
    add_person(api, "ada@acme.test", "admin")
    browser.sign_in("ada@acme.test")
    page = browser.page(PATH)
    assert "<li>formats: any</li>" in page
    assert 'href="/workspace/policy"' in page  # in the main navigation
    response = _save(
        browser,
        limit_formats="on",
        formats=["csv", "parquet"],
        max_rows="10,000",
        link_max_days="2",
        retention_days="",
        recipient_domains="acme.test\nexample.org",
    )
    assert response.status_code == 303  # type: ignore[attr-defined]
    assert api.context.accounts.workspace_policy("acme") == WorkspacePolicy(
        formats=frozenset({"csv", "parquet"}),
        max_rows=10_000,
        public_links=False,  # the box was not ticked
        link_max_days=2,
        recipient_domains=("acme.test", "example.org"),
    )
    saved = browser.page(f"{PATH}?notice=saved")
    assert "The policy was saved." in saved
    assert "<li>public links: off</li>" in saved
    assert 'value="10000"' in saved


def test_mistakes_show_on_their_fields_and_nothing_is_saved(api: Api, browser: Browser) -> None:
    add_person(api, "ada@acme.test", "admin")
    browser.sign_in("ada@acme.test")
    response = _save(
        browser, limit_formats="on", max_rows="lots", retention_days="90", public_links="on"
    )
    assert response.status_code == 400  # type: ignore[attr-defined]
    html = response.text  # type: ignore[attr-defined]
    assert 'id="error-max_rows">a whole number, or empty for no limit' in html
    assert 'value="lots"' in html  # kept as typed
    assert api.context.accounts.workspace_policy("acme") == WorkspacePolicy()
    response = _save(browser, limit_formats="on", retention_days="90", public_links="on")
    html = response.text  # type: ignore[attr-defined]
    assert 'id="error-formats">formats is a non-empty list' in html
    assert 'id="error-retention_days">retention_days may not exceed the installation' in html


def test_a_member_reads_the_rules_without_a_form(api: Api, browser: Browser) -> None:
    add_person(api, "ed@acme.test", "editor")
    api.context.accounts.set_workspace_policy("acme", WorkspacePolicy(public_links=False))
    browser.sign_in("ed@acme.test")
    page = browser.page(PATH)
    assert "<li>public links: off</li>" in page
    assert 'id="policy-form"' not in page
    token = csrf_of(page)
    refused = browser.client.post(
        PATH, data={"csrf": token, "public_links": "on"}, follow_redirects=False
    )
    assert refused.status_code == 403
    assert api.context.accounts.workspace_policy("acme") == WorkspacePolicy(public_links=False)


def test_an_admin_marks_tables_one_a_line_and_may_revoke_the_links_shared(
    api: Api, browser: Browser
) -> None:
    """The page says what each source can report; a wrong line is refused naming its line,
    nothing saved; the rules read back one a line; ticking the box revokes the public link to
    a file of what the new policy marks sensitive, and the notice says how many."""
    add_person(api, "ada@acme.test", "admin")
    api.member("ed@acme.test", "editor")
    api.add_query("orders")
    export_id = api.post(
        "/api/v1/exports", "ed@acme.test", json={"query_id": "q-orders-acme", "format": "csv"}
    ).json()["id"]
    assert api.drain() == {"succeeded": 1}
    link = api.post(f"/api/v1/exports/{export_id}/links", "ed@acme.test").json()
    public = "/" + link["url"].split("/", 3)[3]
    browser.sign_in("ada@acme.test")
    page = browser.page(PATH)
    assert "shop: tables and columns" in page
    assert "Also revoke the public links already shared" in page

    refused = _save(browser, public_links="on", sensitive_tables="shop: main.orders\nnonsense")
    assert refused.status_code == 400  # type: ignore[attr-defined]
    html = refused.text  # type: ignore[attr-defined]
    assert "Line 2: &#39;nonsense&#39; is not a table" in html
    assert api.context.accounts.workspace_policy("acme") == WorkspacePolicy()

    saved = _save(
        browser,
        public_links="on",
        sensitive_tables="shop: Orders (AMOUNT, day)\n\n",
        revoke_links="on",
    )
    assert saved.status_code == 303  # type: ignore[attr-defined]
    assert saved.headers["location"] == f"{PATH}?notice=saved-1"  # type: ignore[attr-defined]
    after = browser.page(f"{PATH}?notice=saved-1")
    assert "The policy was saved; 1 public link was revoked." in after
    assert "shop: main.orders (amount, day)</textarea>" in after
    assert api.client.get(public).status_code == 410
