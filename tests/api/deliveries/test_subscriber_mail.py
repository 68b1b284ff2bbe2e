"""A subscriber's copy of a schedule's run reaches a real SMTP server at their own address,
with a link that downloads the file, while they may read the subject; once they may not, no
mail goes to them (checked when the run fires and again when it is sent)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from qexport.domain.failures import FailureCode
from qexport.domain.queries import Visibility
from qexport.domain.schedules import DeliveryStatus
from tests.api.deliveries.env import ALICE, LINK, Deliveries

VERA = "vera@acme.test"  # a viewer, the subscriber
TEAM = "team@example.com"  # the owner's recipient
ORDERS = "q-orders-acme"


def _subscribed_schedule(env: Deliveries) -> str:
    """Alice's schedule mailing TEAM, and Vera subscribed to it."""
    api = env.api
    api.member(VERA, "viewer")
    body = {
        "query_id": ORDERS,
        "format": "csv",
        "cron": "0 8 * * 1",
        "timezone": "UTC",
        "recipients": [{"email": TEAM}],
    }
    created = api.post("/api/v1/schedules", ALICE, json=body)
    assert created.status_code == 201, created.text
    schedule_id = str(created.json()["id"])
    subscribed = api.post(f"/api/v1/schedules/{schedule_id}/subscription", VERA)
    assert subscribed.status_code == 200, subscribed.text
    return schedule_id


def _run(env: Deliveries, schedule_id: str) -> str:
    """Run now, as Alice (a minute on: one run an instant); the export settled by a worker."""
    env.api.clock.advance(60)
    response = env.api.post(f"/api/v1/schedules/{schedule_id}/run", ALICE)
    assert response.status_code == 202, response.text
    env.api.drain()
    return str(response.json()["id"])


def _members_only(env: Deliveries) -> None:
    catalog = env.api.deps.catalog
    query = catalog.get_query(ORDERS)
    assert query is not None
    catalog.update_query(replace(query, visibility=Visibility.MEMBERS))


def test_the_subscriber_gets_the_mail_at_their_own_address(deliveries: Deliveries) -> None:
    """One mail each to the owner's recipient and to the subscriber; the subscriber's says why
    they get it, and its link downloads the very file."""
    env = deliveries
    export_id = _run(env, _subscribed_schedule(env))
    assert env.dispatcher().run_once() == 2
    (mail,) = env.smtp.to(VERA)
    assert mail.message["Subject"] == "Export ready: orders (100 rows, csv)"
    assert "because you subscribed to the schedule" in mail.text
    (link,) = LINK.findall(mail.text)
    response = env.open_link(link)
    assert response.status_code == 200
    assert response.content == env.file(export_id)
    (team,) = env.smtp.to(TEAM)
    assert "subscribed" not in team.text
    statuses: dict[str, Any] = {t: d.status for t, d in env.of(export_id).items()}
    assert statuses == {TEAM: DeliveryStatus.SENT, VERA: DeliveryStatus.SENT}


def test_no_mail_once_the_subscriber_may_not_read_the_query(deliveries: Deliveries) -> None:
    """Made members-only before the run: no delivery for the subscriber at all. Made
    members-only between the run and the sending: their delivery fails access_lost, unsent.
    The owner's recipient gets both runs."""
    env = deliveries
    schedule_id = _subscribed_schedule(env)
    settled = _run(env, schedule_id)  # fired while Vera may read it
    _members_only(env)
    later = _run(env, schedule_id)
    assert set(env.of(later)) == {TEAM}
    assert env.dispatcher().run_once() == 3
    assert env.smtp.to(VERA) == []
    assert len(env.smtp.to(TEAM)) == 2
    refused = env.of(settled)[VERA]
    assert refused.status is DeliveryStatus.FAILED
    assert refused.failure_code is FailureCode.ACCESS_LOST


def test_no_mail_to_a_subscriber_removed_from_the_workspace(deliveries: Deliveries) -> None:
    """Removed after the run fired: nothing reaches them."""
    env = deliveries
    export_id = _run(env, _subscribed_schedule(env))
    env.api.context.accounts.remove_member("acme", env.api.user_id(VERA))
    assert env.dispatcher().run_once() == 2
    assert env.smtp.to(VERA) == []
    refused = env.of(export_id)[VERA]
    assert refused.last_error == "not sent: the subscriber is no longer a member of the workspace"
