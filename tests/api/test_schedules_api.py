"""The schedules API through HTTP: create, read, list, change, pause, resume, delete and run
now, who may do which, and the deliveries an export (scheduled or not) gets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from qexport.domain.queries import Visibility
from qexport.domain.reports import Report, Section
from qexport.services.schedules.tick import tick
from tests.api.conftest import Api

ALICE = "alice@acme.test"  # editor, the usual owner
BOB = "bob@acme.test"  # another editor
VERA = "vera@acme.test"  # viewer
ADMIN = "admin@acme.test"
OTTO = "otto@other.test"  # an editor of another workspace
ORDERS = "q-orders-acme"
MONDAYS = {"query_id": ORDERS, "format": "csv", "cron": "0 8 * * 1", "timezone": "Europe/Berlin"}
DAY = 24 * 3600


def _team(api: Api) -> Api:
    api.member(ALICE, "editor")
    api.member(BOB, "editor")
    api.member(VERA, "viewer")
    api.member(ADMIN, "admin")
    api.member(OTTO, "editor", workspace="other")
    api.add_query("orders")
    return api


def _create(api: Api, who: str = ALICE, **changes: Any) -> dict[str, Any]:
    response = api.post("/api/v1/schedules", who, json={**MONDAYS, **changes})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _patch(api: Api, schedule_id: str, who: str, **changes: Any) -> Any:
    return api.client.patch(
        f"/api/v1/schedules/{schedule_id}", headers=api.headers(who), json=changes
    )


def _fired(api: Api) -> list[str]:
    """One scheduler pass: the ids of the exports it fired."""
    result = tick(api.deps.catalog, api.context.schedules, api.clock, grace=timedelta(minutes=1))
    return [record.id for record in result.fired]


def _problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


def test_a_schedule_is_created_read_listed_changed_and_deleted(api: Api) -> None:
    """201 with Location and the schedule as documented (the owner is the creator, the first
    run the next Monday 08:00 in Berlin: 07:00 UTC in winter); a change of cron moves the next
    run; after DELETE the schedule is gone for everyone."""
    _team(api)
    response = api.post(
        "/api/v1/schedules",
        ALICE,
        json={
            **MONDAYS,
            "parameters": {"since": "2024-01-20"},
            "recipients": [{"email": "ops@example.com"}, {"webhook": "https://hooks.test/x"}],
        },
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert response.headers["location"] == f"/api/v1/schedules/{created['id']}"
    assert created == {
        "id": created["id"],
        "query_id": ORDERS,
        "report_id": None,
        "format": "csv",
        "parameters": {"since": "2024-01-20"},
        "cron": "0 8 * * 1",
        "timezone": "Europe/Berlin",
        "recipients": [{"email": "ops@example.com"}, {"webhook": "https://hooks.test/x"}],
        "missed": "once",
        "enabled": True,
        "options": {"neutralize_formulas": True},
        "owner": api.user_id(ALICE),
        "next_run_at": "2026-01-12T07:00:00Z",  # the frozen clock is Monday 2026-01-05 09:00Z
        "created_at": "2026-01-05T09:00:00Z",
        "subscribed": False,
        "filename_template": None,  # its exports are named by the query's template
    }
    masked = [{"email": "o***@example.com"}, {"webhook": "https://hooks.test/***"}]
    assert api.get(response.headers["location"], VERA).json() == {
        **created,
        "recipients": masked,  # a member who does not manage it sees no full recipient
    }
    assert [s["id"] for s in api.get("/api/v1/schedules", VERA).json()["items"]] == [created["id"]]

    changed = _patch(api, created["id"], ALICE, cron="30 6 * * *", missed="skip")
    assert changed.status_code == 200, changed.text
    assert changed.json()["next_run_at"] == "2026-01-06T05:30:00Z"
    assert changed.json()["missed"] == "skip"
    assert changed.json()["recipients"] == created["recipients"]  # untouched members stay

    assert api.delete(f"/api/v1/schedules/{created['id']}", ALICE).status_code == 204
    _problem(api.get(f"/api/v1/schedules/{created['id']}", ALICE), 404, "not_found")
    assert api.get("/api/v1/schedules", ALICE).json()["items"] == []


def test_next_run_is_on_the_wall_clock_of_the_time_zone(api: Api) -> None:
    """The same cron gives different UTC instants in different zones; without a time zone the
    workspace's is used (UTC when it has none)."""
    _team(api)
    # 09:00 UTC is 04:00 in New York: this Monday's 08:00 is still to come there.
    assert _create(api, timezone="America/New_York")["next_run_at"] == "2026-01-05T13:00:00Z"
    assert _create(api, timezone="Asia/Kolkata")["next_run_at"] == "2026-01-12T02:30:00Z"
    utc = _create(api, timezone=None)
    assert (utc["timezone"], utc["next_run_at"]) == ("UTC", "2026-01-12T08:00:00Z")
    api.context.accounts.set_workspace_timezone("acme", "Europe/Berlin")
    berlin = api.post("/api/v1/schedules", ALICE, json={**MONDAYS, "timezone": None}).json()
    assert (berlin["timezone"], berlin["next_run_at"]) == ("Europe/Berlin", "2026-01-12T07:00:00Z")


