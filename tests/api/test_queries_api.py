"""`/api/v1/queries`: create, list, read, replace, delete; roles, visibility, validation."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from qexport.domain.sources import RegisteredSource
from tests.api.conftest import SOURCE, Api

ADMIN = "admin@acme.test"
EDITOR = "editor@acme.test"
VIEWER = "viewer@acme.test"
OUTSIDER = "outsider@other.test"
QUERIES = "/api/v1/queries"
DAILY: dict[str, Any] = {
    "name": "daily orders",
    "sql": "SELECT id, amount FROM orders WHERE day >= $since AND amount > $above ORDER BY id",
    "source": SOURCE,
    "parameters": [
        {"name": "since", "type": "date", "default": "2024-01-20"},
        {"name": "above", "type": "number", "required": True},
    ],
}


@pytest.fixture
def queries_team(api: Api) -> Api:
    """An admin, an editor and a viewer in acme; an admin of another workspace."""
    api.member(ADMIN, "admin")
    api.member(EDITOR, "editor")
    api.member(VIEWER, "viewer")
    api.member(OUTSIDER, "admin", workspace="other")
    return api


def _create(api: Api, who: str = EDITOR, **changes: Any) -> dict[str, Any]:
    response = api.post(QUERIES, who, json={**DAILY, **changes})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _put(api: Api, query_id: str, who: str, **changes: Any) -> Any:
    return api.client.put(
        f"{QUERIES}/{query_id}", headers=api.headers(who), json={**DAILY, **changes}
    )


def _names(api: Api, who: str) -> list[str]:
    response = api.get(QUERIES, who)
    assert response.status_code == 200
    return [q["name"] for q in response.json()["items"]]


# ---------------------------------------------------------------- create and read


def test_a_created_query_is_at_its_location(queries_team: Api) -> None:
    """201 with Location; reading it there gives back what was written, with its owner and
    the parameters' defaults (required unless a default is given)."""
    response = queries_team.post(QUERIES, EDITOR, json=DAILY)
    assert response.status_code == 201
    created = response.json()
    assert response.headers["location"] == f"{QUERIES}/{created['id']}"
    assert created == {
        "id": created["id"],
        "name": "daily orders",
        "sql": DAILY["sql"],
        "source": SOURCE,
        "parameters": [
            {"name": "since", "type": "date", "required": False, "default": "2024-01-20"},
            {"name": "above", "type": "number", "required": True, "default": None},
        ],
        "visibility": "workspace",
        "members": [],
        "owner": queries_team.user_id(EDITOR),
        "columns": [{"name": "id", "type": "BIGINT"}, {"name": "amount", "type": "DECIMAL(10,2)"}],
        "filename_template": "{name}_{date}",
    }
    fetched = queries_team.get(response.headers["location"], VIEWER)
    assert fetched.status_code == 200
    assert fetched.json() == created


@pytest.mark.parametrize("who", [EDITOR, ADMIN])
def test_editors_and_admins_write_queries(queries_team: Api, who: str) -> None:
    """Both roles create, replace and delete."""
    created = _create(queries_team, who)
    assert _put(queries_team, created["id"], who, name="renamed").status_code == 200
    assert queries_team.delete(f"{QUERIES}/{created['id']}", who).status_code == 204


def test_a_viewer_reads_but_never_writes(queries_team: Api) -> None:
    """Viewers list and read; creating, replacing and deleting are 403 "forbidden", and
    nothing changes."""
    created = _create(queries_team)
    path = f"{QUERIES}/{created['id']}"
    refused = [
        queries_team.post(QUERIES, VIEWER, json={**DAILY, "name": "mine"}),
        _put(queries_team, created["id"], VIEWER, name="hijacked"),
        queries_team.delete(path, VIEWER),
    ]
    for response in refused:
        assert response.status_code == 403
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "forbidden"
    assert queries_team.get(path, VIEWER).json() == created
    assert _names(queries_team, VIEWER) == ["daily orders"]


def test_a_query_written_through_the_api_runs(queries_team: Api) -> None:
    """Its parameters (a default and a required one) bind as declared when exported."""
    created = _create(queries_team)
    response = queries_team.post(
        "/api/v1/exports",
        VIEWER,
        json={"query_id": created["id"], "format": "jsonl", "parameters": {"above": "60"}},
    )
    assert response.status_code == 202, response.text
    assert queries_team.drain() == {"succeeded": 1}
    export = queries_team.get(f"/api/v1/exports/{response.json()['id']}", VIEWER).json()
    assert export["status"] == "succeeded"
    # From 2024-01-20 (day = Jan 1 + id % 30): ids 19..29, 49..59, 79..89; amount = id * 1.25
    # > 60 keeps ids 49 and up: 22 rows.
    assert export["parameters"] == {"since": "2024-01-20", "above": "60"}
    assert export["row_count"] == 22


