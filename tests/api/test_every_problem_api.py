"""A body with several mistakes is refused with all of them in one 422, in the order the
matching form shows its fields: queries, reports, exports and schedules."""

from __future__ import annotations

from typing import Any

from qexport.domain.queries import Parameter, ParamType
from tests.api.conftest import Api

EDITOR = "ed@acme.test"


def _fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "invalid_request"
    fields = [e["field"] for e in body["errors"]]
    assert body["field"] == fields[0]
    return fields


def test_a_query_body_gets_every_mistake_in_the_forms_order(api: Api) -> None:
    """An empty name, an unknown source, a parameter with a bad name and type and an unknown
    visibility: five problems, one 422, ordered name, source, parameters, visibility."""
    api.member(EDITOR, "editor")
    body = {
        "name": "",
        "sql": "SELECT 1",
        "source": "nope",
        "parameters": [{"name": "1x", "type": "text"}],
        "visibility": "everyone",
    }
    response = api.post("/api/v1/queries", EDITOR, json=body)
    assert _fields(response) == [
        "name",
        "source",
        "parameters.0.type",
        "parameters.0.name",
        "visibility",
    ]
    messages = [e["message"] for e in response.json()["errors"]]
    assert "unknown parameter type 'text'" in messages[2]
    assert api.get("/api/v1/queries", EDITOR).json()["items"] == []


def test_a_taken_name_and_a_refused_sql_come_back_together(api: Api) -> None:
    """Replacing a query with another's name, SQL its source refuses and a member of no
    workspace: the three in one 422; the query is unchanged."""
    api.member(EDITOR, "editor")
    api.add_query("orders")
    mine = api.add_query("mine")
    body = {
        "name": "orders",
        "sql": "SELECT *\nFROM no_such_table",
        "source": "shop",
        "visibility": "workspace",
        "members": ["u-stranger"],
    }
    response = api.client.put(f"/api/v1/queries/{mine.id}", headers=api.headers(EDITOR), json=body)
    assert _fields(response) == ["name", "sql", "members"]
    assert "no_such_table" in response.json()["errors"][1]["message"]
    stored = api.context.catalog.get_query(mine.id)
    assert stored is not None
    assert stored.name == "mine"


def test_a_report_body_gets_every_mistake_section_by_section(api: Api) -> None:
    """An empty title, a section with an empty heading, an unreadable query, a display no
    report has and a zero row cap, a second with a table's series: in the form's order."""
    api.member(EDITOR, "editor")
    query = api.add_query()
    body = {
        "title": "",
        "sections": [
            {"heading": "", "query_id": "nope", "display": "pie", "row_cap": 0},
            {"heading": "B", "query_id": query.id, "series": "customer", "parameters": {"x": 1}},
        ],
        "visibility": "secret",
    }
    response = api.post("/api/v1/reports", EDITOR, json=body)
    assert _fields(response) == [
        "title",
        "sections.0.heading",
        "sections.0.query_id",
        "sections.0.display",
        "sections.0.row_cap",
        "sections.1.series",
        "sections.1.parameters.x",
        "visibility",
    ]


def test_an_export_request_gets_every_mistake(api: Api) -> None:
    """A format no query takes, an unknown parameter, a date that is not one and a bad
    notify address: format, parameters, notify; nothing is queued."""
    api.member(EDITOR, "editor")
    query = api.add_query(
        parameters=(
            Parameter("since", ParamType.DATE, required=False, default="2024-01-01"),
            Parameter("top", ParamType.INTEGER),
        )
    )
    body = {
        "query_id": query.id,
        "format": "pdf",
        "parameters": {"since": "soon", "nope": 1},
        "notify": [{"email": "not-an-address"}, {"webhook": "ftp://x"}],
    }
    response = api.post("/api/v1/exports", EDITOR, json=body)
    assert _fields(response) == [
        "format",
        "parameters.nope",
        "parameters.since",
        "parameters.top",
        "notify[0].email",
        "notify[1].webhook",
    ]
    assert api.get("/api/v1/exports", EDITOR).json()["items"] == []


def test_an_export_request_without_one_subject_still_checks_the_format(api: Api) -> None:
    """Neither a query nor a report, and a format none takes: both told."""
    api.member(EDITOR, "editor")
    response = api.post("/api/v1/exports", EDITOR, json={"format": "docx"})
    assert _fields(response) == ["query_id", "format"]


def test_a_schedule_body_gets_every_mistake_in_the_forms_order(api: Api) -> None:
    """The issue's five mistakes and a sixth: a report format for a query, a cron in words,
    an unknown zone, a bad address, an unknown missed-runs choice and a date that is not
    one, in one 422 ordered as the schedule form shows them."""
    api.member(EDITOR, "editor")
    query = api.add_query()
    body = {
        "query_id": query.id,
        "format": "pdf",
        "cron": "every monday",
        "timezone": "Mars/Olympus",
        "recipients": [{"email": "not-an-address"}],
        "missed": "sometimes",
        "parameters": {"since": "soon"},
    }
    response = api.post("/api/v1/schedules", EDITOR, json=body)
    assert _fields(response) == [
        "format",
        "cron",
        "timezone",
        "recipients[0].email",
        "missed",
        "parameters.since",
    ]
    assert api.get("/api/v1/schedules", EDITOR).json()["items"] == []


def test_a_schedule_change_gets_every_mistake(api: Api) -> None:
    """PATCH with a bad cron, a bad zone and a null that may not be: all three; the schedule
    keeps its timetable."""
    api.member(EDITOR, "editor")
    query = api.add_query()
    body = {"query_id": query.id, "format": "csv", "cron": "0 8 * * 1", "recipients": []}
    created = api.post("/api/v1/schedules", EDITOR, json=body).json()
    response = api.client.patch(
        f"/api/v1/schedules/{created['id']}",
        headers=api.headers(EDITOR),
        json={"cron": "61 * * * *", "timezone": "Nowhere/City", "enabled": None},
    )
    assert _fields(response) == ["cron", "timezone", "enabled"]
    assert api.get(f"/api/v1/schedules/{created['id']}", EDITOR).json()["cron"] == "0 8 * * 1"


def test_an_unreadable_subject_is_still_404_when_nothing_else_is_wrong(api: Api) -> None:
    """Collecting every mistake keeps the 404 of a query the caller cannot read, and a bad
    format is refused the same (422) whether or not the query exists."""
    api.member(EDITOR, "editor")
    api.add_query(workspace="other")
    body = {"query_id": "q-orders-other", "format": "csv"}
    assert api.post("/api/v1/exports", EDITOR, json=body).status_code == 404
    missing = api.post("/api/v1/exports", EDITOR, json={**body, "format": "cvs"})
    unknown = api.post("/api/v1/exports", EDITOR, json={"query_id": "nope", "format": "cvs"})
    assert _fields(missing) == _fields(unknown) == ["format"]
