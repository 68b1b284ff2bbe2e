"""The audit trail of the pages: sign-ins (with the reason class of a refusal, never the
password) and downloads are recorded; /audit shows an admin their workspace's events."""

from __future__ import annotations

import json

from qexport.domain.audit import AuditFilter
from qexport.store.tables.audit import audit_events
from tests.api.conftest import Api
from tests.web.conftest import PASSWORD, Browser, add_person, csrf_of


def _sign_in_attempt(browser: Browser, email: str, password: str) -> int:
    token = csrf_of(browser.page("/sign-in"))
    response = browser.client.post(
        "/sign-in",
        data={"email": email, "password": password, "csrf": token, "next": "/"},
        follow_redirects=False,
    )
    return response.status_code


def _events(api: Api, action: str, workspace: str | None = "acme") -> list[dict[str, object]]:
    found = api.deps.audit.list_events(workspace_id=workspace, narrow=AuditFilter(action=action))
    return [
        {
            "workspace": e.workspace_id,
            "actor": (e.actor_kind, e.actor_id),
            "outcome": e.outcome,
            "details": json.loads(e.details),
        }
        for e in found
    ]


def test_sign_ins_are_recorded_with_the_reason_class_and_never_the_password(
    api: Api, browser: Browser
) -> None:
    """A wrong password, an unknown email and a success: one event each, refused ones with
    why; the unknown email is anonymous, on the installation's chain, and not kept."""
    ada = add_person(api, "ada@acme.test", "admin")
    assert _sign_in_attempt(browser, "ada@acme.test", "not-the-password-77") == 400
    assert _sign_in_attempt(browser, "nobody@acme.test", "guess-guess-88") == 400
    assert _sign_in_attempt(browser, "ada@acme.test", PASSWORD) == 303
    mine = _events(api, "sign_in")
    assert [(e["actor"], e["outcome"], e["details"]) for e in mine] == [
        (("user", ada), "ok", {"user_agent": "testclient"}),
        (("user", ada), "refused", {"reason": "wrong_password", "user_agent": "testclient"}),
    ]
    (unknown,) = _events(api, "sign_in", workspace="*")
    assert unknown["actor"] == ("anonymous", None)
    assert unknown["details"] == {"reason": "unknown_email", "user_agent": "testclient"}
    with api.deps.exports.engine.connect() as conn:  # type: ignore[attr-defined]
        text = json.dumps([[str(v) for v in row] for row in conn.execute(audit_events.select())])
    for secret in (PASSWORD, "not-the-password-77", "guess-guess-88", "nobody@acme.test"):
        assert secret not in text


def test_a_download_from_the_page_is_recorded_and_shown_on_the_audit_page(
    api: Api, browser: Browser
) -> None:
    """The export page's download is a file.downloaded event by the signed-in user; the
    admin's /audit lists it, filters by action, and others get 403."""
    ada = add_person(api, "ada@acme.test", "admin")
    add_person(api, "eve@acme.test", "editor")
    api.member("ada@acme.test", "admin")
    query = api.add_query("orders")
    response = api.post(
        "/api/v1/exports", "ada@acme.test", json={"query_id": query.id, "format": "csv"}
    )
    export_id = response.json()["id"]
    api.drain()
    browser.sign_in("ada@acme.test")
    download = browser.client.get(f"/exports/{export_id}/download")
    assert download.status_code == 200
    (event,) = _events(api, "file.downloaded")
    assert event["actor"] == ("user", ada)
    assert event["details"]["bytes"] == len(download.content)  # type: ignore[index]

    html = browser.page("/audit?action=file.downloaded")
    assert "file.downloaded" in html
    assert export_id in html
    assert "export.requested" not in html
    assert "export.requested" in browser.page("/audit")
    assert 'href="/audit"' in browser.page("/")  # the admin's navigation has it

    other = Browser(api.client.__class__(api.client.app))
    other.sign_in("eve@acme.test")
    assert other.client.get("/audit").status_code == 403
    assert 'href="/audit"' not in other.page("/")


def test_an_admin_saves_a_query_on_the_audit_trail_from_the_query_form(
    api: Api, browser: Browser
) -> None:
    """The new-query form offers the built-in `audit` source to admins, and saving a query on
    it works; an editor's form does not offer it."""
    add_person(api, "ada@acme.test", "admin")
    add_person(api, "eve@acme.test", "editor")
    api.add_query("orders")
    browser.sign_in("ada@acme.test")
    form = browser.page("/queries/new")
    assert '<option value="audit"' in form
    saved = browser.client.post(
        "/queries/new",
        data={
            "csrf": csrf_of(form),
            "name": "who downloaded",
            "source": "audit",
            "sql": "SELECT actor_id, target_id FROM audit_events WHERE action = 'file.downloaded'",
        },
        follow_redirects=False,
    )
    assert saved.status_code == 303, saved.text
    assert api.context.catalog.find_query("acme", "who downloaded") is not None

    editor = Browser(api.client.__class__(api.client.app))
    editor.sign_in("eve@acme.test")
    assert '<option value="audit"' not in editor.page("/queries/new")
