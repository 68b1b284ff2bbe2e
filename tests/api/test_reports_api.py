"""`/api/v1/reports`: create, list, read, replace, delete; roles, visibility, validation;
and requesting report exports through `POST /api/v1/exports`."""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import replace
from typing import Any

import pytest
from pypdf import PdfReader

from qexport.domain.queries import Parameter, ParamType, Visibility
from qexport.domain.reports import MAX_ROW_CAP, MAX_SECTIONS
from tests.api.conftest import Api

ADMIN = "admin@acme.test"
EDITOR = "editor@acme.test"
VIEWER = "viewer@acme.test"
OUTSIDER = "outsider@other.test"
REPORTS = "/api/v1/reports"
EXPORTS = "/api/v1/exports"
ORDERS = "q-orders-acme"  # since: date, default 2024-01-01
ABOVE = "q-above-acme"  # above: number, required
PRIVATE = "q-private-acme"  # members only, owned by the admin


def _report(**changes: Any) -> dict[str, Any]:
    return {
        "title": "Monthly sales",
        "description": "Orders and the big ones",
        "sections": [
            {"heading": "All orders", "query_id": ORDERS, "display": "table", "row_cap": 50},
            {
                "heading": "Big orders",
                "query_id": ABOVE,
                "parameters": {"above": 100},
                "display": "bar",
            },
        ],
        **changes,
    }


@pytest.fixture
def reports_team(api: Api) -> Api:
    """An admin, an editor and a viewer in acme, an admin of another workspace, and three
    queries: two for the workspace, one only for the admin."""
    api.member(ADMIN, "admin")
    api.member(EDITOR, "editor")
    api.member(VIEWER, "viewer")
    api.member(OUTSIDER, "admin", workspace="other")
    api.add_query("orders")
    api.add_query(
        "above",
        sql="SELECT customer, amount FROM orders WHERE amount > $above ORDER BY id",
        parameters=(Parameter("above", ParamType.NUMBER),),
    )
    api.add_query(
        "private",
        sql="SELECT id FROM orders",
        parameters=(),
        visibility=Visibility.MEMBERS,
        owner=api.user_id(ADMIN),
    )
    return api


def _create(api: Api, who: str = EDITOR, **changes: Any) -> dict[str, Any]:
    response = api.post(REPORTS, who, json=_report(**changes))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _put(api: Api, report_id: str, who: str, **changes: Any) -> Any:
    return api.client.put(
        f"{REPORTS}/{report_id}", headers=api.headers(who), json=_report(**changes)
    )


def _titles(api: Api, who: str) -> list[str]:
    response = api.get(REPORTS, who)
    assert response.status_code == 200
    return [r["title"] for r in response.json()["items"]]


# ---------------------------------------------------------------- create and read


def test_a_created_report_is_at_its_location(reports_team: Api) -> None:
    """201 with Location; reading it there gives back what was written, with its owner and
    the defaults (display table, row cap 1,000, no fixed parameters)."""
    response = reports_team.post(REPORTS, EDITOR, json=_report())
    assert response.status_code == 201
    created = response.json()
    assert response.headers["location"] == f"{REPORTS}/{created['id']}"
    assert created == {
        "id": created["id"],
        "title": "Monthly sales",
        "description": "Orders and the big ones",
        "sections": [
            {
                "heading": "All orders",
                "query_id": ORDERS,
                "parameters": {},
                "display": "table",
                "row_cap": 50,
                "series": None,
                "values": [],
            },
            {
                "heading": "Big orders",
                "query_id": ABOVE,
                "parameters": {"above": 100},
                "display": "bar",
                "row_cap": 1000,
                "series": None,
                "values": [],
            },
        ],
        "visibility": "workspace",
        "members": [],
        "owner": reports_team.user_id(EDITOR),
    }
    fetched = reports_team.get(response.headers["location"], VIEWER)
    assert fetched.status_code == 200
    assert fetched.json() == created
    assert _titles(reports_team, VIEWER) == ["Monthly sales"]


