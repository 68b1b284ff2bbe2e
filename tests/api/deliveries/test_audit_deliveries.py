"""The scheduler's and the dispatcher's work on record: a due schedule's export requested,
each delivery sent and each link it made, by the scheduler; never a webhook's URL."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from qexport.domain.audit import AuditFilter
from qexport.services.schedules.tick import tick
from tests.api.deliveries.env import ALICE, Deliveries

MAIL = "team@example.com"


def _events(env: Deliveries, action: str) -> list[dict[str, Any]]:
    found = env.api.deps.audit.list_events(workspace_id="acme", narrow=AuditFilter(action=action))
    return [
        {
            "actor": (e.actor_kind, e.actor_id),
            "target": (e.target_kind, e.target_id),
            "outcome": e.outcome,
            "details": json.loads(e.details),
        }
        for e in found
    ]


def test_each_delivery_sent_and_each_link_it_made_is_one_event_of_the_scheduler(
    deliveries: Deliveries,
) -> None:
    """Two recipients: two deliveries sent, two links made, each one event by the scheduler
    naming the delivery; the webhook is named by its host only."""
    env = deliveries
    hook = env.hooks.url("/hook?key=hook-secret")
    export = env.export({"email": MAIL}, {"webhook": hook})
    assert env.dispatcher().run_once() == 2
    sent = _events(env, "delivery.sent")
    assert len(sent) == 2
    assert {e["actor"] for e in sent} == {("scheduler", "scheduler")}
    assert {e["details"]["recipient"] for e in sent} == {MAIL, "webhook:127.0.0.1"}
    assert {e["details"]["export_id"] for e in sent} == {export.id}
    by_delivery = {d.id for d in env.api.context.deliveries.list_deliveries(export.id)}
    assert {e["target"][1] for e in sent} == by_delivery
    links = _events(env, "link.created")
    assert len(links) == 2
    assert {e["actor"] for e in links} == {("scheduler", "scheduler")}
    assert "hook-secret" not in json.dumps(sent + links)


def test_a_due_schedule_fires_an_export_requested_by_the_scheduler(
    deliveries: Deliveries,
) -> None:
    """The tick's export is one export.requested event whose actor is the scheduler and
    whose details name the schedule; creating the schedule was Alice's event."""
    env, api = deliveries, deliveries.api
    created = api.post(
        "/api/v1/schedules",
        ALICE,
        json={"query_id": "q-orders-acme", "format": "csv", "cron": "0 * * * *", "timezone": "UTC"},
    )
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    (made,) = _events(env, "schedule.created")
    assert made["actor"] == ("token", api.user_id(ALICE))
    api.clock.advance(3600)
    result = tick(api.deps.catalog, api.context.schedules, api.clock, grace=timedelta(minutes=5))
    (fired,) = result.fired
    (requested,) = _events(env, "export.requested")
    assert requested["actor"] == ("scheduler", "scheduler")
    assert requested["target"] == ("export", fired.id)
    assert requested["details"]["schedule_id"] == schedule_id