def test_viewers_read_but_do_not_write(api: Api) -> None:
    """A viewer lists and reads schedules but creating one is 403 and nothing is saved."""
    _team(api)
    created = _create(api)
    assert api.get(f"/api/v1/schedules/{created['id']}", VERA).status_code == 200
    _problem(api.post("/api/v1/schedules", VERA, json=MONDAYS), 403, "forbidden")
    assert len(api.get("/api/v1/schedules", ADMIN).json()["items"]) == 1


def test_only_the_owner_or_an_admin_manages_a_schedule(api: Api) -> None:
    """Another editor (or a viewer) sees the schedule but changing, running or deleting it is
    403; a workspace admin may do all of it, and the owner stays the creator."""
    _team(api)
    schedule_id = _create(api)["id"]
    path = f"/api/v1/schedules/{schedule_id}"
    for who in (BOB, VERA):
        _problem(_patch(api, schedule_id, who, enabled=False), 403, "forbidden")
        _problem(api.post(f"{path}/run", who), 403, "forbidden")
        _problem(api.delete(path, who), 403, "forbidden")
    assert api.get(path, ALICE).json()["enabled"] is True
    assert api.deps.exports.list_exports(workspace_id="acme") == []

    paused = _patch(api, schedule_id, ADMIN, enabled=False)
    assert paused.status_code == 200
    assert paused.json()["owner"] == api.user_id(ALICE)
    run = api.post(f"{path}/run", ADMIN)
    assert run.status_code == 202
    assert run.json()["requested_by"] == api.user_id(ALICE)  # the owner's rights
    assert api.delete(path, ADMIN).status_code == 204


def test_schedules_of_another_workspace_or_deleted_ones_are_404(api: Api) -> None:
    """Someone of another workspace gets 404 for every route of a schedule, as for an id
    never issued; so does the owner once the schedule is deleted."""
    _team(api)
    schedule_id = _create(api)["id"]
    path = f"/api/v1/schedules/{schedule_id}"
    _problem(api.get(path, OTTO), 404, "not_found")
    _problem(_patch(api, schedule_id, OTTO, enabled=False), 404, "not_found")
    _problem(api.post(f"{path}/run", OTTO), 404, "not_found")
    _problem(api.delete(path, OTTO), 404, "not_found")
    assert api.get("/api/v1/schedules", OTTO).json()["items"] == []

    assert api.delete(path, ALICE).status_code == 204
    _problem(_patch(api, schedule_id, ALICE, enabled=True), 404, "not_found")
    _problem(api.post(f"{path}/run", ALICE), 404, "not_found")
    _problem(api.delete(path, ALICE), 404, "not_found")