def test_a_chart_section_keeps_its_series_and_value_columns(reports_team: Api) -> None:
    """A line chart grouped by a series column, with its value columns named, is read back
    as written (the columns are checked against the query's result when it runs)."""
    chart = {"display": "line", "series": "customer", "values": ["amount"]}
    created = _create(reports_team, **_one_section(**chart))
    assert {k: created["sections"][0][k] for k in chart} == chart
    fetched = reports_team.get(f"{REPORTS}/{created['id']}", VIEWER).json()
    assert fetched["sections"] == created["sections"]


@pytest.mark.parametrize("who", [EDITOR, ADMIN])
def test_editors_and_admins_write_reports(reports_team: Api, who: str) -> None:
    """Editors and admins create, replace and delete reports."""
    created = _create(reports_team, who)
    assert _put(reports_team, created["id"], who, title="Renamed").status_code == 200
    assert reports_team.delete(f"{REPORTS}/{created['id']}", who).status_code == 204


def test_a_viewer_reads_but_never_writes(reports_team: Api) -> None:
    """A viewer lists and reads reports; creating, replacing and deleting are 403 and
    change nothing."""
    created = _create(reports_team)
    response = reports_team.post(REPORTS, VIEWER, json=_report(title="Mine"))
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert _put(reports_team, created["id"], VIEWER, title="Mine").status_code == 403
    assert reports_team.delete(f"{REPORTS}/{created['id']}", VIEWER).status_code == 403
    assert reports_team.get(f"{REPORTS}/{created['id']}", VIEWER).json() == created
    assert _titles(reports_team, VIEWER) == ["Monthly sales"]


def test_members_only_reports_are_invisible_to_others(reports_team: Api) -> None:
    """A members-only report is read by its members and owner; to anyone else it is a 404
    exactly like a missing id, and it is left out of their list."""
    created = _create(reports_team, visibility="members", members=[reports_team.user_id(VIEWER)])
    for who in (EDITOR, VIEWER):
        assert reports_team.get(f"{REPORTS}/{created['id']}", who).status_code == 200
        assert _titles(reports_team, who) == ["Monthly sales"]
    hidden = reports_team.get(f"{REPORTS}/{created['id']}", ADMIN)
    missing = reports_team.get(f"{REPORTS}/no-such-report", ADMIN)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["detail"] == missing.json()["detail"]
    assert _titles(reports_team, ADMIN) == []
    assert _put(reports_team, created["id"], ADMIN).status_code == 404
    assert reports_team.delete(f"{REPORTS}/{created['id']}", ADMIN).status_code == 404


def test_a_report_is_invisible_to_another_workspace(reports_team: Api) -> None:
    """An admin of another workspace neither reads nor lists the report."""
    created = _create(reports_team)
    assert reports_team.get(f"{REPORTS}/{created['id']}", OUTSIDER).status_code == 404
    assert _titles(reports_team, OUTSIDER) == []


def test_a_replaced_report_keeps_its_id_and_owner(reports_team: Api) -> None:
    """PUT replaces everything written (title, sections, visibility); id and owner stay."""
    created = _create(reports_team)
    response = _put(
        reports_team,
        created["id"],
        ADMIN,
        title="Weekly",
        description="",
        sections=[{"heading": "Only", "query_id": ORDERS, "display": "line"}],
    )
    assert response.status_code == 200, response.text
    replaced = response.json()
    assert replaced["id"] == created["id"]
    assert replaced["owner"] == reports_team.user_id(EDITOR)
    assert replaced["title"] == "Weekly"
    assert [s["display"] for s in replaced["sections"]] == ["line"]
    assert reports_team.get(f"{REPORTS}/{created['id']}", VIEWER).json() == replaced


def test_a_deleted_report_is_gone(reports_team: Api) -> None:
    """After DELETE (204) the report is a 404 and out of the list; deleting again is 404."""
    created = _create(reports_team)
    assert reports_team.delete(f"{REPORTS}/{created['id']}", EDITOR).status_code == 204
    assert reports_team.get(f"{REPORTS}/{created['id']}", EDITOR).status_code == 404
    assert _titles(reports_team, EDITOR) == []
    assert reports_team.delete(f"{REPORTS}/{created['id']}", EDITOR).status_code == 404


def test_unreadable_ids_are_not_found(reports_team: Api) -> None:
    """Ids that cannot be ids (a NUL, 5,000 characters, a path trick) are plain 404s."""
    for report_id in ("%00", "a" * 5000, "..%2F..%2Fetc%2Fpasswd", "%E2%80%AE"):
        response = reports_team.get(f"{REPORTS}/{report_id}", VIEWER)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


