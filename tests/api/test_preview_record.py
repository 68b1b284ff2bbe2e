"""Every row that leaves through a preview is accounted for (on SQLite and PostgreSQL): each
API preview is an audit event naming who, which query, the parameters' values and the rows
shown; a member gets at most QEXPORT_PREVIEW_PER_MINUTE a minute, then 429 with Retry-After;
the workspace's policy caps the rows and refuses a sensitive query (on the record); /metrics
counts previews and their rows; and who may not read a query still gets no preview."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qexport.domain.audit import Action, AuditFilter, RecordedEvent
from qexport.domain.queries import Visibility
from tests.api.conftest import Api, api_on

ANN = "ann@acme.test"
VIC = "vic@acme.test"
ADMIN = "ada@acme.test"
STRANGER = "sam@other.test"
PER_MINUTE = 3


@pytest.fixture(params=["sqlite", "postgresql"])
def preview_record_team(
    request: pytest.FixtureRequest, tmp_path: Path, source_template: Path
) -> Iterator[Api]:
    """Ann (editor), Vic (viewer) and Ada (admin) of acme, Sam of another workspace; three
    previews a minute each."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, source_template, url, preview_per_minute=PER_MINUTE) as api:
        api.member(ANN, "editor")
        api.member(VIC, "viewer")
        api.member(ADMIN, "admin")
        api.member(STRANGER, "admin", workspace="other")
        api.add_query("orders")
        yield api


def _preview(api: Api, who: str, query_id: str = "q-orders-acme", **body: Any) -> Any:
    return api.post(f"/api/v1/queries/{query_id}/preview", who, json=body)


def _previewed(api: Api, workspace: str = "acme") -> list[RecordedEvent]:
    """The workspace's `query.previewed` events, oldest first."""
    narrow = AuditFilter(action=Action.QUERY_PREVIEWED.value)
    return api.context.audit.list_events(workspace_id=workspace, narrow=narrow, limit=100)[::-1]


def _policy(api: Api, **rules: Any) -> None:
    response = api.client.patch(
        "/api/v1/workspaces/acme/policy", headers=api.headers(ADMIN), json=rules
    )
    assert response.status_code == 200, response.text


def test_a_preview_is_recorded_with_who_which_query_its_values_and_its_rows(
    preview_record_team: Api,
) -> None:
    """The event names the caller (through their token), the query, the values it ran with
    and the rows it showed; the admin's audit listing shows it too."""
    response = _preview(preview_record_team, VIC, parameters={"since": "2024-01-29"}, limit=4)
    assert response.status_code == 200, response.text
    [found] = _previewed(preview_record_team)
    assert (found.actor_kind, found.actor_id) == ("token", preview_record_team.user_id(VIC))
    assert (found.target_kind, found.target_id, found.outcome) == ("query", "q-orders-acme", "ok")
    details = json.loads(found.details)
    assert details["query_name"] == "orders"
    assert details["parameters"] == {"since": "2024-01-29"}
    assert (details["rows"], details["more_rows"], details["limit"]) == (4, True, 4)
    assert details["token_id"]
    listed = preview_record_team.get("/api/v1/audit?action=query.previewed", ADMIN).json()["items"]
    assert [(e["action"], e["details"]["rows"]) for e in listed] == [("query.previewed", 4)]


def test_a_failed_preview_is_recorded_with_its_code(preview_record_team: Api) -> None:
    """A statement the source refuses shows no rows; the event says it failed, and why."""
    preview_record_team.add_query("broken", sql="SELECT * FROM nowhere", parameters=())
    response = _preview(preview_record_team, ANN, "q-broken-acme")
    assert response.status_code == 422
    [found] = _previewed(preview_record_team)
    assert found.outcome == "failed"
    assert json.loads(found.details)["code"] == "query_invalid"
    assert "rows" not in json.loads(found.details)


