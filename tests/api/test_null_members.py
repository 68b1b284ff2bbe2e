"""null for every member of every request body, found by walking /openapi.json.

A member whose schema admits null takes it with the meaning its schema documents; any other
member refuses it with 422 naming it. Never a 5xx, whatever the member or how deep it sits.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Api

CALLER = "admin@acme.test"
ORDERS = "q-orders-acme"  # the id conftest's add_query() gives the "orders" query
RECIPIENTS = [{"email": "ops@example.com"}, {"webhook": "https://hooks.example.com/qexport"}]
OPTIONS = {"neutralize_formulas": True}

# A valid body for each request schema, with every optional member given (so each one, and
# each member of the objects inside, is walked).
# Bodies whose valid form needs more than this app (a real server to connect to), with where
# their null members are checked instead.
CHECKED_ELSEWHERE = {
    "SourceWrite": "tests/api/test_adversarial_sources.py: a valid one needs a PostgreSQL role",
    "ApprovalDecision": "tests/api/test_approvals.py: a request is decided once (null reason too)",
}
BODIES: dict[str, dict[str, Any]] = {
    "QueryWrite": {
        "name": "daily",
        "sql": "SELECT * FROM orders WHERE day >= $since",
        "source": "shop",
        "parameters": [
            {"name": "since", "type": "date", "required": False, "default": "2024-01-01"}
        ],
        "visibility": "workspace",
        "members": [],
    },
    "ReportWrite": {
        "title": "weekly",
        "description": "orders by day",
        "sections": [
            {
                "heading": "Orders",
                "query_id": ORDERS,
                "parameters": {"since": "2024-01-01"},
                "display": "table",
                "row_cap": 10,
            }
        ],
        "visibility": "workspace",
        "members": [],
    },
    "ExportRequest": {
        "query_id": ORDERS,
        "format": "csv",
        "parameters": {"since": "2024-01-01"},
        "options": OPTIONS,
        "notify": RECIPIENTS,
    },
    "PreviewRequest": {"parameters": {"since": "2024-01-01"}, "limit": 10},
    "ScheduleRequest": {
        "query_id": ORDERS,
        "format": "csv",
        "parameters": {"since": "2024-01-01"},
        "cron": "0 8 * * 1",
        "timezone": "Europe/Berlin",
        "recipients": RECIPIENTS,
        "missed": "once",
        "enabled": True,
        "options": OPTIONS,
    },
    "ScheduleChange": {
        "query_id": ORDERS,
        "format": "csv",
        "parameters": {"since": "2024-01-01"},
        "cron": "30 7 * * 1-5",
        "timezone": "America/New_York",
        "recipients": RECIPIENTS,
        "missed": "skip",
        "enabled": True,
        "options": OPTIONS,
    },
    "WorkspaceChange": {"webhook_hosts": ["hooks.example.com"]},
    "LinkRequest": {"expires_in_days": 2},
    "WorkspacePolicyChange": {"formats": ["csv"], "max_rows": 1000, "public_links": True},
}


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a `$ref` names (followed to the end), or `schema` itself."""
    while "$ref" in schema:
        found: dict[str, Any] = spec
        for part in schema["$ref"].removeprefix("#/").split("/"):
            found = found[part]
        schema = found
    return schema