# ---------------------------------------------------------------- visibility


def test_members_only_queries_are_invisible_to_others(queries_team: Api) -> None:
    """A query for some members lists and reads for them and its owner; for anyone else it
    is a 404 exactly like a missing query, for reads and writes alike."""
    created = _create(queries_team, visibility="members", members=[queries_team.user_id(VIEWER)])
    path = f"{QUERIES}/{created['id']}"
    assert created["members"] == [queries_team.user_id(VIEWER)]
    assert _names(queries_team, EDITOR) == ["daily orders"]  # the owner
    assert _names(queries_team, VIEWER) == ["daily orders"]  # a listed member
    assert _names(queries_team, ADMIN) == []  # admins see every export, not every query
    missing = queries_team.get(f"{QUERIES}/00000000-0000-0000-0000-000000000000", ADMIN)
    hidden = [
        queries_team.get(path, ADMIN),
        _put(queries_team, created["id"], ADMIN, name="x"),
        queries_team.delete(path, ADMIN),
        queries_team.get(path, OUTSIDER),
        queries_team.delete(path, OUTSIDER),
    ]
    for response in [missing, *hidden]:
        assert response.status_code == 404
        assert response.json() == missing.json()
    assert queries_team.get(path, EDITOR).status_code == 200


def test_a_workspace_query_is_invisible_to_another_workspace(queries_team: Api) -> None:
    """Another workspace's admin neither lists, reads, replaces nor deletes it."""
    created = _create(queries_team)
    path = f"{QUERIES}/{created['id']}"
    assert _names(queries_team, OUTSIDER) == []
    assert queries_team.get(path, OUTSIDER).status_code == 404
    assert _put(queries_team, created["id"], OUTSIDER).status_code == 404
    assert queries_team.delete(path, OUTSIDER).status_code == 404
    assert queries_team.get(path, VIEWER).status_code == 200


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"visibility": "members", "members": ["nobody"]}, "'nobody' is not a member"),
        ({"visibility": "workspace", "members": ["x"]}, '"visibility": "members"'),
    ],
)
def test_members_must_be_workspace_members(
    queries_team: Api, changes: dict[str, Any], message: str
) -> None:
    """Only members of the workspace can be listed, and only for "members" visibility."""
    response = queries_team.post(QUERIES, EDITOR, json={**DAILY, **changes})
    assert response.status_code == 422
    assert response.json()["field"] == "members"
    assert message in response.json()["detail"]


def test_a_member_of_another_workspace_cannot_be_listed(queries_team: Api) -> None:
    """Being a user somewhere is not enough: the member must belong to this workspace."""
    response = queries_team.post(
        QUERIES,
        EDITOR,
        json={**DAILY, "visibility": "members", "members": [queries_team.user_id(OUTSIDER)]},
    )
    assert response.status_code == 422
    assert response.json()["field"] == "members"


# ---------------------------------------------------------------- replace and delete


def test_a_replaced_query_keeps_its_id_and_owner(queries_team: Api) -> None:
    """PUT replaces everything written; the id and owner stay; reads see the new version."""
    created = _create(queries_team, EDITOR)
    response = _put(
        queries_team,
        created["id"],
        ADMIN,
        name="weekly orders",
        sql="SELECT 1 AS one",
        parameters=[],
        visibility="members",
        members=[queries_team.user_id(VIEWER)],
    )
    assert response.status_code == 200, response.text
    replaced = response.json()
    assert replaced["id"] == created["id"]
    assert replaced["owner"] == queries_team.user_id(EDITOR)
    assert (replaced["name"], replaced["sql"], replaced["parameters"]) == (
        "weekly orders",
        "SELECT 1 AS one",
        [],
    )
    assert queries_team.get(f"{QUERIES}/{created['id']}", VIEWER).json() == replaced


def test_names_are_unique_among_live_queries(queries_team: Api) -> None:
    """A taken name is refused on create and on rename (422, field "name"); once the query
    is deleted the name is free again."""
    first = _create(queries_team)
    second = _create(queries_team, name="other")
    duplicate = queries_team.post(QUERIES, EDITOR, json=DAILY)
    rename = _put(queries_team, second["id"], EDITOR, name=DAILY["name"])
    for response in (duplicate, rename):
        assert response.status_code == 422
        assert response.json()["field"] == "name"
    assert _put(queries_team, first["id"], EDITOR).status_code == 200  # keeping its own name
    assert queries_team.delete(f"{QUERIES}/{first['id']}", EDITOR).status_code == 204
    assert _create(queries_team)["name"] == DAILY["name"]


