"""Quotas and rights through HTTP: run-now counts toward the unsettled cap, schedules and
links per workspace or export are bounded, a schedule's changer becomes its owner, and a
link stops when its creator may no longer share what it serves."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

from qexport.domain.accounts import Role
from qexport.domain.queries import Visibility
from qexport.services.schedules.tick import tick
from tests.api.conftest import Api

ALICE = "alice@acme.test"  # editor, the usual owner
ADMIN = "admin@acme.test"
ORDERS = "q-orders-acme"
HOURLY = {"query_id": ORDERS, "format": "csv", "cron": "0 * * * *", "timezone": "UTC"}


def _team(api: Api) -> Api:
    api.member(ALICE, "editor")
    api.member(ADMIN, "admin")
    api.add_query("orders")
    return api


def _problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


def _schedule(api: Api, who: str = ALICE, **changes: Any) -> dict[str, Any]:
    response = api.post("/api/v1/schedules", who, json={**HOURLY, **changes})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _patch(api: Api, schedule_id: str, who: str, **changes: Any) -> Any:
    return api.client.patch(
        f"/api/v1/schedules/{schedule_id}", headers=api.headers(who), json=changes
    )


def test_run_now_counts_toward_the_unsettled_cap(api_both: Api) -> None:
    """Run-now past the owner's unsettled cap is 429 with Retry-After, and creates nothing."""
    _team(api_both)
    schedule_id = _schedule(api_both)["id"]
    cap = api_both.context.settings.max_unsettled_per_user
    for _ in range(cap):
        assert api_both.post(f"/api/v1/schedules/{schedule_id}/run", ALICE).status_code == 202
        api_both.clock.advance(1)  # each run is its own due instant
    refused = api_both.post(f"/api/v1/schedules/{schedule_id}/run", ALICE)
    _problem(refused, 429, "too_many_requests")
    assert int(refused.headers["retry-after"]) > 0
    assert len(api_both.deps.exports.list_exports(workspace_id="acme", limit=100)) == cap
    # An admin running it runs it as its owner: the owner's cap.
    _problem(api_both.post(f"/api/v1/schedules/{schedule_id}/run", ADMIN), 429, "too_many_requests")


def test_a_due_time_whose_owner_is_at_the_cap_waits_for_a_later_pass(api_both: Api) -> None:
    """A scheduler pass leaves a due schedule of an owner at the unsettled cap unfired and
    still due; once the owner's exports settle, the next pass fires it."""
    _team(api_both)
    schedule = _schedule(api_both)
    cap = api_both.context.settings.max_unsettled_per_user
    for _ in range(cap):
        api_both.post("/api/v1/exports", ALICE, json={"query_id": ORDERS, "format": "csv"})
    api_both.clock.advance(3600)  # past the next due time
    grace = api_both.context.settings.schedule_grace

    def fire() -> list[str]:
        result = tick(
            api_both.deps.catalog,
            api_both.context.schedules,
            api_both.clock,
            grace=grace,
            max_unsettled=cap,
        )
        return [record.id for record in result.fired]

    assert fire() == []
    assert api_both.get(f"/api/v1/schedules/{schedule['id']}", ALICE).json() == schedule
    assert api_both.drain() == {"succeeded": cap}
    fired = fire()
    assert len(fired) == 1
    assert api_both.deps.exports.get_export(fired[0]) is not None


def test_a_cron_firing_more_often_than_the_minimum_interval_is_refused(api_both: Api) -> None:
    """Every minute, or two due times 2 minutes apart once a day, is 422 naming cron."""
    _team(api_both)
    for cron in ("* * * * *", "*/2 * * * *", "0,2 8 * * *"):
        response = api_both.post("/api/v1/schedules", ALICE, json={**HOURLY, "cron": cron})
        body = _problem(response, 422, "invalid_request")
        assert body["field"] == "cron"
        assert "at most once every 5m" in body["detail"]
    created = _schedule(api_both, cron="*/5 * * * *")
    body = _problem(
        _patch(api_both, created["id"], ALICE, cron="*/3 * * * *"), 422, "invalid_request"
    )
    assert body["field"] == "cron"
    assert api_both.get(f"/api/v1/schedules/{created['id']}", ALICE).json() == created


def test_a_workspace_has_at_most_the_schedule_limit(api_both: Api) -> None:
    """The schedule past the workspace's limit is 422 naming schedules; deleting one frees a
    place."""
    _team(api_both)
    limit = api_both.context.settings.max_schedules_per_workspace
    first = _schedule(api_both)
    template = api_both.context.schedules.get_schedule(first["id"])
    assert template is not None
    for _ in range(limit - 1):
        api_both.context.schedules.add_schedule(replace(template, id=str(uuid.uuid4())))
    body = _problem(api_both.post("/api/v1/schedules", ALICE, json=HOURLY), 422, "invalid_request")
    assert body["field"] == "schedules"
    assert f"at most {limit}" in body["detail"]
    assert api_both.delete(f"/api/v1/schedules/{first['id']}", ALICE).status_code == 204
    _schedule(api_both)


