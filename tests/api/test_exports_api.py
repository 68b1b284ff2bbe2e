"""The exports API through HTTP: request, read, list, cancel and events (DESIGN section 5)."""

from __future__ import annotations

import csv
import hashlib
import io
import uuid
from dataclasses import replace
from typing import Any

from qexport.domain.queries import Parameter, ParamType, Visibility
from tests.api.conftest import Api

ALICE = "alice@acme.test"
BOB = "bob@acme.test"
ADMIN = "admin@acme.test"
DAY = 24 * 3600


def _create(api: Api, who: str = ALICE, **body: Any) -> Any:
    return api.post("/api/v1/exports", who, json={"query_id": "q-orders-acme", **body})


def _export_id(api: Api, who: str = ALICE, fmt: str = "csv") -> str:
    response = _create(api, who, format=fmt)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


def test_an_export_goes_from_request_to_downloaded_csv(api: Api) -> None:
    """202 + Location for a request, queued until a worker runs it, then succeeded with
    size, rows and sha256 describing the file, whose bytes are the query's CSV."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    created = _create(api, format="csv", parameters={"since": "2024-01-20"})
    assert created.status_code == 202
    export = created.json()
    assert created.headers["location"] == f"/api/v1/exports/{export['id']}"
    assert export["status"] == "queued"
    assert export["subject"] == {"type": "query", "id": "q-orders-acme", "name": "orders"}
    assert export["parameters"] == {"since": "2024-01-20"}
    assert (export["filename"], export["format"], export["failure"]) == (
        "orders_2026-01-05.csv",
        "csv",
        None,
    )
    assert export["requested_by"] == api.user_id(ALICE)

    assert api.drain() == {"succeeded": 1}
    done = api.get(created.headers["location"], ALICE).json()
    assert done["status"] == "succeeded"
    assert done["attempts"] == 1
    assert done["completed_at"] is not None
    assert done["expires_at"] == "2026-01-12T09:00:00Z"  # the frozen clock + 7 days

    file = api.get(f"/api/v1/exports/{export['id']}/file", ALICE)
    assert file.status_code == 200
    assert hashlib.sha256(file.content).hexdigest() == done["sha256"]
    assert len(file.content) == done["size_bytes"]
    rows = list(csv.reader(io.StringIO(file.content.decode())))
    assert rows[0] == ["id", "customer", "amount", "day"]
    # days 2024-01-20 .. 2024-01-30 of ids 1..100 (day = Jan 1 + id % 30)
    assert len(rows) - 1 == done["row_count"] == 33
    assert rows[1] == ["19", "customer 5", "23.75", "2024-01-20"]


def test_bad_requests_name_the_offending_field(api: Api) -> None:
    """422 problem documents whose `field` points at the member at fault."""
    api.member(ALICE, "editor")
    api.add_query(
        "orders",
        parameters=(
            Parameter("since", ParamType.DATE),
            Parameter("customer", ParamType.STRING, required=False),
        ),
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"format": "pdf"}, "format"),
        ({"format": "csv"}, "parameters.since"),  # required, missing
        ({"format": "csv", "parameters": {"since": "soon"}}, "parameters.since"),
        ({"format": "csv", "parameters": {"since": "2024-01-01", "x": 1}}, "parameters.x"),
        ({"format": "csv", "parameters": {"since": ["2024-01-01"]}}, "parameters.since"),
        (
            {"format": "csv", "parameters": {"since": "2024-01-01", "customer": "c" * 10_001}},
            "parameters.customer",
        ),
        ({"format": "csv", "parameters": {f"p{i}": 1 for i in range(65)}}, "parameters"),
        ({"format": "csv", "sql": "SELECT 1"}, "sql"),
        ({"format": "csv", "report_id": "r1"}, "query_id"),
        (
            {"format": "csv", "options": {"neutralize_formulas": "yes"}},
            "options.neutralize_formulas",
        ),
    ]
    for body, field in cases:
        problem = _problem(_create(api, **body), 422, "invalid_request")
        assert problem["field"] == field, body
    neither = api.post("/api/v1/exports", ALICE, json={"format": "csv"})
    assert _problem(neither, 422, "invalid_request")["field"] == "query_id"
    assert api.deps.exports.list_exports(workspace_id="acme") == []


def test_a_query_the_caller_cannot_read_is_404_like_a_missing_one(api: Api) -> None:
    """Missing, deleted, another workspace's, or members-only without the caller: the same
    404 (only the echoed id differs); a missing report is a 404 too."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer")
    deleted = api.add_query("gone")
    api.deps.catalog.delete_query(deleted.id)
    foreign = api.add_query("orders", workspace="other")
    private = api.add_query(
        "private", visibility=Visibility.MEMBERS, members=frozenset({api.user_id(BOB)})
    )
    bodies = set()
    for query_id in ("no-such-query", deleted.id, foreign.id, private.id):
        response = api.post("/api/v1/exports", ALICE, json={"query_id": query_id, "format": "csv"})
        bodies.add(_problem(response, 404, "not_found")["detail"].replace(query_id, "ID"))
    assert len(bodies) == 1
    report = api.post("/api/v1/exports", ALICE, json={"report_id": "r1", "format": "pdf"})
    _problem(report, 404, "not_found")
    allowed = api.post("/api/v1/exports", BOB, json={"query_id": private.id, "format": "csv"})
    assert allowed.status_code == 202


