"""Checking a query's SQL with its source as it is saved is a look at the source's data (MySQL
and MariaDB evaluate constant subqueries while they describe and plan), so it is rationed and
on the record like a preview, on SQLite and PostgreSQL: a statement the source refuses is a
failed `query.created` or `query.changed` event (who, the source, the name, where; never the
source's message) and takes one of the member's QEXPORT_PREVIEW_PER_MINUTE, which previews
share; with none left the save is 429 with Retry-After before the source is asked; a
statement the source accepts costs nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qexport.domain.audit import AuditFilter, RecordedEvent
from tests.api.conftest import SOURCE, Api, api_on

ANN = "ann@acme.test"
BEN = "ben@acme.test"
QUERIES = "/api/v1/queries"
PER_MINUTE = 3
GOOD: dict[str, Any] = {
    "name": "big orders",
    "sql": "SELECT id, amount FROM orders WHERE amount > $above",
    "source": SOURCE,
    "parameters": [{"name": "above", "type": "number", "required": True}],
}
BROKEN = {**GOOD, "sql": "SELECT id,\n  amount FORM orders", "parameters": []}


@pytest.fixture(params=["sqlite", "postgresql"])
def check_record_team(
    request: pytest.FixtureRequest, tmp_path: Path, source_template: Path
) -> Iterator[Api]:
    """Ann and Ben, editors of acme; three previews a minute each; the orders query."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, source_template, url, preview_per_minute=PER_MINUTE) as api:
        api.member(ANN, "editor")
        api.member(BEN, "editor")
        api.add_query("orders")
        yield api


def _events(api: Api, action: str) -> list[RecordedEvent]:
    narrow = AuditFilter(action=action)
    return api.context.audit.list_events(workspace_id="acme", narrow=narrow, limit=100)[::-1]


def _failed(api: Api) -> list[RecordedEvent]:
    found = _events(api, "query.created") + _events(api, "query.changed")
    return [e for e in found if e.outcome == "failed"]


def _preview(api: Api, who: str) -> Any:
    return api.post("/api/v1/queries/q-orders-acme/preview", who, json={})


def _put(api: Api, who: str, query_id: str, body: dict[str, Any]) -> Any:
    return api.client.put(f"{QUERIES}/{query_id}", headers=api.headers(who), json=body)


def test_a_refused_save_is_recorded_as_failed_with_who_the_source_and_where(
    check_record_team: Api,
) -> None:
    """422 on "sql" as before; the event names Ann (through her token), the source, the
    name, the statement, the code, the step and the position, and not the source's
    message."""
    refused = check_record_team.post(QUERIES, ANN, json=BROKEN)
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "sql"
    [found] = _failed(check_record_team)
    assert found.action == "query.created"
    assert (found.actor_kind, found.actor_id) == ("token", check_record_team.user_id(ANN))
    assert (found.target_kind, found.target_id) == ("query", None)
    details = json.loads(found.details)
    assert (details["name"], details["source"], details["sql"]) == (
        "big orders",
        SOURCE,
        BROKEN["sql"],
    )
    assert (details["code"], details["step"]) == ("query_invalid", "describe")
    assert details["position"] == {"line": 2, "column": 15}
    assert "syntax error" not in found.details
    assert details["token_id"]


def test_a_refused_change_is_recorded_on_the_query(check_record_team: Api) -> None:
    """PUT with a missing table: the query stays as it was; a failed `query.changed` names
    it."""
    created = check_record_team.post(QUERIES, ANN, json=GOOD).json()
    refused = _put(check_record_team, ANN, created["id"], {**GOOD, "sql": "SELECT * FROM gone"})
    assert refused.status_code == 422
    [found] = _failed(check_record_team)
    assert (found.action, found.target_id) == ("query.changed", created["id"])
    assert json.loads(found.details)["name"] == "big orders"
    assert check_record_team.get(f"{QUERIES}/{created['id']}", ANN).json() == created


def test_refused_saves_take_previews_and_past_them_the_source_is_not_asked(
    check_record_team: Api,
) -> None:
    """One preview and two refused saves spend Ann's three: her next refused save, a good
    one and a preview are 429 with Retry-After, nothing recorded and nothing saved; Ben's
    are his own; a minute after the first, Ann saves again."""
    assert _preview(check_record_team, ANN).status_code == 200
    for _ in range(2):
        assert check_record_team.post(QUERIES, ANN, json=BROKEN).status_code == 422
    for body in (BROKEN, GOOD):
        limited = check_record_team.post(QUERIES, ANN, json=body)
        assert limited.status_code == 429, limited.text
        assert limited.json()["code"] == "too_many_requests"
        assert limited.headers["Retry-After"] == "60"
        assert "the query was not saved" in limited.json()["detail"]
    assert _preview(check_record_team, ANN).status_code == 429
    assert len(_failed(check_record_team)) == 2
    assert [q.name for q in check_record_team.context.catalog.list_queries("acme")] == ["orders"]
    assert check_record_team.post(QUERIES, BEN, json=BROKEN).status_code == 422
    check_record_team.clock.advance(60)
    assert check_record_team.post(QUERIES, ANN, json=GOOD).status_code == 201


def test_with_previews_spent_a_refused_save_is_429(check_record_team: Api) -> None:
    """Three previews: the refused save that follows is 429, and unrecorded (the source was
    not asked); so is a change of a query."""
    created = check_record_team.post(QUERIES, ANN, json=GOOD).json()
    for _ in range(PER_MINUTE):
        assert _preview(check_record_team, ANN).status_code == 200
    assert check_record_team.post(QUERIES, ANN, json=BROKEN).status_code == 429
    assert _put(check_record_team, ANN, created["id"], BROKEN).status_code == 429
    assert _failed(check_record_team) == []


def test_saves_the_source_accepts_are_not_rationed(check_record_team: Api) -> None:
    """Forty good saves and changes in a row with three previews a minute all succeed, and
    leave Ann's three previews untouched."""
    created = check_record_team.post(QUERIES, ANN, json=GOOD).json()
    for n in range(20):
        saved = check_record_team.post(QUERIES, ANN, json={**GOOD, "name": f"q{n}"})
        assert saved.status_code == 201, saved.text
        changed = _put(check_record_team, ANN, created["id"], {**GOOD, "name": f"big orders {n}"})
        assert changed.status_code == 200, changed.text
    for _ in range(PER_MINUTE):
        assert _preview(check_record_team, ANN).status_code == 200
    assert _failed(check_record_team) == []


def test_a_check_whose_save_is_refused_anyway_counts(check_record_team: Api) -> None:
    """A good statement under a name already taken: 422 on "name" (the statement was
    checked), and that check takes one of the minute's previews, since what the source said
    of it is told by the absence of an error on "sql"."""
    assert check_record_team.post(QUERIES, ANN, json=GOOD).status_code == 201
    for _ in range(PER_MINUTE):
        taken = check_record_team.post(QUERIES, ANN, json=GOOD)
        assert taken.status_code == 422
        assert [e["field"] for e in taken.json()["errors"]] == ["name"]
    assert check_record_team.post(QUERIES, ANN, json=GOOD).status_code == 429
