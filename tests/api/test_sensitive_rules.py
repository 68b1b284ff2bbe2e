"""A sensitive-table rule is checked on its source when the policy changes: one that could
never match what a planner reports (a view, a missing table or column, a generated column
DuckDB reports as its inputs, a PostgreSQL name in the wrong case) is refused with 422 naming
the entry and why, every mistake at once, and the policy stays as it was; a source that
cannot be reached refuses the change with 503. A rule covers every source of the workspace
over the same database: a second source registered on it needs approval just the same. On
DuckDB, PostgreSQL and MariaDB sources, over SQLite and PostgreSQL metadata."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
import sqlalchemy as sa

from qexport.domain.sources import RegisteredSource
from tests.api.conftest import SOURCE, Api, api_on
from tests.support.mariadb import MariaDBServer, mariadb_server
from tests.support.pg import server_url

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

ALICE = "alice@acme.test"  # an editor
ADMIN = "admin@acme.test"
POLICY = "/api/v1/workspaces/acme/policy"


def _shop(path: Path) -> None:
    """The DuckDB source: a table, a view over it, and a table with a generated column."""
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE customers (id INT, name VARCHAR, email VARCHAR)")
        con.execute("CREATE VIEW contacts AS SELECT id, email FROM customers")
        con.execute(
            "CREATE TABLE people (id INT, email VARCHAR,"
            " domain VARCHAR GENERATED ALWAYS AS (split_part(email, '@', 2)))"
        )


@pytest.fixture(scope="session")
def rules_shop_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "shop.duckdb"
    _shop(path)
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def rules_acme(
    request: pytest.FixtureRequest, tmp_path: Path, rules_shop_template: Path
) -> Iterator[Api]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, rules_shop_template, url) as api:
        api.member(ALICE, "editor")
        api.member(ADMIN, "admin")
        yield api


@dataclasses.dataclass(frozen=True)
class Warehouse:
    """A PostgreSQL database with a mixed-case table, and its reader's URL and name."""

    url: str
    reader: str


@pytest.fixture(scope="module")
def rules_warehouse(pg_template: str) -> Iterator[Warehouse]:
    """`"Customers"` (with `"Email"`), a view over it, a sequence, and a reader role that
    may only read them (dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_rules_{suffix}", f"qexport_rules_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'pw-{suffix}'")
    admin_url = sa.make_url(server_url()).set(database=name)
    try:
        with psycopg.connect(admin_url.render_as_string(hide_password=False)) as conn:
            conn.execute(
                'CREATE TABLE "Customers" (id int, name text, "Email" text);'
                " INSERT INTO \"Customers\" VALUES (1, 'al', 'al@secret.test');"
                ' CREATE VIEW contacts AS SELECT id, "Email" FROM "Customers";'
                " CREATE SEQUENCE ids;"
                f' GRANT SELECT ON "Customers", contacts TO "{role}"'
            )
        reader = admin_url.set(username=role, password=f"pw-{suffix}")
        yield Warehouse(reader.render_as_string(hide_password=False), role)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def _registered(api: Api, name: str, url: str) -> None:
    """The operator's source `name` of acme (registered as the CLI stores it)."""
    api.context.accounts.add_source(
        RegisteredSource(name, url, "acme", frozenset(), False, api.clock.now())
    )


def _patch(api: Api, *tables: dict[str, Any]) -> Any:
    return api.client.patch(
        POLICY, headers=api.headers(ADMIN), json={"sensitive_tables": list(tables)}
    )


def _problems(response: Any) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def _marked(api: Api) -> list[dict[str, Any]]:
    tables: list[dict[str, Any]] = api.get(POLICY, ADMIN).json()["sensitive_tables"]
    return tables