def test_a_schedule_of_a_query_you_cannot_read_is_not_shown(api: Api) -> None:
    """A schedule of a members-only query is hidden (404, not listed) from members who may
    not read the query, like the query itself."""
    _team(api)
    api.add_query(
        "secret",
        visibility=Visibility.MEMBERS,
        owner=api.user_id(ALICE),
        members=frozenset({api.user_id(ADMIN)}),
    )
    schedule_id = _create(api, query_id="q-secret-acme")["id"]
    _problem(api.get(f"/api/v1/schedules/{schedule_id}", BOB), 404, "not_found")
    assert api.get("/api/v1/schedules", BOB).json()["items"] == []
    assert api.get(f"/api/v1/schedules/{schedule_id}", ADMIN).status_code == 200
    _problem(
        api.post("/api/v1/schedules", BOB, json={**MONDAYS, "query_id": "q-secret-acme"}),
        404,
        "not_found",
    )


def test_pause_and_resume_skip_the_due_times_in_between(api: Api) -> None:
    """Paused: no next run and nothing fires at the due time; resumed a week later: the next
    run is the first due time after now, and the missed Monday never fires."""
    _team(api)
    schedule_id = _create(api)["id"]
    paused = _patch(api, schedule_id, ALICE, enabled=False).json()
    assert (paused["enabled"], paused["next_run_at"]) == (False, None)

    api.clock.advance(8 * DAY)  # Tuesday 2026-01-13, past Monday's 08:00
    assert _fired(api) == []
    resumed = _patch(api, schedule_id, ALICE, enabled=True).json()
    assert (resumed["enabled"], resumed["next_run_at"]) == (True, "2026-01-19T07:00:00Z")
    assert _fired(api) == []
    assert api.deps.exports.list_exports(workspace_id="acme") == []


def test_run_now_creates_an_export_with_a_waiting_delivery_per_recipient(api: Api) -> None:
    """POST run: 202 with the export and its Location; the export's deliveries endpoint lists
    one waiting delivery per recipient; the timetable is unchanged."""
    _team(api)
    created = _create(
        api,
        recipients=[
            {"email": "ops@example.com"},
            {"webhook": "https://hooks.test/in"},
            {"email": "OPS@example.com"},  # the same mailbox: it hears once
        ],
        parameters={"since": "2024-01-25"},
    )
    run = api.post(f"/api/v1/schedules/{created['id']}/run", ALICE)
    assert run.status_code == 202, run.text
    export = run.json()
    assert run.headers["location"] == f"/api/v1/exports/{export['id']}"
    assert (export["status"], export["parameters"]) == ("queued", {"since": "2024-01-25"})
    assert api.get(run.headers["location"], ALICE).json()["id"] == export["id"]

    deliveries = api.get(f"/api/v1/exports/{export['id']}/deliveries", ALICE)
    assert deliveries.status_code == 200
    items = deliveries.json()["items"]
    assert sorted((*d["recipient"].items(), d["status"]) for d in items) == [
        (("email", "ops@example.com"), "waiting"),
        (("webhook", "https://hooks.test/in"), "waiting"),
    ]
    assert all((d["attempts"], d["outcome"], d["sent_at"]) == (0, None, None) for d in items)
    assert len({d["id"] for d in items}) == 2
    schedule = api.get(f"/api/v1/schedules/{created['id']}", ALICE).json()
    assert schedule["next_run_at"] == created["next_run_at"]


def test_notify_on_an_export_request_creates_its_deliveries(api: Api) -> None:
    """`notify` on POST /exports: a waiting delivery per recipient, visible to the requester
    and an admin, 404 to others; a bad address is 422 naming it and records nothing."""
    _team(api)
    response = api.post(
        "/api/v1/exports",
        ALICE,
        json={
            "query_id": ORDERS,
            "format": "csv",
            "notify": [{"email": "me@example.com"}, {"webhook": "https://hooks.test/hook"}],
        },
    )
    assert response.status_code == 202, response.text
    path = f"/api/v1/exports/{response.json()['id']}/deliveries"
    items = api.get(path, ALICE).json()["items"]
    assert sorted(next(iter(d["recipient"].values())) for d in items) == [
        "https://hooks.test/hook",
        "me@example.com",
    ]
    assert {d["status"] for d in items} == {"waiting"}
    assert len(api.get(path, ADMIN).json()["items"]) == 2
    _problem(api.get(path, BOB), 404, "not_found")

    bad = api.post(
        "/api/v1/exports",
        ALICE,
        json={"query_id": ORDERS, "format": "csv", "notify": [{"email": "not-an-address"}]},
    )
    assert _problem(bad, 422, "invalid_request")["field"] == "notify[0].email"
    assert len(api.deps.exports.list_exports(workspace_id="acme")) == 1