# ---------------------------------------------------------------- validation


def _one_section(**section: Any) -> dict[str, Any]:
    return {"sections": [{"heading": "S", "query_id": ORDERS, **section}]}


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("title: empty", {"title": ""}, "title"),
    ("title: too long", {"title": "t" * 201}, "title"),
    ("title: control character", {"title": "a\x07b"}, "title"),
    ("title: bidi override", {"title": "a\u202eb"}, "title"),
    ("title: padded", {"title": " sales "}, "title"),
    ("title: not a string", {"title": 5}, "title"),
    ("description: too long", {"description": "d" * 5001}, "description"),
    ("sections: none", {"sections": []}, "sections"),
    (
        "sections: too many",
        {"sections": [{"heading": f"s{i}", "query_id": ORDERS} for i in range(MAX_SECTIONS + 1)]},
        "sections",
    ),
    ("sections: missing", {"sections": None}, "sections"),
    ("heading: empty", _one_section(heading=""), "sections.0.heading"),
    ("heading: too long", _one_section(heading="h" * 201), "sections.0.heading"),
    ("heading: newline", _one_section(heading="a\nb"), "sections.0.heading"),
    ("query: missing", _one_section(query_id="no-such-query"), "sections.0.query_id"),
    ("query: unreadable", _one_section(query_id=PRIVATE), "sections.0.query_id"),
    ("query: other workspace's", _one_section(query_id="q-orders-other"), "sections.0.query_id"),
    ("display: unknown", _one_section(display="pie"), "sections.0.display"),
    ("row cap: zero", _one_section(row_cap=0), "sections.0.row_cap"),
    ("row cap: too large", _one_section(row_cap=MAX_ROW_CAP + 1), "sections.0.row_cap"),
    ("row cap: text", _one_section(row_cap="many"), "sections.0.row_cap"),
    (
        "parameter: not declared",
        _one_section(parameters={"until": "2024-02-01"}),
        "sections.0.parameters.until",
    ),
    (
        "parameter: not a date",
        _one_section(parameters={"since": "yesterday"}),
        "sections.0.parameters.since",
    ),
    (
        "parameter: null",
        _one_section(parameters={"since": None}),
        "sections.0.parameters.since",
    ),
    (
        "parameter: an object",
        _one_section(parameters={"since": {"a": 1}}),
        "sections.0.parameters.since",
    ),
    ("section: unknown member", _one_section(chart="pie"), "sections.0.chart"),
    (
        "series: also a value column",
        _one_section(display="line", series="amount", values=["amount"]),
        "sections.0.series",
    ),
    ("series: on a table", _one_section(series="customer"), "sections.0.series"),
    ("series: empty", _one_section(display="bar", series=""), "sections.0.series"),
    (
        "values: named twice",
        _one_section(display="bar", values=["amount", "amount"]),
        "sections.0.values",
    ),
    ("values: too many", _one_section(display="bar", values=list("abcdefg")), "sections.0.values"),
    (
        "values: control character",
        _one_section(display="bar", values=["a\x07"]),
        "sections.0.values",
    ),
    ("visibility: unknown", {"visibility": "public"}, "visibility"),
    ("members: without members visibility", {"members": ["someone"]}, "members"),
    ("members: a stranger", {"visibility": "members", "members": ["someone"]}, "members"),
    ("unknown member", {"owner": "someone-else"}, "owner"),
]


