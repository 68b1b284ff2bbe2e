"""The export page without JavaScript, over the in-process API: statuses people read right,
progress, request again, public links, deliveries and send again, a schedule's recent runs,
and no bare 405 on any page form's URL; with who may do what."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

from qexport import bootstrap
from qexport.domain.accounts import Role
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import FailureCode
from qexport.domain.schedules import DeliveryStatus, parse_recipients
from qexport.services.requests import Admission, record_request
from qexport.web.link_flash import COOKIE as LINK_COOKIE
from tests.api.conftest import Api
from tests.support import queue_helpers
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS = "query:q-orders-acme"
ANN, BOB, ADA, VIOLA = "ann@example.com", "bob@example.com", "ada@example.com", "viola@example.com"
MALLORY = "mallory@other.example"
TEAM = "team@example.com"


def _request_csv(browser: Browser, since: str = "2024-01-10") -> str:
    html = browser.page(f"/exports/new?subject={ORDERS}")
    data = {"csrf": csrf_of(html), "subject": ORDERS, "format": "csv", "p.since": since}
    response = browser.client.post("/exports/new", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    return str(response.headers["location"]).split("/exports/")[1].split("?")[0]


def _signed_in(api: Api, email: str, role: str = "editor", workspace: str = "acme") -> Browser:
    add_person(api, email, role, workspace)
    browser = Browser(TestClient(api.client.app))
    browser.sign_in(email)
    return browser


def _post(browser: Browser, path: str, **data: str) -> Any:
    token = csrf_of(browser.page("/"))
    return browser.client.post(path, data={"csrf": token, **data}, follow_redirects=False)


def _with_notify(api: Api, who: str, *recipients: dict[str, str]) -> str:
    """An export of orders requested through the API with `notify` recipients, settled."""
    api.member(who, api.context.accounts.role_of("acme", api.user_id(who)) or "editor")
    body = {"query_id": "q-orders-acme", "format": "csv", "notify": list(recipients)}
    response = api.post("/api/v1/exports", who, json=body)
    assert response.status_code == 202, response.text
    api.drain()
    return str(response.json()["id"])


def _dispatch_without_smtp(api: Api) -> None:
    settings = replace(api.deps.settings, smtp_url="")
    dispatcher = bootstrap.dispatcher(api.deps, settings=settings)
    try:
        dispatcher.run_once()
    finally:
        dispatcher.close()


# ---------------------------------------------------------------- statuses and progress


def test_a_cancelled_export_reads_cancelled_in_a_neutral_badge(api: Api) -> None:
    """Cancelled is its own badge (not the red Failed), the API still says failed/cancelled."""
    api.add_query()
    ann = _signed_in(api, ANN)
    export_id = _request_csv(ann)
    assert 'class="badge badge-queued"' in ann.page(f"/exports/{export_id}")
    done = _post(ann, f"/exports/{export_id}/cancel", confirmed="yes")
    assert done.status_code == 303
    page = ann.page(f"/exports/{export_id}")
    assert (
        '<span class="badge badge-cancelled" data-announce="orders: Cancelled">Cancelled</span>'
        in page
    )
    assert "badge-failed" not in page
    assert "no file was made" in page
    assert ">Cancelled<" in ann.page("/")
    api.member(ANN, "editor")
    view = api.get(f"/api/v1/exports/{export_id}", ANN).json()
    assert (view["status"], view["failure"]["code"]) == ("failed", "cancelled")


def test_a_failed_export_shows_a_readable_reason_and_keeps_the_engines_words(api: Api) -> None:
    """A missing table fails with the readable reason on the page and in the API; the
    history keeps DuckDB's own message (its "Did you mean" included) behind a disclosure."""
    api.add_query("broken", sql="SELECT * FROM no_such_table", parameters=())
    ann = _signed_in(api, ANN)
    api.member(ANN, "editor")
    response = api.post("/api/v1/exports", ANN, json={"query_id": "q-broken-acme", "format": "csv"})
    export_id = response.json()["id"]
    api.drain()
    view = api.get(f"/api/v1/exports/{export_id}", ANN).json()
    assert view["failure"]["code"] == "query_invalid"
    assert "no_such_table does not exist" in view["failure"]["detail"]
    assert "pg_tables" not in view["failure"]["detail"]
    events = api.get(f"/api/v1/exports/{export_id}/events", ANN).json()["items"]
    assert 'Did you mean "pg_tables"?' in events[-1]["detail"]
    page = ann.page(f"/exports/{export_id}")
    status = page.split('<p class="status">')[1].split("</p>")[0]
    assert ">Failed<" in status
    assert "The query could not run." in status
    assert "no_such_table does not exist" in status
    assert "pg_tables" not in status
    assert "The source's full message" in page