def test_duckdb_rules_that_can_never_match_are_refused_at_once(rules_acme: Api) -> None:
    """A view (refused naming the table it reads), a missing table, a missing column and a
    generated column (naming the column it is computed from) are refused together, each on
    its entry; nothing is marked. The base table and a stored column are accepted."""
    refused = _patch(
        rules_acme,
        {"source": SOURCE, "table": "contacts"},
        {"source": SOURCE, "table": "nosuchtable"},
        {"source": SOURCE, "table": "customers", "columns": ["phone"]},
        {"source": SOURCE, "table": "people", "columns": ["domain"]},
        {"source": SOURCE, "table": "customers", "columns": ["email"]},
    )
    problems = _problems(refused)
    assert set(problems) == {
        "sensitive_tables[0].table",
        "sensitive_tables[1].table",
        "sensitive_tables[2].columns",
        "sensitive_tables[3].columns",
    }
    assert "main.contacts is a view" in problems["sensitive_tables[0].table"]
    assert "main.customers (email, id)" in problems["sensitive_tables[0].table"]
    assert "has no table main.nosuchtable" in problems["sensitive_tables[1].table"]
    assert "has no column phone" in problems["sensitive_tables[2].columns"]
    assert "(its columns: id, name, email)" in problems["sensitive_tables[2].columns"]
    assert "domain of main.people is a generated column" in problems["sensitive_tables[3].columns"]
    assert "computed from (email)" in problems["sensitive_tables[3].columns"]
    assert _marked(rules_acme) == []
    accepted = _patch(
        rules_acme,
        {"source": SOURCE, "table": "customers", "columns": ["email"]},
        {"source": SOURCE, "table": "people", "columns": ["email"]},
    )
    assert accepted.status_code == 200, accepted.text
    assert [t["table"] for t in _marked(rules_acme)] == ["main.customers", "main.people"]
    again = _patch(rules_acme, *_marked(rules_acme))  # the policy as read is sent back as it is
    assert again.status_code == 200, again.text


def test_postgresql_names_are_checked_in_their_case_with_a_hint(
    rules_acme: Api, rules_warehouse: Warehouse
) -> None:
    """On PostgreSQL an unquoted `Customers` is `customers`, which does not exist: refused,
    naming `public."Customers"` and how to write it; so is `email` for `"Email"`, the view
    and the sequence. Quoted, the rule is accepted and holds: reading the emails needs an
    approval."""
    _registered(rules_acme, "pg", rules_warehouse.url)
    problems = _problems(
        _patch(
            rules_acme,
            {"source": "pg", "table": "Customers"},
            {"source": "pg", "table": '"Customers"', "columns": ["email"]},
            {"source": "pg", "table": "contacts"},
            {"source": "pg", "table": "ids"},
        )
    )
    assert (
        'has no table public.customers; it has public."Customers"'
        in problems["sensitive_tables[0].table"]
    )
    assert 'no column email; it has "Email"' in problems["sensitive_tables[1].columns"]
    assert "public.contacts is a view" in problems["sensitive_tables[2].table"]
    assert "public.ids is a sequence" in problems["sensitive_tables[3].table"]
    accepted = _patch(rules_acme, {"source": "pg", "table": '"Customers"', "columns": ['"Email"']})
    assert accepted.status_code == 200, accepted.text
    saved = rules_acme.post(
        "/api/v1/queries",
        ALICE,
        json={"name": "mails", "sql": 'SELECT "Email" FROM "Customers"', "source": "pg"},
    )
    assert saved.status_code == 201, saved.text
    asked = rules_acme.post(
        "/api/v1/exports", ALICE, json={"query_id": saved.json()["id"], "format": "csv"}
    )
    assert asked.json()["kind"] == "approval", asked.text


def test_mariadb_rules_are_checked_on_its_catalogue(
    rules_acme: Api, mariadb_server: MariaDBServer
) -> None:
    """On MariaDB a view, a missing table and a missing column are refused; a table and its
    column are accepted (names fold case, as the server compares them)."""
    view = f"people_{uuid.uuid4().hex[:8]}"
    mariadb_server.execute(
        f"CREATE VIEW qexport_test.{view} AS SELECT id, name FROM qexport_test.people"
    )
    try:
        _registered(rules_acme, "maria", mariadb_server.url())
        problems = _problems(
            _patch(
                rules_acme,
                {"source": "maria", "table": view},
                {"source": "maria", "table": "nosuchtable"},
                {"source": "maria", "table": "people", "columns": ["phone"]},
            )
        )
        assert f"qexport_test.{view} is a view" in problems["sensitive_tables[0].table"]
        assert "has no table qexport_test.nosuchtable" in problems["sensitive_tables[1].table"]
        assert "has no column phone" in problems["sensitive_tables[2].columns"]
        accepted = _patch(rules_acme, {"source": "maria", "table": "PEOPLE", "columns": ["Name"]})
        assert accepted.status_code == 200, accepted.text
    finally:
        mariadb_server.execute(f"DROP VIEW IF EXISTS qexport_test.{view}")


