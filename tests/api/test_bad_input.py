"""Bad input, table-driven: every case gets a 4xx problem document naming what is wrong,
never a 500, and nothing is recorded."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.api.conftest import EDITOR, Api

ORDERS = "q-orders-acme"  # the id conftest's add_query() gives the "orders" query
EXPORT = {"query_id": ORDERS, "format": "csv"}
QUERY = {"name": "daily", "sql": "SELECT 1 AS one", "source": "shop", "parameters": []}
SCHEDULE = {"query_id": ORDERS, "format": "csv", "cron": "0 8 * * 1"}
UNKNOWN_SCHEDULE = "/api/v1/schedules/00000000-0000-0000-0000-000000000000"


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def _without(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != key}


# (case id, method, path, body: JSON-able, raw bytes or None, expected status)
CASES: list[tuple[str, str, str, Any, int]] = [
    # POST /exports: the body
    ("export: not json", "post", "/api/v1/exports", b"format=csv", 422),
    ("export: a json list", "post", "/api/v1/exports", [EXPORT], 422),
    ("export: a json string", "post", "/api/v1/exports", "csv", 422),
    ("export: empty object", "post", "/api/v1/exports", {}, 422),
    ("export: no format", "post", "/api/v1/exports", _without(EXPORT, "format"), 422),
    ("export: no subject", "post", "/api/v1/exports", {"format": "csv"}, 422),
    (
        "export: query and report",
        "post",
        "/api/v1/exports",
        _with(EXPORT, report_id="r1"),
        422,
    ),
    ("export: unknown format", "post", "/api/v1/exports", _with(EXPORT, format="exe"), 422),
    ("export: format as number", "post", "/api/v1/exports", _with(EXPORT, format=3), 422),
    ("export: format padded", "post", "/api/v1/exports", _with(EXPORT, format=" csv"), 422),
    ("export: format null", "post", "/api/v1/exports", _with(EXPORT, format=None), 422),
    ("export: query id number", "post", "/api/v1/exports", _with(EXPORT, query_id=7), 422),
    ("export: query id list", "post", "/api/v1/exports", _with(EXPORT, query_id=[ORDERS]), 422),
    ("export: unknown query", "post", "/api/v1/exports", _with(EXPORT, query_id="nope"), 404),
    (
        "export: path trick in query id",
        "post",
        "/api/v1/exports",
        _with(EXPORT, query_id="../../etc/passwd"),
        404,
    ),
    (
        "export: unicode query id",
        "post",
        "/api/v1/exports",
        _with(EXPORT, query_id="\uff4f\uff52\uff44\uff45\uff52\uff53\u202e"),
        404,
    ),
    (
        "export: unknown report",
        "post",
        "/api/v1/exports",
        {"report_id": "r1", "format": "pdf"},
        404,
    ),
    ("export: extra member", "post", "/api/v1/exports", _with(EXPORT, sql="DROP TABLE x"), 422),
    ("export: parameters list", "post", "/api/v1/exports", _with(EXPORT, parameters=[1]), 422),
    (
        "export: unknown parameter",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"until": "2024-01-01"}),
        422,
    ),
    (
        "export: parameter not a date",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": "yesterday"}),
        422,
    ),
    (
        "export: impossible date",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": "2024-13-45"}),
        422,
    ),
    (
        "export: sql injection in a parameter",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": "2024-01-01'; DROP TABLE orders; --"}),
        422,
    ),
    (
        "export: parameter as object",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": {"$gt": ""}}),
        422,
    ),
    (
        "export: parameter of 20,000 characters",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": "9" * 20_000}),
        422,
    ),
    (
        "export: body over the size limit",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": "9" * 200_000}),
        413,
    ),
    (
        "export: NaN parameter",
        "post",
        "/api/v1/exports",
        b'{"query_id": "q-orders-acme", "format": "csv", "parameters": {"since": NaN}}',
        422,
    ),
    (
        "export: deeply nested parameters",
        "post",
        "/api/v1/exports",
        _with(EXPORT, parameters={"since": json.loads("[" * 500 + "]" * 500)}),
        422,
    ),
    (
        "export: neutralize option not a boolean",
        "post",
        "/api/v1/exports",
        _with(EXPORT, options={"neutralize_formulas": "no"}),
        422,
    ),
    (
        "export: unknown option",
        "post",
        "/api/v1/exports",
        _with(EXPORT, options={"execute_formulas": True}),
        422,
    ),
    (
        "export: notify with a bad address",
        "post",
        "/api/v1/exports",
        _with(EXPORT, notify=[{"email": "nobody"}]),
        422,
    ),
    (
        "export: notify by carrier pigeon",
        "post",
        "/api/v1/exports",
        _with(EXPORT, notify=[{"pigeon": "loft 3"}]),
        422,
    ),
    # GET /exports: filters and cursors
    ("list: unknown status", "get", "/api/v1/exports?status=done", None, 422),
    ("list: limit zero", "get", "/api/v1/exports?limit=0", None, 422),
    ("list: limit huge", "get", "/api/v1/exports?limit=1000000", None, 422),
    ("list: limit not a number", "get", "/api/v1/exports?limit=ten", None, 422),
    ("list: garbage cursor", "get", "/api/v1/exports?cursor=%%%", None, 422),
    ("list: cursor of json junk", "get", f"/api/v1/exports?cursor={_b64('{}')}", None, 422),
    ("list: cursor of text", "get", f"/api/v1/exports?cursor={_b64('x|y')}", None, 422),
    ("list: cursor of 5,000 characters", "get", "/api/v1/exports?cursor=" + "A" * 5000, None, 422),
    # GET /exports/{id}: ids that are not ids
    ("get: path trick", "get", "/api/v1/exports/..%2F..%2Fetc%2Fpasswd", None, 404),
    ("get: nul byte", "get", "/api/v1/exports/%00", None, 404),
    ("get: 5,000 character id", "get", "/api/v1/exports/" + "a" * 5000, None, 404),
    ("get: unicode id", "get", "/api/v1/exports/%E2%80%AEfdp.exe", None, 404),
    ("file: sql in the id", "get", "/api/v1/exports/1%20OR%201=1/file", None, 404),
    (
        "cancel: unknown id",
        "post",
        "/api/v1/exports/00000000-0000-0000-0000-000000000000/cancel",
        None,
        404,
    ),
    ("links: unknown export", "post", "/api/v1/exports/nope/links", None, 404),
    ("links: revoke unknown link", "delete", "/api/v1/links/nope", None, 404),
    ("deliveries: unknown export", "get", "/api/v1/exports/nope/deliveries", None, 404),
    # POST /schedules
    ("schedule: empty object", "post", "/api/v1/schedules", {}, 422),
    ("schedule: no cron", "post", "/api/v1/schedules", _without(SCHEDULE, "cron"), 422),
    ("schedule: 4-field cron", "post", "/api/v1/schedules", _with(SCHEDULE, cron="0 8 * *"), 422),
    (
        "schedule: hour 25 in cron",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, cron="0 25 * * *"),
        422,
    ),
    ("schedule: cron as words", "post", "/api/v1/schedules", _with(SCHEDULE, cron="weekly"), 422),
    (
        "schedule: unknown time zone",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, timezone="Mars/Olympus_Mons"),
        422,
    ),
    (
        "schedule: time zone path trick",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, timezone="../../etc/passwd"),
        422,
    ),
    (
        "schedule: bad email",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, recipients=[{"email": "ops at example.com"}]),
        422,
    ),
    (
        "schedule: non-http webhook",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, recipients=[{"webhook": "ftp://files.example.com/in"}]),
        422,
    ),
    (
        "schedule: webhook with a password",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, recipients=[{"webhook": "https://u:p@hooks.example.com/"}]),
        422,
    ),
    (
        "schedule: recipient with two channels",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, recipients=[{"email": "a@example.com", "webhook": "https://h.test/"}]),
        422,
    ),
    (
        "schedule: too many recipients",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, recipients=[{"email": f"u{i}@example.com"} for i in range(51)]),
        422,
    ),
    (
        "schedule: query and report",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, report_id="r1"),
        422,
    ),
    (
        "schedule: no subject",
        "post",
        "/api/v1/schedules",
        _without(SCHEDULE, "query_id"),
        422,
    ),
    (
        "schedule: unknown missed value",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, missed="all"),
        422,
    ),
    (
        "schedule: csv of a report",
        "post",
        "/api/v1/schedules",
        {"report_id": "r1", "format": "csv", "cron": "0 8 * * 1"},
        422,
    ),
    ("schedule: pdf of a query", "post", "/api/v1/schedules", _with(SCHEDULE, format="pdf"), 422),
    (
        "schedule: unknown query",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, query_id="nope"),
        404,
    ),
    (
        "schedule: unknown parameter",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, parameters={"until": "2024-01-01"}),
        422,
    ),
    (
        "schedule: enabled not a boolean",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, enabled="yes"),
        422,
    ),
    ("schedule: extra member", "post", "/api/v1/schedules", _with(SCHEDULE, owner="x"), 422),
    ("schedule: get unknown", "get", UNKNOWN_SCHEDULE, None, 404),
    ("schedule: get path trick", "get", "/api/v1/schedules/..%2Fsigning-key", None, 404),
    ("schedule: patch unknown", "patch", UNKNOWN_SCHEDULE, {"enabled": False}, 404),
    ("schedule: patch recipients null", "patch", UNKNOWN_SCHEDULE, {"recipients": None}, 422),
    ("schedule: patch parameters null", "patch", UNKNOWN_SCHEDULE, {"parameters": None}, 422),
    ("schedule: patch query id null alone", "patch", UNKNOWN_SCHEDULE, {"query_id": None}, 422),
    ("schedule: delete unknown", "delete", UNKNOWN_SCHEDULE, None, 404),
    ("schedule: run unknown", "post", f"{UNKNOWN_SCHEDULE}/run", None, 404),
    ("schedule: signing key as editor", "get", "/api/v1/schedules/signing-key", None, 403),
    # POST /queries
    ("query: empty name", "post", "/api/v1/queries", _with(QUERY, name=""), 422),
    (
        "query: control character in name",
        "post",
        "/api/v1/queries",
        _with(QUERY, name="a\x00b"),
        422,
    ),
    ("query: name of 500 characters", "post", "/api/v1/queries", _with(QUERY, name="n" * 500), 422),
    ("query: empty sql", "post", "/api/v1/queries", _with(QUERY, sql=""), 422),
    ("query: sql not a string", "post", "/api/v1/queries", _with(QUERY, sql=["SELECT 1"]), 422),
    ("query: unknown source", "post", "/api/v1/queries", _with(QUERY, source="nowhere"), 422),
    (
        "query: unknown parameter type",
        "post",
        "/api/v1/queries",
        _with(QUERY, parameters=[{"name": "x", "type": "blob", "required": True}]),
        422,
    ),
    (
        "query: parameter name not an identifier",
        "post",
        "/api/v1/queries",
        _with(QUERY, parameters=[{"name": "1; drop", "type": "string", "required": True}]),
        422,
    ),
    (
        "query: duplicate parameter names",
        "post",
        "/api/v1/queries",
        _with(
            QUERY,
            parameters=[
                {"name": "x", "type": "string", "required": True},
                {"name": "x", "type": "integer", "required": True},
            ],
        ),
        422,
    ),
    (
        "query: default of the wrong type",
        "post",
        "/api/v1/queries",
        _with(
            QUERY,
            parameters=[{"name": "n", "type": "integer", "required": False, "default": "ten"}],
        ),
        422,
    ),
    (
        "query: unknown visibility",
        "post",
        "/api/v1/queries",
        _with(QUERY, visibility="everyone"),
        422,
    ),
    (
        "query: sql over the size limit",
        "post",
        "/api/v1/queries",
        _with(QUERY, sql="S" * 100_000),
        413,
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_input_gets_a_problem_document(
    editor_api: Api, method: str, path: str, body: Any, status: int
) -> None:
    """The documented 4xx status with an application/problem+json body and its code; no
    export, query or schedule is recorded."""
    kwargs: dict[str, Any] = {}
    if isinstance(body, bytes):
        kwargs = {"content": body, "headers": {"Content-Type": "application/json"}}
    elif body is not None:
        kwargs = {"json": body}
    headers = {**editor_api.headers(EDITOR), **kwargs.pop("headers", {})}
    response = editor_api.client.request(method.upper(), path, headers=headers, **kwargs)
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status
    assert isinstance(problem["code"], str)
    assert problem["code"] != "internal"
    assert editor_api.deps.exports.list_exports(workspace_id="acme") == []
    assert [q.name for q in editor_api.deps.catalog.list_queries("acme")] == ["orders"]
    assert editor_api.context.schedules.list_schedules("acme") == []


def test_there_are_at_least_forty_cases() -> None:
    """The table keeps its breadth: at least 40 distinct bad inputs."""
    assert len({case[0] for case in CASES}) == len(CASES) >= 40


BAD_TOKENS = [
    "",
    "Bearer",
    "Bearer ",
    "Basic dXNlcjpwYXNz",
    "Bearer qx_",
    "Bearer " + "x" * 10_000,
    "Bearer qx_0123456789abcdef_" + "A" * 43,
    "Bearer qx_0123456789ABCDEF_" + "A" * 43,
    "Bearer qx_0123456789abcdef_" + "A" * 42 + "%",
]


@pytest.mark.parametrize("authorization", BAD_TOKENS)
def test_malformed_credentials_get_401(editor_api: Api, authorization: str) -> None:
    """Malformed or unknown credentials: 401, a problem document, and nothing more."""
    response = editor_api.client.get("/api/v1/exports", headers={"Authorization": authorization})
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


# (case id, method, path, body, the member the problem document must name)
NAMED: list[tuple[str, str, str, Any, str]] = [
    (
        "null email",
        "post",
        "/api/v1/exports",
        _with(EXPORT, notify=[{"email": None}]),
        "notify.0.email",
    ),
    (
        "null webhook",
        "post",
        "/api/v1/exports",
        _with(EXPORT, notify=[{"email": "a@example.com"}, {"webhook": None}]),
        "notify.1.webhook",
    ),
    (
        "webhook as a number",
        "post",
        "/api/v1/schedules",
        _with(SCHEDULE, recipients=[{"webhook": 7}]),
        "recipients.0.webhook",
    ),
    ("patch: null recipients", "patch", UNKNOWN_SCHEDULE, {"recipients": None}, "recipients"),
    ("patch: null parameters", "patch", UNKNOWN_SCHEDULE, {"parameters": None}, "parameters"),
    (
        "patch: null webhook",
        "patch",
        UNKNOWN_SCHEDULE,
        {"recipients": [{"webhook": None}]},
        "recipients.0.webhook",
    ),
    (
        "patch: null formula option",
        "patch",
        UNKNOWN_SCHEDULE,
        {"options": {"neutralize_formulas": None}},
        "options.neutralize_formulas",
    ),
    (
        "query: default as a list",
        "post",
        "/api/v1/queries",
        _with(QUERY, parameters=[{"name": "n", "type": "integer", "default": [1]}]),
        "parameters.0.default",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [case[1:] for case in NAMED],
    ids=[case[0] for case in NAMED],
)
def test_a_bad_member_is_named_as_the_request_spells_it(
    editor_api: Api, method: str, path: str, body: Any, field: str
) -> None:
    """422 whose `field` is the member's path in the request body: never a 500, and never
    pydantic's names for the alternatives of a union (`EmailRecipient`, `list[...]`)."""
    response = editor_api.client.request(
        method.upper(), path, headers=editor_api.headers(EDITOR), json=body
    )
    assert response.status_code == 422, response.text[:300]
    assert response.json()["field"] == field
    assert field in response.json()["detail"]