def test_a_report_schedule_takes_report_formats(api: Api) -> None:
    """A report is scheduled as pdf, xlsx or html; csv is 422 naming the format."""
    _team(api)
    api.deps.catalog.add_report(
        Report(
            id="r-weekly",
            workspace_id="acme",
            title="weekly",
            sections=(Section("Orders", ORDERS),),
            owner=api.user_id(ALICE),
        )
    )
    report = {"report_id": "r-weekly", "cron": "0 8 * * 1", "timezone": "UTC"}
    created = api.post("/api/v1/schedules", ALICE, json={**report, "format": "pdf"})
    assert created.status_code == 201, created.text
    assert (created.json()["report_id"], created.json()["query_id"]) == ("r-weekly", None)
    wrong = api.post("/api/v1/schedules", ALICE, json={**report, "format": "csv"})
    assert _problem(wrong, 422, "invalid_request")["field"] == "format"
    run = api.post(f"/api/v1/schedules/{created.json()['id']}/run", ALICE)
    assert run.json()["subject"] == {"type": "report", "id": "r-weekly", "name": "weekly"}


def test_a_null_subject_id_is_taken_only_beside_the_other_id(api: Api) -> None:
    """PATCH with a null query_id and a report_id turns a query's schedule into the report's;
    a null id alone, or both null, is 422 naming it and the schedule stays as it was."""
    _team(api)
    api.deps.catalog.add_report(
        Report(id="r-weekly", workspace_id="acme", title="weekly", sections=(Section("O", ORDERS),))
    )
    created = _create(api)
    for change in ({"query_id": None}, {"query_id": None, "report_id": None}):
        response = _patch(api, created["id"], ALICE, **change)
        assert _problem(response, 422, "invalid_request")["field"] == "query_id"
    assert _patch(api, created["id"], ALICE, report_id=None).status_code == 422
    assert api.get(f"/api/v1/schedules/{created['id']}", ALICE).json() == created
    switched = _patch(api, created["id"], ALICE, query_id=None, report_id="r-weekly", format="pdf")
    assert switched.status_code == 200, switched.text
    assert (switched.json()["query_id"], switched.json()["report_id"]) == (None, "r-weekly")


def test_a_bad_change_is_refused_and_changes_nothing(api: Api) -> None:
    """PATCH with a bad cron, time zone, parameter or null is 422 naming the field, and the
    schedule is as it was."""
    _team(api)
    created = _create(api)
    for change, field in (
        ({"cron": "0 25 * * *"}, "cron"),
        ({"timezone": "Europe/Atlantis"}, "timezone"),
        ({"parameters": {"since": "soon"}}, "parameters.since"),
        ({"enabled": None}, "enabled"),
        ({"recipients": None}, "recipients"),
        ({"parameters": None}, "parameters"),
        ({"recipients": [{"webhook": None}]}, "recipients.0.webhook"),
        ({"recipients": [{"webhook": "file:///etc/passwd"}]}, "recipients[0].webhook"),
    ):
        response = _patch(api, created["id"], ALICE, **change)
        assert _problem(response, 422, "invalid_request")["field"] == field
    assert api.get(f"/api/v1/schedules/{created['id']}", ALICE).json() == created


def test_the_signing_key_is_for_admins(api: Api) -> None:
    """A workspace admin reads the workspace's webhook signing key (the same each time);
    an editor gets 403."""
    _team(api)
    first = api.get("/api/v1/schedules/signing-key", ADMIN)
    assert first.status_code == 200, first.text
    assert first.json()["workspace"] == "acme"
    assert len(first.json()["key"]) == 64
    assert api.get("/api/v1/schedules/signing-key", ADMIN).json() == first.json()
    _problem(api.get("/api/v1/schedules/signing-key", ALICE), 403, "forbidden")