def _alternatives(spec: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schemas a value may match: those of an anyOf or oneOf, flattened, else `schema`."""
    schema = _resolve(spec, schema)
    if "anyOf" in schema or "oneOf" in schema:
        return [
            alt
            for each in schema.get("anyOf", schema.get("oneOf"))
            for alt in _alternatives(spec, each)
        ]
    return [schema]


def _admits_null(spec: dict[str, Any], schema: dict[str, Any]) -> bool:
    return any(alt.get("type") == "null" for alt in _alternatives(spec, schema))


def _object_schema(spec: dict[str, Any], schema: dict[str, Any], value: dict[str, Any]) -> Any:
    """The object alternative of `schema` that `value`'s members fit."""
    for alt in _alternatives(spec, schema):
        if alt.get("type") == "object" and set(value) <= set(alt.get("properties", value)):
            return alt
    raise AssertionError(f"no object schema fits {value!r}")


def _members(
    spec: dict[str, Any], schema: dict[str, Any], value: Any, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """(path, schema) of each member of each object in `value`, given or not, at any depth."""
    if isinstance(value, list):
        items = _resolve(spec, schema).get("items", {})
        for index, item in enumerate(value):
            yield from _members(spec, items, item, (*path, index))
    elif isinstance(value, dict):
        found = _object_schema(spec, schema, value)
        named: dict[str, Any] = found.get("properties", {})
        extra = found.get("additionalProperties")
        others = {key: extra for key in value if key not in named} if extra else {}
        for name, member in {**named, **others}.items():
            yield (*path, name), member
            if name in value:
                yield from _members(spec, member, value[name], (*path, name))


def _body(base: dict[str, Any], null_at: tuple[str | int, ...], n: int) -> dict[str, Any]:
    """`base` with null at `null_at` (if given), and a name no other query has (query names
    are unique in a workspace)."""
    body = copy.deepcopy(base)
    if isinstance(body.get("name"), str):
        body["name"] = f"{body['name']} {n}"
    if null_at:
        parent: Any = body
        for part in null_at[:-1]:
            parent = parent[part]
        parent[null_at[-1]] = None
    return body


@pytest.fixture
def admin_api(api: Api) -> Api:
    api.member(CALLER, "admin")
    api.add_query("orders")
    return api


def _targets(api: Api) -> dict[str, str]:
    """A value for each path parameter of an operation with a body: things that exist."""
    report = api.post("/api/v1/reports", CALLER, json=BODIES["ReportWrite"])
    schedule = api.post("/api/v1/schedules", CALLER, json=BODIES["ScheduleRequest"])
    assert (report.status_code, schedule.status_code) == (201, 201), report.text + schedule.text
    export = api.post("/api/v1/exports", CALLER, json={"query_id": ORDERS, "format": "csv"})
    assert export.status_code == 202, export.text
    api.drain()  # a succeeded export: links may be made to it
    return {
        "export_id": export.json()["id"],
        "query_id": ORDERS,
        "report_id": report.json()["id"],
        "schedule_id": schedule.json()["id"],
        "workspace_id": "acme",
    }


def test_null_for_any_member_of_any_request_body_is_taken_or_refused_by_name(
    admin_api: Api,
) -> None:
    """Each body member (nested ones too) set to null: 2xx or 422 naming it when its schema
    admits null, else 422 naming it; never a 5xx."""
    spec = admin_api.client.get("/openapi.json").json()
    targets = _targets(admin_api)
    wrong: list[str] = []
    walked = 0
    sent = itertools.count()
    for route, operations in spec["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in content:
                continue
            schema = content["application/json"]["schema"]
            body_name = schema["$ref"].rsplit("/", 1)[-1]
            if body_name in CHECKED_ELSEWHERE:
                continue
            assert body_name in BODIES, f"{method} {route}: add a valid {body_name} to BODIES"
            base = BODIES[body_name]
            url = route.format(**targets)
            accepted = admin_api.client.request(
                method, url, headers=admin_api.headers(CALLER), json=_body(base, (), next(sent))
            )
            assert accepted.status_code < 300, f"{method} {route}: {accepted.text[:300]}"
            for path, member in _members(spec, schema, base):
                walked += 1
                name = ".".join(str(part) for part in path)
                response = admin_api.client.request(
                    method,
                    url,
                    headers=admin_api.headers(CALLER),
                    json=_body(base, path, next(sent)),
                )
                field = response.json().get("field") if response.status_code == 422 else None
                nullable = _admits_null(spec, member)
                if field == name or (nullable and response.status_code < 300):
                    continue
                wrong.append(f"{method.upper()} {route} {name}=null: {response.text[:200]}")
    assert wrong == []
    assert walked >= 60