@pytest.mark.parametrize(
    ("changes", "field"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_reports_are_refused_naming_the_field(
    reports_team: Api, changes: dict[str, Any], field: str
) -> None:
    """422 problem document whose `field` names the offending member; nothing is saved, and
    replacing with the same body is refused the same way."""
    reports_team.add_query("orders", workspace="other")
    created = _create(reports_team, title="kept")
    for response in (
        reports_team.post(REPORTS, EDITOR, json=_report(**changes)),
        _put(reports_team, created["id"], EDITOR, **changes),
    ):
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["code"] == "invalid_request"
        assert problem["field"] == field, problem
    assert _titles(reports_team, EDITOR) == ["kept"]
    assert reports_team.get(f"{REPORTS}/{created['id']}", EDITOR).json() == created


def test_an_unreadable_query_is_refused_like_a_missing_one(reports_team: Api) -> None:
    """A section naming a query the writer may not read gets the same words as one naming
    no query at all, so a report cannot be used to learn that a query exists."""
    private = reports_team.post(REPORTS, EDITOR, json=_report(**_one_section(query_id=PRIVATE)))
    missing = reports_team.post(REPORTS, EDITOR, json=_report(**_one_section(query_id="nope")))
    assert private.status_code == missing.status_code == 422
    assert private.json()["detail"] == missing.json()["detail"]


def test_the_openapi_schema_describes_the_reports_api(reports_team: Api) -> None:
    """Request bodies forbid unknown members; display is an enum; the CRUD operations are
    documented with their problem responses."""
    schema = reports_team.client.get("/openapi.json").json()
    write = schema["components"]["schemas"]["ReportWrite"]
    assert write["additionalProperties"] is False
    assert set(write["required"]) == {"title", "sections"}
    section = schema["components"]["schemas"]["SectionSpec"]
    assert section["additionalProperties"] is False
    assert section["properties"]["display"]["enum"] == ["table", "bar", "line"]
    paths = schema["paths"]
    assert set(paths[REPORTS]) == {"get", "post"}
    assert set(paths[f"{REPORTS}/{{report_id}}"]) == {"get", "put", "delete"}
    assert "403" in paths[REPORTS]["post"]["responses"]


# ---------------------------------------------------------------- exports of reports


def _export(api: Api, who: str, **body: Any) -> Any:
    return api.post(EXPORTS, who, json=body)


def test_a_report_export_is_queued_with_the_report_as_subject(reports_team: Api) -> None:
    """202 with Location; the export names the report as its subject, a file name made from
    the title, and the parameters as requested; reading it back gives the same."""
    report = _create(reports_team)
    response = _export(
        reports_team,
        VIEWER,
        report_id=report["id"],
        format="pdf",
        parameters={"since": "2024-01-15"},
    )
    assert response.status_code == 202, response.text
    export = response.json()
    assert response.headers["location"] == f"{EXPORTS}/{export['id']}"
    assert export["status"] == "queued"
    assert export["subject"] == {"type": "report", "id": report["id"], "name": "Monthly sales"}
    assert export["format"] == "pdf"
    assert export["filename"] == "Monthly-sales.pdf"
    assert export["parameters"] == {"since": "2024-01-15"}
    assert (
        reports_team.get(response.headers["location"], VIEWER).json()["subject"]
        == export["subject"]
    )


@pytest.mark.parametrize("fmt", ["xlsx", "html"])
def test_every_report_format_is_accepted(reports_team: Api, fmt: str) -> None:
    """xlsx and html are report formats too, with the matching file extension."""
    report = _create(reports_team)
    response = _export(reports_team, EDITOR, report_id=report["id"], format=fmt)
    assert response.status_code == 202, response.text
    assert response.json()["filename"] == f"Monthly-sales.{fmt}"


def test_formats_belong_to_their_subject(reports_team: Api) -> None:
    """A report cannot be exported as csv, nor a query as pdf or html: 422 naming `format`,
    and nothing is recorded."""
    report = _create(reports_team)
    refusals = [
        _export(reports_team, EDITOR, report_id=report["id"], format="csv"),
        _export(reports_team, EDITOR, report_id=report["id"], format="docx"),
        _export(reports_team, EDITOR, query_id=ORDERS, format="pdf"),
        _export(reports_team, EDITOR, query_id=ORDERS, format="html"),
    ]
    for response in refusals:
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "format"
    assert reports_team.get(EXPORTS, EDITOR).json()["items"] == []


def test_unreadable_reports_cannot_be_exported(reports_team: Api) -> None:
    """404, alike, for a missing report, a deleted one, a members-only one the caller is not
    in, one of another workspace, and one holding a query the caller may not read."""
    hidden = _create(reports_team, title="Hidden", visibility="members", members=[])
    deleted = _create(reports_team, title="Deleted")
    reports_team.delete(f"{REPORTS}/{deleted['id']}", EDITOR)
    holding_private = _create(
        reports_team, ADMIN, title="Holds private", sections=[{"heading": "P", "query_id": PRIVATE}]
    )
    outsider = _create(reports_team, title="Elsewhere")
    for report_id, who in [
        ("no-such-report", VIEWER),
        (deleted["id"], VIEWER),
        (hidden["id"], VIEWER),
        (outsider["id"], OUTSIDER),
        (holding_private["id"], VIEWER),
    ]:
        response = _export(reports_team, who, report_id=report_id, format="pdf")
        assert response.status_code == 404, (report_id, response.text)
        assert response.json()["code"] == "not_found"
    assert (
        _export(reports_team, ADMIN, report_id=holding_private["id"], format="pdf").status_code
        == 202
    )


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"until": "2024-02-01"}, "parameters.until"),
        ({"above": 5}, "parameters.above"),  # fixed by the report
        ({"since": "not a date"}, "parameters.since"),
    ],
    ids=["undeclared", "fixed by the report", "wrong type"],
)
def test_report_parameters_are_checked_at_request_time(
    reports_team: Api, parameters: dict[str, Any], field: str
) -> None:
    """A parameter no section's query takes, one the report fixes, or a value of the wrong
    type is refused with 422 naming `parameters.<name>`."""
    report = _create(reports_team)
    response = _export(
        reports_team, VIEWER, report_id=report["id"], format="pdf", parameters=parameters
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


def test_a_required_parameter_left_open_must_be_given(reports_team: Api) -> None:
    """A section whose query needs a value the report does not fix takes it from the request:
    without it the request is refused (422 parameters.above), with it it is queued."""
    report = _create(reports_team, sections=[{"heading": "Big", "query_id": ABOVE}])
    missing = _export(reports_team, VIEWER, report_id=report["id"], format="html")
    assert missing.status_code == 422
    assert missing.json()["field"] == "parameters.above"
    given = _export(
        reports_team, VIEWER, report_id=report["id"], format="html", parameters={"above": "12.5"}
    )
    assert given.status_code == 202, given.text


@pytest.mark.parametrize("fmt", ["pdf", "xlsx", "html"])
def test_a_report_export_succeeds_and_downloads(reports_team: Api, fmt: str) -> None:
    """Requested through the API and run by a worker, a report export succeeds with every
    section's rows counted, and its file downloads with the recorded size and sha256."""
    report = _create(
        reports_team,
        sections=[
            {"heading": "All orders", "query_id": ORDERS},  # 100 rows
            {"heading": "Big orders", "query_id": ABOVE, "parameters": {"above": 100}},  # 20
        ],
    )
    export_id = _export(reports_team, VIEWER, report_id=report["id"], format=fmt).json()["id"]
    reports_team.drain()
    export = reports_team.get(f"{EXPORTS}/{export_id}", VIEWER).json()
    assert export["status"] == "succeeded", export["failure"]
    assert export["row_count"] == 120
    response = reports_team.get(f"{EXPORTS}/{export_id}/file", VIEWER)
    assert response.status_code == 200
    body = response.content
    assert len(body) == export["size_bytes"]
    assert hashlib.sha256(body).hexdigest() == export["sha256"]
    assert f'filename="Monthly-sales.{fmt}"' in response.headers["content-disposition"]
    if fmt == "pdf":
        text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(body)).pages)
        assert "Monthly sales" in text
        assert "Big orders" in text
    elif fmt == "html":
        assert "Monthly sales" in body.decode()
    else:
        assert zipfile.is_zipfile(io.BytesIO(body))


def test_a_report_file_is_refused_once_a_query_in_it_is_unreadable(reports_team: Api) -> None:
    """After the export succeeded, a section's query made members-only without the
    requester: the file answers 403 access_lost, as for a query export."""
    report = _create(reports_team, sections=[{"heading": "All", "query_id": ORDERS}])
    export_id = _export(reports_team, VIEWER, report_id=report["id"], format="html").json()["id"]
    reports_team.drain()
    assert reports_team.get(f"{EXPORTS}/{export_id}/file", VIEWER).status_code == 200
    query = reports_team.deps.catalog.get_query(ORDERS)
    assert query is not None
    reports_team.deps.catalog.update_query(replace(query, visibility=Visibility.MEMBERS))
    refused = reports_team.get(f"{EXPORTS}/{export_id}/file", VIEWER)
    assert refused.status_code == 403
    assert refused.json()["code"] == "access_lost"