def test_a_deleted_query_is_gone(queries_team: Api) -> None:
    """204 with no body; then it is neither listed nor readable, and deleting again is 404."""
    created = _create(queries_team)
    path = f"{QUERIES}/{created['id']}"
    response = queries_team.delete(path, EDITOR)
    assert response.status_code == 204
    assert response.content == b""
    assert _names(queries_team, EDITOR) == []
    assert queries_team.get(path, EDITOR).status_code == 404
    assert queries_team.delete(path, EDITOR).status_code == 404
    assert _put(queries_team, created["id"], EDITOR).status_code == 404


def test_deleting_a_query_fails_its_unsettled_exports_access_lost(queries_team: Api) -> None:
    """An export requested before the query was deleted settles failed/access_lost at the
    worker's pre-run check; no file is produced."""
    created = _create(queries_team)
    response = queries_team.post(
        "/api/v1/exports",
        VIEWER,
        json={"query_id": created["id"], "format": "csv", "parameters": {"above": 1}},
    )
    assert response.status_code == 202, response.text
    export_path = f"/api/v1/exports/{response.json()['id']}"
    assert queries_team.delete(f"{QUERIES}/{created['id']}", EDITOR).status_code == 204
    queries_team.drain()
    export = queries_team.get(export_path, VIEWER).json()
    assert export["status"] == "failed"
    assert export["failure"]["code"] == "access_lost"
    assert export["size_bytes"] is None
    assert queries_team.get(f"{export_path}/file", VIEWER).status_code == 409


# ---------------------------------------------------------------- sources


def test_the_source_must_exist(queries_team: Api) -> None:
    """An unknown source is refused (422, field "source"), and so is the built-in demo
    source outside the demo workspace; a configured source granted to the workspace is
    accepted."""
    for source in ("warehouse", "demo"):
        response = queries_team.post(QUERIES, EDITOR, json={**DAILY, "source": source})
        assert response.status_code == 422
        assert response.json()["field"] == "source"
        assert source in response.json()["detail"]
    assert _create(queries_team, name="on shop", source="shop")["source"] == "shop"


def test_a_source_registered_while_running_is_accepted(
    queries_team: Api, tmp_path: Path, source_template: Path
) -> None:
    """A source added with `qexport sources add` after the API started can be named at once."""
    refused = queries_team.post(QUERIES, EDITOR, json={**DAILY, "source": "warehouse"})
    assert refused.status_code == 422
    warehouse = tmp_path / "warehouse.duckdb"
    shutil.copy(source_template, warehouse)
    queries_team.context.accounts.add_source(
        RegisteredSource(
            "warehouse",
            f"duckdb://{warehouse}",
            "acme",
            frozenset(),
            False,
            queries_team.clock.now(),
        )
    )
    assert _create(queries_team, source="warehouse")["source"] == "warehouse"


# ---------------------------------------------------------------- validation

PARAM = {"name": "n", "type": "integer", "required": True}

INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("name: empty", {"name": ""}, "name"),
    ("name: 201 characters", {"name": "n" * 201}, "name"),
    ("name: a newline", {"name": "daily\norders"}, "name"),
    ("name: a NUL", {"name": "daily\x00"}, "name"),
    ("name: escape sequence", {"name": "\x1b[31mred"}, "name"),
    ("name: bidi override", {"name": "report\u202etxt.exe"}, "name"),
    ("name: zero-width space", {"name": "daily\u200borders"}, "name"),
    ("name: only spaces", {"name": "   "}, "name"),
    ("name: trailing space", {"name": "daily "}, "name"),
    ("name: not a string", {"name": 7}, "name"),
    ("sql: empty", {"sql": ""}, "sql"),
    ("sql: blank", {"sql": " \n\t "}, "sql"),
    ("sql: a NUL", {"sql": "SELECT 1\x00"}, "sql"),
    ("sql: over 50,000 characters", {"sql": "S" * 50_001}, "sql"),
    ("source: empty", {"source": ""}, "source"),
    ("source: path trick", {"source": "../shop"}, "source"),
    ("parameters: not a list", {"parameters": {"n": "integer"}}, "parameters"),
    (
        "parameters: 51 of them",
        {"parameters": [{**PARAM, "name": f"p{i}"} for i in range(51)]},
        "parameters",
    ),
    (
        "parameter: name with a space",
        {"parameters": [{**PARAM, "name": "a b"}]},
        "parameters.0.name",
    ),
    (
        "parameter: name starting with a digit",
        {"parameters": [{**PARAM, "name": "1n"}]},
        "parameters.0.name",
    ),
    (
        "parameter: name with sql",
        {"parameters": [{**PARAM, "name": "n; DROP TABLE x"}]},
        "parameters.0.name",
    ),
    (
        "parameter: name with a final newline",
        {"parameters": [{**PARAM, "name": "n\n"}]},
        "parameters.0.name",
    ),
    (
        "parameter: non-ascii name",
        {"parameters": [{**PARAM, "name": "n\u00e9"}]},
        "parameters.0.name",
    ),
    (
        "parameter: 64-character name",
        {"parameters": [{**PARAM, "name": "n" * 64}]},
        "parameters.0.name",
    ),
    ("parameter: unknown type", {"parameters": [{**PARAM, "type": "money"}]}, "parameters.0.type"),
    ("parameter: no type", {"parameters": [{"name": "n"}]}, "parameters.0.type"),
    (
        "parameter: unknown member",
        {"parameters": [{**PARAM, "format": "x"}]},
        "parameters.0.format",
    ),
    (
        "parameter: the requester context in another case",
        {"parameters": [{**PARAM, "name": "User_ID"}]},
        "parameters.0.name",
    ),
    (
        "parameter: the requester context",
        {"parameters": [{**PARAM, "name": "workspace_id"}]},
        "parameters.0.name",
    ),
    (
        "parameter: declared twice",
        {"parameters": [PARAM, {**PARAM, "type": "string"}]},
        "parameters.1",
    ),
    (
        "parameter: default not an integer",
        {"parameters": [{"name": "n", "type": "integer", "default": "ten"}]},
        "parameters.0.default",
    ),
    (
        "parameter: default not a date",
        {"parameters": [{"name": "d", "type": "date", "default": "2024-02-30"}]},
        "parameters.0.default",
    ),
    (
        "parameter: boolean default for an integer",
        {"parameters": [{"name": "n", "type": "integer", "default": True}]},
        "parameters.0.default",
    ),
    (
        "parameter: integer default beyond 64 bits",
        {"parameters": [{"name": "n", "type": "integer", "default": "9" * 30}]},
        "parameters.0.default",
    ),
    (
        "parameter: object default",
        {"parameters": [{"name": "n", "type": "string", "default": {"a": 1}}]},
        "parameters.0.default",
    ),
    (
        "parameter: required with a default",
        {"parameters": [{"name": "n", "type": "integer", "required": True, "default": 3}]},
        "parameters.0.required",
    ),
    ("visibility: unknown", {"visibility": "public"}, "visibility"),
    ("members: not a list", {"visibility": "members", "members": "everyone"}, "members"),
    ("unknown member", {"owner": "someone-else"}, "owner"),
]


@pytest.mark.parametrize(
    ("changes", "field"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_queries_are_refused_naming_the_field(
    queries_team: Api, changes: dict[str, Any], field: str
) -> None:
    """422 problem document whose `field` names the offending member (or starts with it);
    nothing is saved, and replacing with the same body is refused the same way."""
    created = _create(queries_team, name="kept")
    for response in (
        queries_team.post(QUERIES, EDITOR, json={**DAILY, **changes}),
        _put(queries_team, created["id"], EDITOR, **changes),
    ):
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["code"] == "invalid_request"
        assert problem["field"].startswith(field), problem
    assert _names(queries_team, EDITOR) == ["kept"]
    assert queries_team.get(f"{QUERIES}/{created['id']}", EDITOR).json() == created


def test_unreadable_ids_are_not_found(queries_team: Api) -> None:
    """Ids that cannot be ids (a NUL, 5,000 characters, a path trick) are plain 404s."""
    for query_id in ("%00", "a" * 5000, "..%2F..%2Fetc%2Fpasswd", "%E2%80%AE"):
        response = queries_team.get(f"{QUERIES}/{query_id}", VIEWER)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


# ---------------------------------------------------------------- the schema


def test_the_openapi_schema_describes_the_queries_api(queries_team: Api) -> None:
    """Request bodies forbid unknown members; each operation documents its problem
    responses as application/problem+json; PUT is the update."""
    schema = queries_team.client.get("/openapi.json").json()
    write = schema["components"]["schemas"]["QueryWrite"]
    assert write["additionalProperties"] is False
    assert set(write["required"]) == {"name", "sql", "source"}
    param = schema["components"]["schemas"]["ParameterSpec"]
    assert param["additionalProperties"] is False
    operations = {
        ("post", QUERIES): {"201", "401", "403", "422"},
        ("get", QUERIES): {"200", "401"},
        ("get", f"{QUERIES}/{{query_id}}"): {"200", "401", "404"},
        ("put", f"{QUERIES}/{{query_id}}"): {"200", "401", "403", "404", "422"},
        ("delete", f"{QUERIES}/{{query_id}}"): {"204", "401", "403", "404"},
    }
    for (method, path), statuses in operations.items():
        responses = schema["paths"][path][method]["responses"]
        assert statuses <= set(responses), (method, path)
        for status in statuses - {"200", "201", "204"}:
            assert "application/problem+json" in responses[status]["content"]
    assert "patch" not in schema["paths"][f"{QUERIES}/{{query_id}}"]
