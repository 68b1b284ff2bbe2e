"""Subscribing oneself to a schedule through the API (SQLite and PostgreSQL metadata): any
member who may read its subject, without becoming its owner or changing anything else; each
run gets a delivery to their own address only while they may still read the subject, checked
when it fires and again when it is sent."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from qexport import bootstrap
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Visibility
from qexport.domain.schedules import DeliveryStatus
from qexport.services.schedules.tick import tick
from tests.api.conftest import Api

ALICE = "alice@acme.test"  # editor, the owner
VERA = "vera@acme.test"  # viewer, the subscriber
ADMIN = "admin@acme.test"
OTTO = "otto@other.test"  # another workspace's editor
ORDERS = "q-orders-acme"
MONDAYS = {
    "query_id": ORDERS,
    "format": "csv",
    "cron": "0 8 * * 1",
    "timezone": "Europe/Berlin",
    "recipients": [{"email": "ops@example.com"}],
}


@pytest.fixture
def subscriptions_team(api_both: Api) -> Api:
    api_both.member(ALICE, "editor")
    api_both.member(VERA, "viewer")
    api_both.member(ADMIN, "admin")
    api_both.member(OTTO, "editor", workspace="other")
    api_both.add_query("orders")
    return api_both


def _schedule(api: Api, **changes: Any) -> str:
    response = api.post("/api/v1/schedules", ALICE, json={**MONDAYS, **changes})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _subscription(schedule_id: str) -> str:
    return f"/api/v1/schedules/{schedule_id}/subscription"


def _read(api: Api, schedule_id: str, who: str) -> dict[str, Any]:
    response = api.get(f"/api/v1/schedules/{schedule_id}", who)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _fire(api: Api) -> str:
    """One scheduler pass a week on, with the subscribers checked: the export it fired."""
    api.clock.advance(7 * 24 * 3600)
    result = tick(
        api.deps.catalog,
        api.context.schedules,
        api.clock,
        grace=timedelta(days=8),
        accounts=api.context.accounts,
    )
    assert len(result.fired) == 1
    return result.fired[0].id


def _targets(api: Api, export_id: str) -> dict[str, str | None]:
    """The export's delivery targets, each with the subscriber it is for (None: a recipient
    the owner named)."""
    found = api.context.deliveries.list_deliveries(export_id)
    return {d.recipient.target: d.subscriber for d in found}


def test_a_viewer_subscribes_without_becoming_the_owner(subscriptions_team: Api) -> None:
    """200 with the address runs go to; the schedule says so to them (and not to its owner);
    its owner, recipients and everything else stay; subscribing again changes nothing."""
    schedule_id = _schedule(subscriptions_team)
    before = _read(subscriptions_team, schedule_id, ALICE)
    response = subscriptions_team.post(_subscription(schedule_id), VERA)
    assert response.status_code == 200, response.text
    assert response.json() == {"schedule_id": schedule_id, "subscribed": True, "email": VERA}
    assert subscriptions_team.post(_subscription(schedule_id), VERA).status_code == 200
    assert _read(subscriptions_team, schedule_id, VERA)["subscribed"] is True
    listed = subscriptions_team.get("/api/v1/schedules", VERA).json()["items"]
    assert [s["subscribed"] for s in listed] == [True]
    assert _read(subscriptions_team, schedule_id, ALICE) == before  # owner, recipients: untouched
    assert subscriptions_team.context.schedules.subscribers(schedule_id) == [
        subscriptions_team.user_id(VERA)
    ]


def test_a_subscriber_changes_nothing_else(subscriptions_team: Api) -> None:
    """Subscribing gives no say: the subscriber still may not change, pause or run it."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    patched = subscriptions_team.client.patch(
        f"/api/v1/schedules/{schedule_id}",
        headers=subscriptions_team.headers(VERA),
        json={"recipients": [{"email": VERA}]},
    )
    assert patched.status_code == 403
    assert subscriptions_team.post(f"/api/v1/schedules/{schedule_id}/run", VERA).status_code == 403


def test_the_owners_edits_keep_the_subscribers(subscriptions_team: Api) -> None:
    """The owner replaces the recipients and the cron: the subscriber is still subscribed and
    the next run still reaches them."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    patched = subscriptions_team.client.patch(
        f"/api/v1/schedules/{schedule_id}",
        headers=subscriptions_team.headers(ALICE),
        json={"recipients": [{"email": "boss@example.com"}], "cron": "0 9 * * 1"},
    )
    assert patched.status_code == 200, patched.text
    assert _read(subscriptions_team, schedule_id, VERA)["subscribed"] is True
    assert _targets(subscriptions_team, _fire(subscriptions_team)) == {
        "boss@example.com": None,
        VERA: subscriptions_team.user_id(VERA),
    }


def test_a_run_reaches_the_subscriber_with_the_owners_rights(subscriptions_team: Api) -> None:
    """A fired run (and Run now) records a delivery to the subscriber's own address beside
    the owner's recipients; the export is still the owner's."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    export_id = _fire(subscriptions_team)
    assert _targets(subscriptions_team, export_id) == {
        "ops@example.com": None,
        VERA: subscriptions_team.user_id(VERA),
    }
    record = subscriptions_team.deps.exports.get_export(export_id)
    assert record is not None
    assert record.requested_by == subscriptions_team.user_id(ALICE)
    ran = subscriptions_team.post(f"/api/v1/schedules/{schedule_id}/run", ALICE)
    assert ran.status_code == 202
    assert VERA in _targets(subscriptions_team, ran.json()["id"])