def test_changing_recipients_makes_the_changer_the_owner(api_both: Api) -> None:
    """An admin who changes a member's schedule's recipients becomes its owner: it then runs
    with the admin's rights; a change of the timetable alone leaves the owner as it was."""
    _team(api_both)
    schedule_id = _schedule(api_both)["id"]
    retimed = _patch(api_both, schedule_id, ADMIN, cron="30 * * * *")
    assert retimed.json()["owner"] == api_both.user_id(ALICE)
    changed = _patch(api_both, schedule_id, ADMIN, recipients=[{"email": "boss@example.com"}])
    assert changed.status_code == 200, changed.text
    assert changed.json()["owner"] == api_both.user_id(ADMIN)
    run = api_both.post(f"/api/v1/schedules/{schedule_id}/run", ADMIN)
    assert run.json()["requested_by"] == api_both.user_id(ADMIN)


def test_an_admin_who_cannot_read_the_subject_cannot_redirect_it(api_both: Api) -> None:
    """An admin outside a members-only query cannot change its schedule's recipients or
    parameters (404 as for the query), and the schedule keeps its owner and recipients."""
    _team(api_both)
    api_both.add_query(
        "secret",
        visibility=Visibility.MEMBERS,
        owner=api_both.user_id(ALICE),
        members=frozenset({api_both.user_id(ALICE)}),
    )
    created = _schedule(api_both, query_id="q-secret-acme", recipients=[{"email": "a@example.com"}])
    for change in (
        {"recipients": [{"webhook": "https://attacker.test/hook"}]},
        {"parameters": {"since": "2020-01-01"}},
    ):
        _problem(_patch(api_both, created["id"], ADMIN, **change), 404, "not_found")
    assert api_both.get(f"/api/v1/schedules/{created['id']}", ALICE).json() == created


def _succeeded_export(api: Api) -> str:
    response = api.post("/api/v1/exports", ALICE, json={"query_id": ORDERS, "format": "csv"})
    assert response.status_code == 202, response.text
    assert api.drain() == {"succeeded": 1}
    return str(response.json()["id"])


def _open(api: Api, url: str) -> Any:
    return api.client.get(urlparse(url).path, follow_redirects=False)


def test_an_export_has_at_most_the_link_limit(api_both: Api) -> None:
    """The link past the export's limit of live links is 422 naming it; revoking one frees a
    place."""
    _team(api_both)
    export_id = _succeeded_export(api_both)
    limit = api_both.context.settings.max_links_per_export
    made = [api_both.post(f"/api/v1/exports/{export_id}/links", ALICE) for _ in range(limit)]
    assert {r.status_code for r in made} == {201}
    body = _problem(
        api_both.post(f"/api/v1/exports/{export_id}/links", ALICE), 422, "invalid_request"
    )
    assert body["field"] == "links"
    assert f"at most {limit}" in body["detail"]
    assert api_both.delete(f"/api/v1/links/{made[0].json()['id']}", ALICE).status_code == 204
    assert api_both.post(f"/api/v1/exports/{export_id}/links", ALICE).status_code == 201


def test_an_admins_link_stops_when_the_admin_is_demoted(api_both: Api) -> None:
    """A link an admin made to a member's export is 410 once the admin is a viewer; the
    member's own link to it still works."""
    _team(api_both)
    export_id = _succeeded_export(api_both)
    admins = api_both.post(f"/api/v1/exports/{export_id}/links", ADMIN).json()
    owners = api_both.post(f"/api/v1/exports/{export_id}/links", ALICE).json()
    assert _open(api_both, admins["url"]).status_code == 200
    api_both.context.accounts.set_role("acme", api_both.user_id(ADMIN), Role.VIEWER)
    assert _open(api_both, admins["url"]).status_code == 410
    assert _open(api_both, owners["url"]).status_code == 200


def test_a_link_stops_when_its_creator_may_no_longer_read_the_query(api_both: Api) -> None:
    """Once the query is members-only without the link's creator, the link is 410."""
    _team(api_both)
    export_id = _succeeded_export(api_both)
    link = api_both.post(f"/api/v1/exports/{export_id}/links", ADMIN).json()
    query = api_both.deps.catalog.get_query(ORDERS)
    assert query is not None
    restricted = replace(
        query,
        visibility=Visibility.MEMBERS,
        owner=api_both.user_id(ALICE),
        members=frozenset({api_both.user_id(ALICE)}),
    )
    assert api_both.deps.catalog.update_query(restricted)
    assert _open(api_both, link["url"]).status_code == 410