def test_a_running_export_shows_rows_elapsed_time_and_rate(api: Api) -> None:
    """While running: rows written, time since it started and rows per second, and the
    notice that the page updates; settled, the time it took and no such notice."""
    api.add_query()
    ann = _signed_in(api, ANN)
    export_id = _request_csv(ann)
    page = ann.page(f"/exports/{export_id}?notice=requested")
    assert "The export was requested." in page
    assert "This page updates as it progresses." in page
    store, clock = api.deps.exports, api.clock
    claimed = queue_helpers.claim(
        store, export_id, worker_id="w", now=clock.now(), lease_seconds=60
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    clock.advance(125)
    assert store.heartbeat(
        export_id, claimed.lease_token, now=clock.now(), lease_seconds=60, progress_rows=250_000
    )
    page = ann.page(f"/exports/{export_id}")
    assert "250,000 rows written · 2 min 05 s · 2,000 rows/s" in page
    assert "<dt>Took</dt>" not in page
    assert "This page updates as it progresses." in page
    assert store.fail(
        export_id, claimed.lease_token, now=clock.now(), code=FailureCode.QUERY_TIMEOUT, detail="t"
    )
    settled = ann.page(f"/exports/{export_id}?notice=requested")
    assert "This page updates as it progresses." not in settled
    assert "<dt>Took</dt><dd>2 min 05 s</dd>" in settled
    assert "rows/s" not in settled


def test_an_expired_export_reads_expired_and_offers_only_request_again(api: Api) -> None:
    """Past its expiry (derived when read): Expired, no download, no link to create or
    revoke, and Request again, which makes a new export."""
    api.add_query()
    ann = _signed_in(api, ANN)
    export_id = _request_csv(ann)
    api.drain()
    _post(ann, f"/exports/{export_id}/links")
    api.clock.advance(8 * 24 * 3600)
    ann.sign_in(ANN)  # the session lasted 12 hours
    page = ann.page(f"/exports/{export_id}")
    assert (
        '<span class="badge badge-expired" data-announce="orders: Expired">Expired</span>' in page
    )
    assert f"/exports/{export_id}/download" not in page
    assert "Create a public link" not in page
    assert "/revoke" not in page
    again = _post(ann, f"/exports/{export_id}/again")
    assert again.status_code == 303
    assert again.headers["location"] != f"/exports/{export_id}?notice=requested"


# ---------------------------------------------------------------- request again


def test_request_again_makes_a_new_export_of_the_same_request(api: Api) -> None:
    """From a settled export: a new queued export of the same query, format, parameters and
    options, requested by whoever asked, on its own page; an admin asking again for Ann's
    export gets an export of their own."""
    api.add_query()
    ann = _signed_in(api, ANN)
    first = _request_csv(ann, since="2024-01-20")
    api.drain()
    response = _post(ann, f"/exports/{first}/again")
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.endswith("?notice=requested")
    second = location.split("/exports/")[1].split("?")[0]
    assert second != first
    old, new = api.deps.exports.get_export(first), api.deps.exports.get_export(second)
    assert old is not None
    assert new is not None
    assert new.status is Status.QUEUED
    assert (new.subject_id, new.format, new.parameters, new.options) == (
        old.subject_id,
        old.format,
        old.parameters,
        old.options,
    )
    assert new.parameters == {"since": "2024-01-20"}
    ada = _signed_in(api, ADA, "admin")
    api.drain()
    third = _post(ada, f"/exports/{first}/again").headers["location"].split("/exports/")[1]
    made = api.deps.exports.get_export(third.split("?")[0])
    assert made is not None
    assert made.requested_by == api.user_id(ADA)


def test_request_again_is_refused_with_a_clear_message(api: Api) -> None:
    """Unsettled: not offered, and refused (409) on its page; the query deleted: the page
    says so (404) and nothing is requested; someone else's export is the 404 page."""
    api.add_query()
    ann = _signed_in(api, ANN)
    export_id = _request_csv(ann)
    assert f'action="/exports/{export_id}/again"' not in ann.page(f"/exports/{export_id}")
    busy = _post(ann, f"/exports/{export_id}/again")
    assert busy.status_code == 409
    assert "still queued or running" in busy.text
    api.drain()
    assert f'action="/exports/{export_id}/again"' in ann.page(f"/exports/{export_id}")
    api.deps.catalog.delete_query("q-orders-acme")
    gone = _post(ann, f"/exports/{export_id}/again")
    assert gone.status_code == 404
    assert "the query &#39;orders&#39; was deleted, or you may no longer read it" in gone.text
    assert '<h1>orders <span class="muted">(csv)</span></h1>' in gone.text  # its own page
    assert len(api.deps.exports.list_exports(workspace_id="acme")) == 1
    bob = _signed_in(api, BOB)
    other = _post(bob, f"/exports/{export_id}/again")
    assert other.status_code == 404
    assert "Page not found" in other.text


# ---------------------------------------------------------------- public links


def test_links_are_listed_and_revoked_only_by_who_may(api: Api) -> None:
    """The page lists the links its viewer may revoke; a link's URL shows only in the session
    that made it, once; someone else's link or another workspace's is 404 on revoke."""
    api.add_query()
    ann = _signed_in(api, ANN)
    export_id = _request_csv(ann)
    api.drain()
    made = _post(ann, f"/exports/{export_id}/links")
    assert made.status_code == 303
    sealed = made.cookies.get(LINK_COOKIE)
    assert sealed
    assert "/p/" not in sealed  # sealed, not the URL in the clear
    ada = _signed_in(api, ADA, "admin")
    ada.client.cookies.set(LINK_COOKIE, sealed, path=f"/exports/{export_id}")
    admin_page = ada.page(f"/exports/{export_id}")
    assert "public-url" not in admin_page  # another session cannot open Ann's flash
    (link_id,) = re.findall(rf"/exports/{export_id}/links/([0-9a-f-]+)/revoke", admin_page)
    assert "ann@example.com" in admin_page.split('id="links"')[1]
    mallory = _signed_in(api, MALLORY, "admin", workspace="other")
    for who in (mallory,):
        assert who.client.get(f"/exports/{export_id}").status_code == 404
        revoke = _post(who, f"/exports/{export_id}/links/{link_id}/revoke", confirmed="yes")
        assert revoke.status_code == 404
    other = _request_csv(ann)
    api.drain()
    wrong_export = _post(ann, f"/exports/{other}/links/{link_id}/revoke", confirmed="yes")
    assert wrong_export.status_code == 404
    assert api.deps.accounts.list_links(export_id)[0].id == link_id
    done = _post(ada, f"/exports/{export_id}/links/{link_id}/revoke", confirmed="yes")
    assert done.status_code == 303
    assert api.deps.accounts.list_links(export_id) == []


# ---------------------------------------------------------------- deliveries


def test_deliveries_show_their_state_and_the_owner_sends_a_failed_one_again(api: Api) -> None:
    """An email with no SMTP server fails with its reason on the page; its owner gets Send
    again, which puts it back to waiting; a viewer who does not own it cannot see the page
    nor send it again."""
    api.add_query()
    ann = _signed_in(api, ANN)
    export_id = _with_notify(api, ANN, {"email": TEAM})
    waiting = ann.page(f"/exports/{export_id}")
    deliveries = waiting.split('id="deliveries"')[1]
    assert "data-unsettled" in deliveries.split(">")[0]
    assert ">Waiting<" in deliveries
    assert TEAM in deliveries
    _dispatch_without_smtp(api)
    page = ann.page(f"/exports/{export_id}")
    deliveries = page.split('id="deliveries"')[1]
    assert ">Failed<" in deliveries
    assert "email is not configured (set QEXPORT_SMTP_URL)" in deliveries
    (delivery,) = api.deps.deliveries.list_deliveries(export_id)
    action = f"/exports/{export_id}/deliveries/{delivery.id}/retry"
    assert f'action="{action}"' in deliveries
    viola = _signed_in(api, VIOLA, "viewer")
    assert viola.client.get(f"/exports/{export_id}").status_code == 404
    assert _post(viola, action).status_code == 404
    assert api.deps.deliveries.list_deliveries(export_id)[0].status is DeliveryStatus.FAILED
    again = _post(ann, action)
    assert again.status_code == 303
    assert again.headers["location"] == f"/exports/{export_id}?notice=sending-again#deliveries"
    page = ann.page(f"/exports/{export_id}?notice=sending-again")
    assert "The delivery is waiting to be sent again" in page
    assert ">Waiting<" in page.split('id="deliveries"')[1]
    assert "sent again by ann@example.com" in page


def test_a_demoted_owner_is_offered_no_send_again_for_a_webhook(api: Api) -> None:
    """An owner now a viewer sees the failed webhook, but no Send again; posting it anyway is
    refused on the page (403) and the delivery stays failed."""
    api.add_query()
    ann = _signed_in(api, ANN)
    # Saved before the workspace's rules applied to it: the server's policy refuses it now.
    record = record_request(
        api.deps.exports,
        api.deps.catalog,
        api.clock,
        Requester(api.user_id(ANN), "acme"),
        RequestExport(SubjectRef("query", "q-orders-acme", by_name=True), "csv"),
        Admission(notify=parse_recipients([{"webhook": "http://127.0.0.1:9/hook"}])),
    )
    api.drain()
    _dispatch_without_smtp(api)
    (delivery,) = api.deps.deliveries.list_deliveries(record.id)
    assert delivery.status is DeliveryStatus.FAILED
    api.deps.accounts.set_role("acme", api.user_id(ANN), Role.VIEWER)
    page = ann.page(f"/exports/{record.id}")
    assert ">Failed<" in page
    action = f"/exports/{record.id}/deliveries/{delivery.id}/retry"
    assert action not in page
    refused = _post(ann, action)
    assert refused.status_code == 403
    assert "only editors and admins may name webhooks" in refused.text
    assert api.deps.deliveries.list_deliveries(record.id)[0].status is DeliveryStatus.FAILED


# ---------------------------------------------------------------- a schedule's runs


def test_a_schedules_page_shows_its_runs_and_their_deliveries(api: Api) -> None:
    """The owner sees each run's due time, its export's badge linking to the export, and each
    recipient's delivery in full; a viewer who may read the query sees the runs with the
    recipients masked as the API masks them, no link to an export they cannot open and
    not its row count."""
    api.add_query()
    ann = _signed_in(api, ANN)
    api.member(ANN, "editor")
    created = api.post(
        "/api/v1/schedules",
        ANN,
        json={
            "query_id": "q-orders-acme",
            "format": "csv",
            "cron": "0 8 * * 1",
            "recipients": [{"email": TEAM}],
        },
    )
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    assert "It has not run yet." in ann.page(f"/schedules/{schedule_id}")
    run = _post(ann, f"/schedules/{schedule_id}/run")
    export_id = run.headers["location"].split("/exports/")[1].split("?")[0]
    api.drain()
    _dispatch_without_smtp(api)
    runs = ann.page(f"/schedules/{schedule_id}").split('id="runs"')[1]
    assert f'href="/exports/{export_id}"' in runs
    assert ">Succeeded<" in runs
    assert TEAM in runs
    assert ">Failed<" in runs
    assert "1 failed" in runs
    viola = _signed_in(api, VIOLA, "viewer")
    seen = viola.page(f"/schedules/{schedule_id}").split('id="runs"')[1]
    assert ">Succeeded<" in seen
    assert " rows, " in runs
    assert " rows, " not in seen  # what the owner's rights read is not for others to count
    assert "t***@example.com" in seen
    assert TEAM not in seen
    assert f'href="/exports/{export_id}"' not in seen
    mallory = _signed_in(api, MALLORY, "admin", workspace="other")
    assert mallory.client.get(f"/schedules/{schedule_id}").status_code == 404


# ---------------------------------------------------------------- no bare 405


def _page_routes(routes: list[BaseRoute]) -> Iterator[Any]:
    """Every route of the app, through the routers it includes."""
    for route in routes:
        inner = getattr(route, "original_router", None) or getattr(route, "app", None)
        nested = getattr(inner, "routes", None)
        if nested is not None and not hasattr(route, "endpoint"):
            yield from _page_routes(nested)
        else:
            yield route


def test_no_post_only_page_url_answers_a_bare_405(api: Api) -> None:
    """A GET of every POST-only page URL in the app redirects (303) to a page that opens, or
    shows the action's confirmation page; none is a 405 and none acts (the export is still
    running, its link still live)."""
    api.add_query()
    ann = _signed_in(api, ANN)
    api.member(ANN, "editor")
    export_id = _with_notify(api, ANN, {"email": TEAM})
    _dispatch_without_smtp(api)
    link = api.post(f"/api/v1/exports/{export_id}/links", ANN).json()
    running = _request_csv(ann)
    schedule = api.post(
        "/api/v1/schedules",
        ANN,
        json={"query_id": "q-orders-acme", "format": "csv", "cron": "0 8 * * 1"},
    ).json()
    report = api.post(
        "/api/v1/reports",
        ANN,
        json={"title": "R", "sections": [{"heading": "H", "query_id": "q-orders-acme"}]},
    ).json()
    (delivery,) = api.deps.deliveries.list_deliveries(export_id)
    live = api.deps.accounts.list_links(export_id)  # the delivery's link and Ann's
    values = {
        "export_id": running,
        "link_id": link["id"],
        "delivery_id": delivery.id,
        "schedule_id": schedule["id"],
        "query_id": "q-orders-acme",
        "report_id": report["id"],
    }
    methods: dict[str, set[str]] = {}
    for route in _page_routes(list(api.client.app.routes)):
        if getattr(route, "include_in_schema", True) is False and hasattr(route, "methods"):
            methods.setdefault(route.path, set()).update(route.methods or ())
    post_only = sorted(path for path, allowed in methods.items() if allowed == {"POST"})
    expected = {
        "/exports/{export_id}/cancel",
        "/exports/{export_id}/again",
        "/exports/{export_id}/links",
        "/exports/{export_id}/links/{link_id}/revoke",
        "/exports/{export_id}/deliveries/{delivery_id}/retry",
        "/schedules/{schedule_id}/run",
        "/sign-out",
    }
    assert expected <= set(post_only), post_only
    for template in post_only:
        path = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x"), template)
        if "{link_id}" in template:
            path = path.replace(running, export_id)  # the link is to the succeeded export
        response = ann.client.get(path, headers={"Accept": "text/html"}, follow_redirects=False)
        assert response.status_code != 405, template
        if response.status_code == 303:
            target = response.headers["location"]
            assert ann.client.get(target).status_code == 200, (template, target)
        else:
            assert response.status_code in (200, 404), (template, response.status_code)
            if response.status_code == 200:
                assert 'name="confirmed" value="yes"' in response.text, template
    assert api.deps.exports.get_export(running).status is Status.QUEUED  # type: ignore[union-attr]
    assert api.deps.accounts.list_links(export_id) == live
    assert link["id"] in {x.id for x in live}
    cancel = ann.client.get(f"/exports/{running}/cancel", follow_redirects=False)
    assert cancel.status_code == 200
    assert "Cancel the export of orders (csv)?" in cancel.text
    revoke = ann.client.get(f"/exports/{export_id}/links/{link['id']}/revoke")
    assert re.search(r"Revoke this public link to orders_\d{4}-\d{2}-\d{2}\.csv\?", revoke.text)
    links = ann.client.get(f"/exports/{export_id}/links", follow_redirects=False)
    assert (links.status_code, links.headers["location"]) == (303, f"/exports/{export_id}")
    signed_out = TestClient(api.client.app).get(
        f"/exports/{running}/cancel", follow_redirects=False
    )
    assert signed_out.status_code == 303
    assert signed_out.headers["location"].startswith("/sign-in?next=")
    api_405 = api.client.get(f"/api/v1/exports/{running}/cancel", headers=api.headers(ANN))
    assert api_405.status_code == 405  # the API keeps its problem document
