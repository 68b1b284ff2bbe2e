"""The exports list page without JavaScript, as a hostile member would use it: filters,
parameters it does not offer and page links changed by hand never show anyone else's
exports."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi.testclient import TestClient

from qexport.domain.cursors import encode_page_cursor
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS = "query:q-orders-acme"


def _request_csv(browser: Browser) -> str:
    html = browser.page(f"/exports/new?subject={ORDERS}")
    data = {"csrf": csrf_of(html), "subject": ORDERS, "format": "csv"}
    response = browser.client.post("/exports/new", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    return str(response.headers["location"]).split("/exports/")[1].split("?")[0]


def test_a_viewer_sees_only_their_own_exports_whatever_the_address_says(
    api: Api, browser: Browser
) -> None:
    """A viewer's list never shows another member's export: not with `requested_by` (a
    filter the page offers admins only) naming them, an `id_prefix` or `q` that finds it,
    or a page link whose cursor was made up; a made-up cursor is said in words, with a way
    back to the newest exports."""
    ann = add_person(api, "ann@example.com", "viewer")
    add_person(api, "bob@example.com", "editor")
    api.add_query()
    browser.sign_in("ann@example.com")
    anns = _request_csv(browser)
    bob = Browser(TestClient(api.client.app))
    bob.sign_in("bob@example.com")
    bobs = _request_csv(bob)
    assert f"export-{bobs}" in bob.page("/")  # his own list shows it
    bob_id = api.user_id("bob@example.com")
    for params in (
        {},
        {"requested_by": bob_id},
        {"id_prefix": bobs[:8]},
        {"q": "orders"},
        {"cursor": encode_page_cursor((api.clock.now().replace(year=2100), "f" * 36))},
    ):
        html = browser.page(f"/?{urlencode(params)}")
        assert f"export-{bobs}" not in html, params
        assert f"/exports/{bobs}" not in html, params
    assert f"export-{anns}" in browser.page(f"/?{urlencode({'requested_by': bob_id})}")
    assert f"export-{anns}" not in bob.page(f"/?{urlencode({'requested_by': ann})}")
    tampered = browser.page("/?cursor=bm90LWEtY3Vyc29y")
    assert "This page&#39;s link was changed" in tampered
    assert '<a href="/">Show the newest exports.</a>' in tampered
    assert f"export-{anns}" not in tampered
