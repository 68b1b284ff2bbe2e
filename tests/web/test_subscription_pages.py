"""Subscribe and Unsubscribe on a schedule's page without JavaScript: a POST with the CSRF
field, back to the page with a notice; the list says which schedules are mailed to you; the
button is offered only where subscribing is allowed."""

from __future__ import annotations

import re
from dataclasses import replace

import httpx2

from qexport.domain.queries import Visibility
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS = "q-orders-acme"
MONDAYS = {"query_id": ORDERS, "format": "csv", "cron": "0 8 * * 1", "timezone": "UTC"}


def _schedule(api: Api, query_id: str = ORDERS) -> str:
    api.member("alice@acme.test", "editor")
    response = api.post(
        "/api/v1/schedules", "alice@acme.test", json={**MONDAYS, "query_id": query_id}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _press(browser: Browser, schedule_id: str, action: str) -> httpx2.Response:
    token = csrf_of(browser.page(f"/schedules/{schedule_id}"))
    return browser.client.post(
        f"/schedules/{schedule_id}/{action}", data={"csrf": token}, follow_redirects=False
    )


def _signed_in_viewer(api: Api, browser: Browser) -> None:
    add_person(api, "vic@example.com", "viewer")
    browser.sign_in("vic@example.com")
    api.add_query("orders")


def test_a_viewer_subscribes_and_unsubscribes_on_the_page(api: Api, browser: Browser) -> None:
    """The page offers Subscribe (saying the owner's rights still apply); pressing it comes
    back with a notice, "You are subscribed" and Unsubscribe; the list says "subscribed";
    Unsubscribe undoes it."""
    _signed_in_viewer(api, browser)
    schedule_id = _schedule(api)
    page = browser.page(f"/schedules/{schedule_id}")
    assert f'action="/schedules/{schedule_id}/subscribe"' in page
    assert "You do not become its owner" in page
    response = _press(browser, schedule_id, "subscribe")
    assert response.status_code == 303
    assert response.headers["location"] == f"/schedules/{schedule_id}?notice=subscribed"
    page = browser.page(response.headers["location"])
    assert "You are subscribed: each run&#39;s export is mailed to you too." in page
    assert "each run's export is mailed to vic@example.com too" in page
    assert ">Unsubscribe</button>" in page
    listed = browser.page("/schedules")
    assert re.search(
        rf'id="schedule-{schedule_id}".*?<td data-label="Mailed to you">subscribed</td>',
        listed,
        re.S,
    )
    response = _press(browser, schedule_id, "unsubscribe")
    assert response.headers["location"] == f"/schedules/{schedule_id}?notice=unsubscribed"
    assert ">Subscribe</button>" in browser.page(f"/schedules/{schedule_id}")
    assert api.context.schedules.subscribers(schedule_id) == []


def test_a_per_person_query_is_not_offered(api: Api, browser: Browser) -> None:
    """A schedule of a query that reads $user_id says why it cannot be subscribed to, with no
    button; a POST anyway is refused (409)."""
    _signed_in_viewer(api, browser)
    api.add_query("mine", sql="SELECT * FROM orders WHERE customer = $user_id", parameters=())
    schedule_id = _schedule(api, "q-mine-acme")
    page = browser.page(f"/schedules/{schedule_id}")
    assert "Subscribing is not offered: its rows depend on who runs it" in page
    assert f"/schedules/{schedule_id}/subscribe" not in page
    assert _press(browser, schedule_id, "subscribe").status_code == 409


def test_without_the_csrf_field_nothing_changes(api: Api, browser: Browser) -> None:
    """403, and no subscription."""
    _signed_in_viewer(api, browser)
    schedule_id = _schedule(api)
    response = browser.client.post(f"/schedules/{schedule_id}/subscribe", data={})
    assert response.status_code == 403
    assert api.context.schedules.subscribers(schedule_id) == []


def test_unsubscribing_from_a_schedule_no_longer_seen_leads_to_the_list(
    api: Api, browser: Browser
) -> None:
    """The query made members-only: the page is gone for the subscriber (404), yet their
    Unsubscribe still ends the subscription and leads to the schedules list."""
    _signed_in_viewer(api, browser)
    schedule_id = _schedule(api)
    token = csrf_of(browser.page(f"/schedules/{schedule_id}"))
    _press(browser, schedule_id, "subscribe")
    query = api.deps.catalog.get_query(ORDERS)
    assert query is not None
    api.deps.catalog.update_query(replace(query, visibility=Visibility.MEMBERS))
    assert browser.client.get(f"/schedules/{schedule_id}").status_code == 404
    response = browser.client.post(
        f"/schedules/{schedule_id}/unsubscribe", data={"csrf": token}, follow_redirects=False
    )
    assert response.headers["location"] == "/schedules?notice=unsubscribed"
    assert api.context.schedules.subscribers(schedule_id) == []


def test_the_buttons_address_opened_again_leads_to_the_page(api: Api, browser: Browser) -> None:
    """A GET of /subscribe (a reload) redirects to the schedule's page instead of 405."""
    _signed_in_viewer(api, browser)
    response = browser.client.get("/schedules/abc/subscribe", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/schedules/abc"