def test_an_address_the_owner_already_names_is_mailed_once(subscriptions_team: Api) -> None:
    """A subscriber whose address is among the recipients gets no second delivery."""
    schedule_id = _schedule(subscriptions_team, recipients=[{"email": VERA.upper()}])
    subscriptions_team.post(_subscription(schedule_id), VERA)
    assert list(_targets(subscriptions_team, _fire(subscriptions_team))) == [VERA.upper()]


def test_a_removed_subscriber_gets_nothing_from_the_next_run(subscriptions_team: Api) -> None:
    """Removed from the workspace, the subscriber is left out when the run fires."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    subscriptions_team.context.accounts.remove_member("acme", subscriptions_team.user_id(VERA))
    assert _targets(subscriptions_team, _fire(subscriptions_team)) == {"ops@example.com": None}


def test_a_subscriber_who_lost_the_query_is_left_out_when_it_fires(subscriptions_team: Api) -> None:
    """The query made members-only (the subscriber not among them): no delivery to them."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    _members_only(subscriptions_team)
    assert _targets(subscriptions_team, _fire(subscriptions_team)) == {"ops@example.com": None}


def _members_only(api: Api) -> None:
    query = api.deps.catalog.get_query(ORDERS)
    assert query is not None
    api.deps.catalog.update_query(replace(query, visibility=Visibility.MEMBERS))


def test_access_lost_between_firing_and_sending_is_not_sent(subscriptions_team: Api) -> None:
    """Fired while the subscriber could read the query, then made members-only before the
    delivery goes out: it fails access_lost, unsent, while the owner's recipient is tried."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    export_id = _fire(subscriptions_team)
    subscriptions_team.drain()
    _members_only(subscriptions_team)
    dispatcher = bootstrap.dispatcher(subscriptions_team.deps)
    try:
        assert dispatcher.run_once() == 2
    finally:
        dispatcher.close()
    found = {
        d.recipient.target: d
        for d in subscriptions_team.context.deliveries.list_deliveries(export_id)
    }
    mine = found[VERA]
    assert mine.status is DeliveryStatus.FAILED
    assert mine.failure_code is FailureCode.ACCESS_LOST
    assert mine.last_error == "not sent: the subscriber may not read this query"
    assert found["ops@example.com"].failure_code is not FailureCode.ACCESS_LOST


def test_who_may_not_subscribe(subscriptions_team: Api) -> None:
    """Another workspace's member and a member who may not read the (members-only) query see
    no schedule (404); an admin who sees it but may not read its query is refused (403); a
    query whose rows depend on who runs it ($user_id) cannot be subscribed to (409)."""
    schedule_id = _schedule(subscriptions_team)
    _members_only(subscriptions_team)
    assert subscriptions_team.post(_subscription(schedule_id), OTTO).status_code == 404
    assert subscriptions_team.post(_subscription(schedule_id), VERA).status_code == 404
    refused = subscriptions_team.post(_subscription(schedule_id), ADMIN)
    assert refused.status_code == 403
    assert "you may not read this query" in refused.json()["detail"]
    subscriptions_team.add_query(
        "mine", sql="SELECT * FROM orders WHERE customer = $user_id", parameters=()
    )
    mine = _schedule(subscriptions_team, query_id="q-mine-acme")
    per_person = subscriptions_team.post(_subscription(mine), VERA)
    assert per_person.status_code == 409
    assert "$user_id" in per_person.json()["detail"]
    assert subscriptions_team.context.schedules.subscribers(schedule_id) == []
    assert subscriptions_team.context.schedules.subscribers(mine) == []
    assert subscriptions_team.post(_subscription("no-such-schedule"), VERA).status_code == 404


def test_unsubscribing_ends_it_even_after_access_is_lost(subscriptions_team: Api) -> None:
    """204; the next run reaches the subscriber no more. A subscriber who can no longer see the
    schedule may still end their subscription; someone neither subscribed nor seeing it, or
    in another workspace, gets 404."""
    schedule_id = _schedule(subscriptions_team)
    subscriptions_team.post(_subscription(schedule_id), VERA)
    assert subscriptions_team.delete(_subscription(schedule_id), VERA).status_code == 204
    assert (
        subscriptions_team.delete(_subscription(schedule_id), VERA).status_code == 204
    )  # again: no-op
    assert _read(subscriptions_team, schedule_id, VERA)["subscribed"] is False
    assert VERA not in _targets(subscriptions_team, _fire(subscriptions_team))
    subscriptions_team.post(_subscription(schedule_id), VERA)
    _members_only(subscriptions_team)
    assert subscriptions_team.get(f"/api/v1/schedules/{schedule_id}", VERA).status_code == 404
    assert subscriptions_team.delete(_subscription(schedule_id), VERA).status_code == 204
    assert subscriptions_team.context.schedules.subscribers(schedule_id) == []
    assert subscriptions_team.delete(_subscription(schedule_id), VERA).status_code == 404
    assert subscriptions_team.delete(_subscription(schedule_id), OTTO).status_code == 404