def test_past_the_previews_a_minute_allow_429_with_retry_after(preview_record_team: Api) -> None:
    """Three previews, then 429 too_many_requests saying when (the first leaves the minute
    60 s after it ran), not recorded and not run; another member previews meanwhile; a minute
    later Ann previews again."""
    for _ in range(PER_MINUTE):
        assert _preview(preview_record_team, ANN).status_code == 200
    refused = _preview(preview_record_team, ANN)
    assert refused.status_code == 429
    assert refused.json()["code"] == "too_many_requests"
    assert refused.headers["Retry-After"] == "60"
    assert "3 previews in the last minute" in refused.json()["detail"]
    assert len(_previewed(preview_record_team)) == PER_MINUTE
    assert _preview(preview_record_team, VIC).status_code == 200
    preview_record_team.clock.advance(30)
    assert _preview(preview_record_team, ANN).status_code == 429
    preview_record_team.clock.advance(30)
    assert _preview(preview_record_team, ANN).status_code == 200


def test_the_policy_caps_the_rows_and_refuses_a_sensitive_query_on_the_record(
    preview_record_team: Api,
) -> None:
    """`max_rows` 5: five rows shown, and the limits say so; a formats rule changes nothing
    (a preview makes no file); marked sensitive, the query is refused 403, which is recorded
    as refused."""
    _policy(preview_record_team, max_rows=5, formats=["parquet"])
    body = _preview(preview_record_team, ANN).json()
    assert body["row_count"] == 5
    assert body["more_rows"] is True
    assert body["limits"]["rows"] == 5
    _policy(preview_record_team, sensitive_queries=["q-orders-acme"])
    refused = _preview(preview_record_team, ANN)
    assert refused.status_code == 403
    assert "sensitive" in refused.json()["detail"]
    shown, denied = _previewed(preview_record_team)
    assert (shown.outcome, json.loads(shown.details)["rows"]) == ("ok", 5)
    assert (denied.outcome, json.loads(denied.details)["reason"]) == ("refused", "sensitive")


def test_who_may_not_read_the_query_gets_no_preview_and_leaves_no_event(
    preview_record_team: Api,
) -> None:
    """A members-only query not shared with the viewer, and any query of another workspace:
    404 as for a missing one, nothing run, nothing recorded in either workspace."""
    preview_record_team.add_query(
        "mine",
        sql="SELECT 1 AS one",
        parameters=(),
        visibility=Visibility.MEMBERS,
        owner=preview_record_team.user_id(ANN),
    )
    assert _preview(preview_record_team, VIC, "q-mine-acme").status_code == 404
    assert _preview(preview_record_team, STRANGER).status_code == 404
    assert _previewed(preview_record_team) == []
    assert _previewed(preview_record_team, "other") == []
    assert _preview(preview_record_team, ANN, "q-mine-acme").status_code == 200


def _figures(api: Api) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(api.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name in ("qexport_previews_total", "qexport_previewed_rows_total"):
                found.setdefault(sample.name, {})[sample.labels["workspace"]] = sample.value
    return found


def test_metrics_count_previews_and_the_rows_they_showed(preview_record_team: Api) -> None:
    """Each workspace's previews that showed rows, and their rows; refusals and failures do
    not count; a workspace without previews reports 0."""
    assert _figures(preview_record_team)["qexport_previews_total"] == {"acme": 0, "other": 0}
    _preview(preview_record_team, ANN, parameters={"since": "2024-01-29"})  # 6 rows
    _preview(preview_record_team, VIC)  # 100 rows
    preview_record_team.add_query("broken", sql="SELECT * FROM nowhere", parameters=())
    assert _preview(preview_record_team, ADMIN, "q-broken-acme").status_code == 422
    preview_record_team.add_query("orders", workspace="other")
    _preview(preview_record_team, STRANGER, "q-orders-other", limit=7)
    assert _figures(preview_record_team) == {
        "qexport_previews_total": {"acme": 2, "other": 1},
        "qexport_previewed_rows_total": {"acme": 106, "other": 7},
    }