def test_formats_and_options_are_recorded(api: Api) -> None:
    """Every registered format is accepted; the formula option may be turned off."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    for fmt in ("csv", "tsv", "jsonl", "parquet", "xlsx"):
        response = _create(api, format=fmt, options={"neutralize_formulas": False})
        assert response.status_code == 202, fmt
        assert response.json()["filename"] == f"orders_2026-01-05.{fmt}"
    assert api.drain() == {"succeeded": 5}


def test_too_many_unsettled_exports_get_429(api: Api) -> None:
    """A requester with 20 exports queued gets 429 with Retry-After; others are not held
    back, and the requester may ask again once exports have settled."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer")
    api.add_query("orders")
    for _ in range(api.context.settings.max_unsettled_per_user):
        _export_id(api)
    refused = _create(api, format="csv")
    _problem(refused, 429, "too_many_requests")
    assert int(refused.headers["retry-after"]) > 0
    assert _create(api, BOB, format="csv").status_code == 202
    api.drain()
    assert _create(api, format="csv").status_code == 202


def test_get_shows_own_exports_and_an_admin_the_workspaces(api: Api) -> None:
    """A member's export is 404 to another member (same body as a missing id, a malformed
    one, or another workspace's), 200 to a workspace admin, 404 to another workspace's."""
    api.member(ALICE, "viewer")
    api.member(BOB, "editor")
    api.member(ADMIN, "admin")
    api.member("eve@other.test", "admin", workspace="other")
    api.add_query("orders")
    export_id = _export_id(api)
    assert api.get(f"/api/v1/exports/{export_id}", ALICE).status_code == 200
    assert api.get(f"/api/v1/exports/{export_id}", ADMIN).json()["id"] == export_id
    assert api.get(f"/api/v1/exports/{export_id}", "eve@other.test").status_code == 404
    missing = str(uuid.uuid4())
    theirs = api.get(f"/api/v1/exports/{export_id}", BOB)
    unknown = api.get(f"/api/v1/exports/{missing}", BOB)
    malformed = api.get("/api/v1/exports/not-an-id", BOB)
    _problem(theirs, 404, "not_found")
    assert theirs.text.replace(export_id, "ID") == unknown.text.replace(missing, "ID")
    assert malformed.text.replace("not-an-id", "ID") == unknown.text.replace(missing, "ID")


