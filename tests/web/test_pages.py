"""The web pages without JavaScript: forms and full page loads, over the in-process API."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS = "query:q-orders-acme"
_EXPORT_URL = re.compile(r"^/exports/([0-9a-f-]{36})")


def _request_csv(browser: Browser, **params: str) -> str:
    """Request the orders query as csv with the new-export form; the export's id."""
    html = browser.page(f"/exports/new?subject={ORDERS}")
    data = {"csrf": csrf_of(html), "subject": ORDERS, "format": "csv"}
    data.update({f"p.{k}": v for k, v in params.items()})
    response = browser.client.post("/exports/new", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    found = _EXPORT_URL.match(response.headers["location"])
    assert found
    return found.group(1)


def test_pages_send_a_signed_out_person_to_sign_in(api: Api, browser: Browser) -> None:
    """Without a session the exports page redirects to sign-in, remembering where to return."""
    response = browser.client.get("/exports/new", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/sign-in?next=%2Fexports%2Fnew"


def test_sign_in_refuses_a_wrong_password_an_unknown_email_and_a_non_member(
    api: Api, browser: Browser
) -> None:
    """Each failure shows the same message and no session; the right password signs in."""
    add_person(api, "ann@example.com")
    api.context.accounts.create_user(
        "nomember@example.com", password_hash=None, now=api.clock.now()
    )
    for email, password in (
        ("ann@example.com", "wrong"),
        ("nobody@example.com", "whatever"),
        ("nomember@example.com", ""),
        ("not an email", "x"),
    ):
        html = browser.page("/sign-in")
        response = browser.client.post(
            "/sign-in", data={"email": email, "password": password, "csrf": csrf_of(html)}
        )
        assert response.status_code == 400
        assert "The email or password is not right." in response.text
        assert browser.client.get("/", follow_redirects=False).status_code == 303
    browser.sign_in("ann@example.com")
    page = browser.page("/")
    assert "ann@example.com" in page
    assert "No exports yet" in page


def test_the_session_cookie_is_httponly_samesite_and_secure_over_https(api: Api) -> None:
    """The cookie cannot be read by scripts nor sent cross-site, and only over HTTPS when the
    page was served over HTTPS."""
    plain = api.client.get("/sign-in").headers["set-cookie"]
    assert "HttpOnly" in plain
    assert "SameSite=lax" in plain
    assert "Secure" not in plain
    with TestClient(api.client.app, base_url="https://testserver") as https:
        assert "Secure" in https.get("/sign-in").headers["set-cookie"]


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(api: Api, browser: Browser) -> None:
    """Forms are checked: a missing or foreign CSRF token is a 403 page and nothing happens."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    export_id = _request_csv(browser)
    for data in ({"confirmed": "yes"}, {"csrf": "forged", "confirmed": "yes"}):
        response = browser.client.post(f"/exports/{export_id}/cancel", data=data)
        assert response.status_code == 403
        assert "You may not do that" in response.text
        new = browser.client.post("/exports/new", data={**data, "subject": ORDERS, "format": "csv"})
        assert new.status_code == 403
    assert api.context.exports.get_export(export_id).status == "queued"  # type: ignore[union-attr]
    signed_out = TestClient(api.client.app)
    refused = signed_out.post("/sign-in", data={"email": "ann@example.com", "password": "x"})
    assert refused.status_code == 403


def test_someone_elses_export_is_a_404_page(api: Api, browser: Browser) -> None:
    """Another member's export, its file and its cancel form look like a missing page."""
    add_person(api, "ann@example.com")
    add_person(api, "bob@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    export_id = _request_csv(browser)
    bob = Browser(TestClient(api.client.app))
    bob.sign_in("bob@example.com")
    for path in (f"/exports/{export_id}", f"/exports/{export_id}/download"):
        response = bob.client.get(path)
        assert response.status_code == 404
        assert "Page not found" in response.text
    token = csrf_of(bob.page("/"))
    for confirmed in ("", "yes"):
        data = {"csrf": token, "confirmed": confirmed}
        assert bob.client.post(f"/exports/{export_id}/cancel", data=data).status_code == 404
    assert export_id not in bob.page("/")


def test_an_invalid_parameter_is_shown_next_to_its_field(api: Api, browser: Browser) -> None:
    """A date that is not a date re-renders the form with the message tied to the input."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    html = browser.page(f"/exports/new?subject={ORDERS}")
    assert 'type="date"' in html
    response = browser.client.post(
        "/exports/new",
        data={"csrf": csrf_of(html), "subject": ORDERS, "format": "csv", "p.since": "soon"},
    )
    assert response.status_code == 400
    assert 'id="error-param-since"' in response.text
    assert 'aria-describedby=" error-param-since" aria-invalid="true"' in response.text
    assert "must be a date" in response.text
    assert api.context.exports.list_exports(workspace_id="acme", limit=5) == []


def test_without_javascript_a_person_requests_and_downloads_a_csv(
    api: Api, browser: Browser
) -> None:
    """Sign in, request with the form, let a worker run it, and download through the page's
    link: the bytes are the API's download."""
    add_person(api, "ann@example.com")
    api.member("ann@example.com", "editor")
    api.add_query()
    browser.sign_in("ann@example.com")
    export_id = _request_csv(browser, since="2024-01-10")
    page = browser.page(f"/exports/{export_id}?notice=requested")
    assert ">Queued<" in page
    api.drain()
    page = browser.page("/")
    assert ">Succeeded<" in page
    assert "expires in 7 days" in page
    link = f"/exports/{export_id}/download"
    assert f'href="{link}"' in page
    downloaded = browser.client.get(link)
    assert downloaded.status_code == 200
    from_api = api.get(f"/api/v1/exports/{export_id}/file", "ann@example.com")
    assert downloaded.content == from_api.content
    assert downloaded.content.startswith(b"id,customer,amount,day")


def test_a_public_link_is_created_shown_once_and_revoked(api: Api, browser: Browser) -> None:
    """Creating a link redirects to the export's page (POST-redirect-GET), which shows its URL
    once; a reload shows it no more and makes no other link, and the page lists it; revoking
    it (after the question) makes it invalid."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    export_id = _request_csv(browser)
    api.drain()
    token = csrf_of(browser.page(f"/exports/{export_id}"))
    created = browser.client.post(
        f"/exports/{export_id}/links", data={"csrf": token}, follow_redirects=False
    )
    assert created.status_code == 303
    assert created.headers["location"] == f"/exports/{export_id}"
    shown = browser.page(f"/exports/{export_id}")
    url = re.search(r'id="public-url" type="text" readonly value="([^"]+)" autofocus', shown)
    assert url
    path = url.group(1).removeprefix("http://127.0.0.1:8000")
    assert TestClient(api.client.app).get(path).status_code == 200
    reloaded = browser.page(f"/exports/{export_id}")
    assert "public-url" not in reloaded
    assert url.group(1) not in reloaded
    revoke = re.findall(rf'action="(/exports/{export_id}/links/[^"]+/revoke)"', reloaded)
    assert len(revoke) == 1  # the one link, listed; the reload made no other
    asked = browser.client.post(revoke[0], data={"csrf": token})
    assert re.search(r"Revoke this public link to orders_\d{4}-\d{2}-\d{2}\.csv\?", asked.text)
    assert TestClient(api.client.app).get(path).status_code == 200
    done = browser.client.post(revoke[0], data={"csrf": token, "confirmed": "yes"})
    assert "The public link was revoked" in done.text
    assert "No live public links" in done.text
    gone = TestClient(api.client.app).get(path)
    assert gone.status_code == 410
    assert "This link is not valid" in gone.text


def test_unknown_pages_are_html_for_browsers_and_problems_for_the_api(api: Api) -> None:
    """A browser gets the 404 page in the site's style; the API keeps its problem JSON."""
    page = api.client.get("/no/such/page", headers={"Accept": "text/html"})
    assert page.status_code == 404
    assert "Page not found" in page.text
    assert page.headers["content-type"].startswith("text/html")
    problem = api.client.get("/api/v1/nothing", headers={"Accept": "text/html"})
    assert problem.headers["content-type"] == "application/problem+json"


def test_pages_are_not_in_the_openapi_schema(api: Api) -> None:
    """The web routes are for people; the published API schema lists only the API."""
    paths = api.client.get("/openapi.json").json()["paths"]
    assert not [
        p for p in paths if not p.startswith(("/api/", "/p/", "/healthz", "/readyz", "/metrics"))
    ]


def test_a_report_is_requested_with_its_open_parameters(api: Api, browser: Browser) -> None:
    """Choosing a report offers the report formats and an input per parameter its sections
    leave open; the requested export runs to succeeded."""
    add_person(api, "ann@example.com")
    api.member("ann@example.com", "editor")
    query = api.add_query()
    created = api.post(
        "/api/v1/reports",
        "ann@example.com",
        json={
            "title": "Orders review",
            "sections": [{"heading": "Orders", "query_id": query.id, "display": "table"}],
        },
    )
    assert created.status_code == 201, created.text
    subject = f"report:{created.json()['id']}"
    browser.sign_in("ann@example.com")
    html = browser.page(f"/exports/new?subject={subject}")
    assert re.findall(r'<option value="(\w+)"', html) == ["html", "pdf", "xlsx"]
    assert 'id="param-since" name="p.since" type="date"' in html
    response = browser.client.post(
        "/exports/new",
        data={"csrf": csrf_of(html), "subject": subject, "format": "html", "p.since": "2024-01-20"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    api.drain()
    page = browser.page(response.headers["location"])
    assert ">Succeeded<" in page
    assert 'href="/exports/' in page
    assert "Download Orders-review.html" in page


def test_an_admin_sees_the_workspaces_exports_and_a_viewer_only_their_own(
    api: Api, browser: Browser
) -> None:
    """The same rule as the API: an admin's list has every member's exports."""
    add_person(api, "ann@example.com", "viewer")
    add_person(api, "ada@example.com", "admin")
    api.add_query()
    browser.sign_in("ann@example.com")
    export_id = _request_csv(browser)
    admin = Browser(TestClient(api.client.app))
    admin.sign_in("ada@example.com")
    assert f'href="/exports/{export_id}"' in admin.page("/")
    assert ">Queued<" in admin.page(f"/exports/{export_id}")


def test_sign_out_ends_the_session(api: Api, browser: Browser) -> None:
    """After signing out (a form with its CSRF token), pages ask to sign in again."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    token = csrf_of(browser.page("/"))
    response = browser.client.post("/sign-out", data={"csrf": token}, follow_redirects=False)
    assert response.headers["location"] == "/sign-in"
    assert browser.client.get("/", follow_redirects=False).status_code == 303


def test_an_unexpected_error_is_a_500_page_that_tells_nothing_more(
    api: Api, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure inside a page is the 500 page in the site's style, without the error's text."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")

    def broken(**_kwargs: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(api.context.exports, "list_exports", broken)
    response = browser.client.get("/", headers={"Accept": "text/html"})
    assert response.status_code == 500
    assert "Something went wrong" in response.text
    assert "secret internals" not in response.text


def test_cancel_asks_first_without_javascript(api: Api, browser: Browser) -> None:
    """Cancel posted without `confirmed=yes` (a browser without JavaScript) answers with a
    page asking first and changes nothing; its red button, posted, cancels the export."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    export_id = _request_csv(browser)
    token = csrf_of(browser.page(f"/exports/{export_id}"))
    asked = browser.client.post(f"/exports/{export_id}/cancel", data={"csrf": token})
    assert asked.status_code == 200
    assert "Cancel the export of orders (csv)?" in asked.text
    assert 'class="danger">Cancel the export</button>' in asked.text
    assert f'href="/exports/{export_id}">Keep it</a>' in asked.text
    assert api.context.exports.get_export(export_id).status == "queued"  # type: ignore[union-attr]
    done = browser.client.post(
        f"/exports/{export_id}/cancel",
        data={"csrf": csrf_of(asked.text), "confirmed": "yes", "back": "detail"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/exports/{export_id}?notice=cancelled"
    assert api.context.exports.get_export(export_id).failure_code == "cancelled"  # type: ignore[union-attr]