def test_a_rule_on_a_source_that_cannot_be_reached_is_refused_with_503(rules_acme: Api) -> None:
    """A PostgreSQL source on a port nothing listens on (on loopback): the rule cannot be
    checked, the change is refused with 503 naming the source, and the policy stays as it
    was; a rule of another source, unchanged, is not asked again."""
    accepted = _patch(rules_acme, {"source": SOURCE, "table": "customers"})
    assert accepted.status_code == 200, accepted.text
    _registered(rules_acme, "down", "postgresql://nobody:pw@127.0.0.1:9/nothing?connect_timeout=2")
    refused = _patch(
        rules_acme, {"source": SOURCE, "table": "customers"}, {"source": "down", "table": "t"}
    )
    assert refused.status_code == 503, refused.text
    assert "the rules naming the source 'down'" in refused.json()["detail"]
    assert [t["table"] for t in _marked(rules_acme)] == ["main.customers"]


def _waits_for_approval(api: Api, source: str, sql: str) -> bool:
    saved = api.post(
        "/api/v1/queries",
        ALICE,
        json={"name": f"q-{uuid.uuid4().hex[:6]}", "sql": sql, "source": source},
    )
    assert saved.status_code == 201, saved.text
    preview = api.post(f"/api/v1/queries/{saved.json()['id']}/preview", ALICE, json={})
    asked = api.post(
        "/api/v1/exports", ALICE, json={"query_id": saved.json()["id"], "format": "csv"}
    )
    assert asked.status_code == 202, asked.text
    waits = asked.json().get("kind") == "approval"
    assert (preview.status_code == 403) == waits, preview.text
    return waits


def test_a_second_source_over_the_same_database_is_covered_by_the_rules(
    rules_acme: Api, rules_warehouse: Warehouse
) -> None:
    """The review's finding: with `pg`'s customers marked, an admin registers `pg2` over the
    same database (through the API, loopback opened to members' sources). The rule now
    covers pg2 too (the policy says so, and the change is on the record): an editor's
    select of the emails on pg2 is not previewed and waits for an approval."""
    _registered(rules_acme, "pg", rules_warehouse.url)
    assert _patch(rules_acme, {"source": "pg", "table": '"Customers"'}).status_code == 200
    context = rules_acme.client.app.state.context  # type: ignore[attr-defined]
    settings = dataclasses.replace(context.settings, egress_allow="127.0.0.1/32")
    rules_acme.client.app.state.context = dataclasses.replace(context, settings=settings)  # type: ignore[attr-defined]
    created = rules_acme.post(
        "/api/v1/sources", ADMIN, json={"name": "pg2", "url": rules_warehouse.url}
    )
    assert created.status_code == 201, created.text

    (rule,) = _marked(rules_acme)
    assert rule["also"] == ["pg2"]
    assert _waits_for_approval(rules_acme, "pg2", 'SELECT "Email" FROM "Customers"')
    changes = rules_acme.get("/api/v1/audit", ADMIN, params={"action": "policy.changed"}).json()
    assert "pg2" in changes["items"][0]["details"]["reason"]


def test_a_rule_marked_after_the_second_source_covers_it_too(
    rules_acme: Api, rules_warehouse: Warehouse, mariadb_server: MariaDBServer
) -> None:
    """pg, pg2 (another login string, the same database) and a generic SQLAlchemy source
    over it, all registered first: marking pg's customers covers the other two as well (the
    generic one cannot say what a query reads, so any query of it waits); a source over other
    data (MariaDB) is not covered and its queries are queued as before."""
    _registered(rules_acme, "pg", rules_warehouse.url)
    _registered(rules_acme, "pg2", rules_warehouse.url + "?application_name=second")
    generic = rules_warehouse.url.replace("postgresql://", "sqlalchemy+postgresql+psycopg://", 1)
    _registered(rules_acme, "gen", generic)
    _registered(rules_acme, "maria", mariadb_server.url())
    assert _patch(rules_acme, {"source": "pg", "table": '"Customers"'}).status_code == 200
    (rule,) = _marked(rules_acme)
    assert rule["also"] == ["gen", "pg2"]
    assert _waits_for_approval(rules_acme, "pg2", 'SELECT name FROM "Customers"')
    assert _waits_for_approval(rules_acme, "gen", "SELECT 1 AS one")
    assert not _waits_for_approval(rules_acme, "maria", "SELECT name FROM people")