def _list_all(api: Api, who: str, query: str = "", limit: int = 3) -> list[str]:
    """Every id the list returns, page by page, checking each page's size."""
    seen: list[str] = []
    cursor = None
    while True:
        suffix = f"&cursor={cursor}" if cursor else ""
        page = api.get(f"/api/v1/exports?limit={limit}{query}{suffix}", who)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["items"]) <= limit
        seen += [item["id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen


def test_the_list_pages_newest_first_without_duplicates_or_gaps(api: Api) -> None:
    """Pages chained by next_cursor return every visible export once, newest first, even
    when several share a creation time; members see their own, an admin the workspace's."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer")
    api.member(ADMIN, "admin")
    api.add_query("orders")
    mine, bobs = [], []
    for batch in range(3):
        mine += [_export_id(api) for _ in range(3)]  # three at the same instant
        bobs.append(_export_id(api, BOB))
        api.clock.advance(batch + 1)
    listed = _list_all(api, ALICE)
    assert sorted(listed) == sorted(mine)
    assert len(listed) == len(set(listed))
    created = [api.get(f"/api/v1/exports/{i}", ALICE).json()["created_at"] for i in listed]
    assert created == sorted(created, reverse=True)
    assert sorted(_list_all(api, ADMIN, limit=4)) == sorted(mine + bobs)
    assert _list_all(api, ALICE, limit=200) == listed


def test_the_list_filters_by_effective_status(api: Api) -> None:
    """status= selects queued, failed, succeeded (unexpired only), expired or cancelled
    exports (the failed ones their requester cancelled)."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    old = [_export_id(api) for _ in range(2)]
    api.drain()
    api.clock.advance(8 * DAY)  # past the 7-day retention: the first two have expired
    fresh = _export_id(api)
    api.drain()
    cancelled = _export_id(api)
    api.post(f"/api/v1/exports/{cancelled}/cancel", ALICE)
    queued = _export_id(api)

    def listed(status: str) -> set[str]:
        return set(_list_all(api, ALICE, f"&status={status}", limit=1))

    assert listed("expired") == set(old)
    assert listed("succeeded") == {fresh}
    assert listed("failed") == {cancelled}
    assert listed("cancelled") == {cancelled}
    assert listed("queued") == {queued}
    assert listed("running") == set()
    statuses = {i["id"]: i["status"] for i in api.get("/api/v1/exports", ALICE).json()["items"]}
    assert statuses == {
        old[0]: "expired",
        old[1]: "expired",
        fresh: "succeeded",
        cancelled: "failed",
        queued: "queued",
    }


def test_bad_list_arguments_are_422(api: Api) -> None:
    """Unknown status, limit outside 1..200, and cursors the API did not issue: 422."""
    api.member(ALICE, "viewer")
    for query, field in (
        ("status=done", "status"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=bm90LWEtY3Vyc29y", "cursor"),  # "not-a-cursor"
        ("cursor=" + "A" * 300, "cursor"),
    ):
        response = api.get(f"/api/v1/exports?{query}", ALICE)
        assert _problem(response, 422, "invalid_request")["field"] == field, query


def test_cancel_settles_a_queued_export_once(api: Api) -> None:
    """Cancel answers 200 with failed/cancelled; cancelling it again, or a succeeded export,
    is 409; the worker then leaves it alone."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    export_id = _export_id(api)
    cancelled = api.post(f"/api/v1/exports/{export_id}/cancel", ALICE)
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "failed"
    assert cancelled.json()["failure"]["code"] == "cancelled"
    _problem(api.post(f"/api/v1/exports/{export_id}/cancel", ALICE), 409, "conflict")
    done = _export_id(api)
    assert api.drain() == {"succeeded": 1}
    _problem(api.post(f"/api/v1/exports/{done}/cancel", ALICE), 409, "conflict")
    assert api.get(f"/api/v1/exports/{export_id}", ALICE).json()["status"] == "failed"


def test_events_tell_the_story_of_an_export(api: Api) -> None:
    """requested, claimed, succeeded: each with its time, status, attempt and worker."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    export_id = _export_id(api)
    api.clock.advance(5)
    api.drain()
    events = api.get(f"/api/v1/exports/{export_id}/events", ALICE).json()["items"]
    assert [(e["kind"], e["status"], e["attempt"]) for e in events] == [
        ("requested", "queued", 0),
        ("claimed", "running", 1),
        ("succeeded", "succeeded", 1),
    ]
    assert events[0]["worker_id"] is None
    assert events[1]["worker_id"] == events[2]["worker_id"] is not None
    assert [e["at"] for e in events] == [
        "2026-01-05T09:00:00Z",
        "2026-01-05T09:00:05Z",
        "2026-01-05T09:00:05Z",
    ]
    assert all(e["code"] is None and e["detail"] is None for e in events)


def test_events_of_a_refused_export_carry_the_failure(api: Api) -> None:
    """An export whose query was deleted before it ran ends with a `refused` event coded
    access_lost, and the export itself shows the failure."""
    api.member(ALICE, "viewer")
    query = api.add_query("orders")
    export_id = _export_id(api)
    api.deps.catalog.update_query(replace(query, visibility=Visibility.MEMBERS))
    api.drain()
    events = api.get(f"/api/v1/exports/{export_id}/events", ALICE).json()["items"]
    assert [(e["kind"], e["code"]) for e in events] == [
        ("requested", None),
        ("refused", "access_lost"),
    ]
    export = api.get(f"/api/v1/exports/{export_id}", ALICE).json()
    assert export["failure"]["code"] == "access_lost"
