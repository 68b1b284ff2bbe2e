"""Saving a query through the API asks its source to describe the statement: mistakes are
refused at save time (422, field "sql", with the source's message and position), the
described columns are stored and shown, on SQLite and PostgreSQL metadata alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qexport.domain.sources import RegisteredSource
from tests.api.conftest import SOURCE, Api

EDITOR = "editor@acme.test"
QUERIES = "/api/v1/queries"
GOOD: dict[str, Any] = {
    "name": "big orders",
    "sql": "SELECT id, amount, day FROM orders WHERE amount > $above ORDER BY id",
    "source": SOURCE,
    "parameters": [{"name": "above", "type": "number", "required": True}],
}


@pytest.fixture
def check_team(api_both: Api) -> Api:
    api_both.member(EDITOR, "editor")
    return api_both


def _names(api: Api) -> list[str]:
    return [q["name"] for q in api.get(QUERIES, EDITOR).json()["items"]]


def test_a_saved_query_carries_the_columns_its_source_described(check_team: Api) -> None:
    """201, and the query as created and as read back lists its result's columns with the
    source's types."""
    created = check_team.post(QUERIES, EDITOR, json=GOOD)
    assert created.status_code == 201, created.text
    columns = [
        {"name": "id", "type": "BIGINT"},
        {"name": "amount", "type": "DECIMAL(10,2)"},
        {"name": "day", "type": "DATE"},
    ]
    assert created.json()["columns"] == columns
    assert check_team.get(created.headers["location"], EDITOR).json()["columns"] == columns


REFUSED: list[tuple[str, str, str, dict[str, int] | None]] = [
    (
        "syntax error",
        "SELECT id,\n  amount FORM orders",
        'syntax error at or near "orders" (line 2, column 15)',
        {"line": 2, "column": 15},
    ),
    ("missing table", "SELECT * FROM no_such_table", "no_such_table does not exist", None),
    ("missing column", "SELECT nope FROM orders", 'column "nope" not found', None),
    ("delete", "DELETE FROM orders", "only a single SELECT statement is allowed; got DELETE", None),
    ("unbound parameter", "SELECT * FROM orders WHERE id = $id", "no such parameter", None),
    (
        "two statements",
        "SELECT 1; SELECT 2",
        "only a single SELECT statement is allowed; got 2 statements",
        None,
    ),
    ("file reader", "SELECT * FROM read_csv('/etc/passwd')", "read_csv() is not allowed", None),
    ("path scan", "SELECT * FROM '/etc/passwd'", "reading the file '/etc/passwd'", None),
]


@pytest.mark.parametrize(
    ("sql", "message", "position"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_sql_the_source_refuses_is_not_saved(
    check_team: Api, sql: str, message: str, position: dict[str, int] | None
) -> None:
    """A syntax error (with its line and column), a missing table or column, a DELETE, a
    parameter the query does not declare, two statements or a file read: 422 on field "sql"
    with the source's message, and nothing saved."""
    response = check_team.post(QUERIES, EDITOR, json={**GOOD, "sql": sql, "parameters": []})
    assert response.status_code == 422, response.text
    body = response.json()
    assert (body["code"], body["field"]) == ("invalid_request", "sql")
    assert message in body["detail"]
    assert body.get("position") == position
    assert _names(check_team) == []


def test_a_statement_of_a_megabyte_is_refused_before_the_source_sees_it(check_team: Api) -> None:
    """1 MB of SQL: 422 on field "sql", nothing saved."""
    sql = "SELECT " + "1 + " * 262_144 + "1"
    response = check_team.post(QUERIES, EDITOR, json={**GOOD, "sql": sql})
    assert response.status_code in (413, 422), response.text
    if response.status_code == 422:
        assert response.json()["field"] == "sql"
    assert _names(check_team) == []


def test_a_replacement_the_source_refuses_leaves_the_query_as_it_was(check_team: Api) -> None:
    """PUT with a missing table: 422 on "sql"; the saved query keeps its SQL and columns.
    A good replacement stores the new columns."""
    created = check_team.post(QUERIES, EDITOR, json=GOOD).json()
    url = f"{QUERIES}/{created['id']}"
    broken = check_team.client.put(
        url, headers=check_team.headers(EDITOR), json={**GOOD, "sql": "SELECT * FROM gone"}
    )
    assert broken.status_code == 422
    assert broken.json()["field"] == "sql"
    assert check_team.get(url, EDITOR).json() == created
    replaced = check_team.client.put(
        url,
        headers=check_team.headers(EDITOR),
        json={**GOOD, "sql": "SELECT customer FROM orders", "parameters": []},
    )
    assert replaced.status_code == 200, replaced.text
    assert check_team.get(url, EDITOR).json()["columns"] == [
        {"name": "customer", "type": "VARCHAR"}
    ]


def test_parameters_are_described_with_their_types(check_team: Api) -> None:
    """A parameter's declared type (or its default) types the column it appears in."""
    body = {
        **GOOD,
        "sql": "SELECT $since AS since, $n AS n, $flag AS flag, $word AS word",
        "parameters": [
            {"name": "since", "type": "date", "default": "2024-01-01"},
            {"name": "n", "type": "integer", "required": True},
            {"name": "flag", "type": "boolean", "required": False},
            {"name": "word", "type": "string", "required": True},
        ],
    }
    created = check_team.post(QUERIES, EDITOR, json=body)
    assert created.status_code == 201, created.text
    assert [c["type"] for c in created.json()["columns"]] == [
        "DATE",
        "INTEGER",
        "BOOLEAN",
        "VARCHAR",
    ]


def test_an_unreachable_source_refuses_the_save(check_team: Api, tmp_path: Path) -> None:
    """A source that cannot be opened when the query is saved: 503 source_unavailable saying
    nothing was saved, and nothing is."""
    check_team.context.accounts.add_source(
        RegisteredSource(
            "gone",
            f"duckdb://{tmp_path / 'missing' / 'gone.duckdb'}",
            "acme",
            frozenset(),
            False,
            check_team.clock.now(),
        )
    )
    response = check_team.post(QUERIES, EDITOR, json={**GOOD, "source": "gone"})
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["code"] == "source_unavailable"
    assert "not saved" in body["detail"]
    assert _names(check_team) == []


def test_a_query_saved_before_checking_still_shows_and_exports(check_team: Api) -> None:
    """A query stored without columns (saved before 0011) reads with `columns: null` and
    exports as before."""
    query = check_team.add_query("old")
    read = check_team.get(f"{QUERIES}/{query.id}", EDITOR).json()
    assert read["columns"] is None
    response = check_team.post(
        "/api/v1/exports", EDITOR, json={"query_id": query.id, "format": "csv", "parameters": {}}
    )
    assert response.status_code == 202, response.text
    assert check_team.drain() == {"succeeded": 1}
    export = check_team.get(f"/api/v1/exports/{response.json()['id']}", EDITOR).json()
    assert (export["status"], export["row_count"]) == ("succeeded", 100)
