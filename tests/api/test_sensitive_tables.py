"""Sensitivity follows the data: a workspace's policy marks tables (or columns) of a source,
and every query that reads them, as the source's planner reports it, waits for an admin's
approval, whatever its id, its name or how its SQL reaches the table. Marking can also end
the public links already shared. On SQLite and PostgreSQL metadata, over a DuckDB source."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import pytest

from qexport.services.schedules.tick import tick
from tests.api.conftest import SOURCE, Api, api_on

ALICE = "alice@acme.test"  # an editor
MALLORY = "mallory@acme.test"  # another editor, who copies SQL
ADMIN = "admin@acme.test"
BOSS = "boss@acme.test"  # the second admin
OTHER_ADMIN = "admin@other.test"
POLICY = "/api/v1/workspaces/acme/policy"
CUSTOMERS_SQL = "SELECT id, name, email FROM customers ORDER BY id"
CUSTOMERS = {"source": SOURCE, "table": "main.customers"}
EMAIL = {"source": SOURCE, "table": "customers", "columns": ["email"]}


def _crm(path: Path, *, contacts_over: str = "customers") -> None:
    """A shop with customers (whose email is the sensitive part), orders, and a view."""
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE customers AS SELECT i AS id, 'customer ' || i AS name,"
            " 'c' || i || '@example.test' AS email FROM range(1, 11) t(i)"
        )
        con.execute(
            "CREATE TABLE orders AS SELECT i AS id, 1 + i % 10 AS customer_id,"
            " (i * 1.25)::DECIMAL(10, 2) AS amount FROM range(1, 101) t(i)"
        )
        con.execute(f"CREATE VIEW contacts AS SELECT id, name FROM {contacts_over}")


@pytest.fixture(scope="session")
def crm_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("crm") / "shop.duckdb"
    _crm(path)
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def tables_acme(
    request: pytest.FixtureRequest, tmp_path: Path, crm_template: Path
) -> Iterator[Api]:
    """A workspace over the crm source, on SQLite and on PostgreSQL metadata."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, crm_template, url) as api:
        api.member(ALICE, "editor")
        api.member(MALLORY, "editor")
        api.member(ADMIN, "admin")
        api.member(BOSS, "admin")
        api.member(OTHER_ADMIN, "admin", workspace="other")
        yield api


def _save(api: Api, name: str, sql: str, who: str = ALICE) -> str:
    """Save a query through the API, as people do: its source plans it then."""
    saved = api.post("/api/v1/queries", who, json={"name": name, "sql": sql, "source": SOURCE})
    assert saved.status_code == 201, saved.text
    query_id: str = saved.json()["id"]
    return query_id


def _mark(api: Api, *tables: dict[str, Any], **extra: Any) -> dict[str, Any]:
    changed = api.client.patch(
        POLICY, headers=api.headers(ADMIN), json={"sensitive_tables": list(tables), **extra}
    )
    assert changed.status_code == 200, changed.text
    body: dict[str, Any] = changed.json()
    return body


def _request(api: Api, query_id: str, who: str = ALICE) -> dict[str, Any]:
    response = api.post("/api/v1/exports", who, json={"query_id": query_id, "format": "csv"})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def _waits(api: Api, query_id: str, who: str = ALICE) -> bool:
    """Whether a request of the query waits for an approval (rather than being queued)."""
    return _request(api, query_id, who).get("kind") == "approval"


def _events(api: Api, action: str) -> list[dict[str, Any]]:
    body = api.get("/api/v1/audit", ADMIN, params={"action": action}).json()
    items: list[dict[str, Any]] = body["items"]
    return items


def test_the_same_sql_saved_as_another_query_needs_approval_too(tables_acme: Api) -> None:
    """The reported escape: marking a query id covered that id only, and an editor who saved
    its SQL as a new query exported it without approval. Marked by table, both the original
    and the copy (by another editor, under another name, written differently) wait for an
    admin, and nothing is queued."""
    original = _save(tables_acme, "customers", CUSTOMERS_SQL)
    marked = _mark(tables_acme, CUSTOMERS)
    assert marked["sensitive_tables"] == [
        {"source": SOURCE, "table": "main.customers", "columns": None, "also": []}
    ]
    copy = _save(tables_acme, "my customers", CUSTOMERS_SQL, who=MALLORY)
    rewritten = _save(tables_acme, "people", "select c.* from main.CUSTOMERS as c", who=MALLORY)
    for query_id in (original, copy, rewritten):
        asked = _request(tables_acme, query_id, MALLORY)
        assert asked["kind"] == "approval", asked
        assert asked["status"] == "pending"
    assert tables_acme.get("/api/v1/exports", ADMIN).json()["items"] == []
    assert tables_acme.drain() == {}


def test_a_view_or_a_cte_over_a_sensitive_table_needs_approval(tables_acme: Api) -> None:
    """The planner sees through a view, a CTE and a subquery to the table they read; a query
    of another table is queued and exported as before."""
    _mark(tables_acme, CUSTOMERS)
    for name, sql in (
        ("through a view", "SELECT * FROM contacts"),
        ("through a CTE", "WITH c AS (SELECT * FROM customers) SELECT count(*) AS n FROM c"),
        ("in a subquery", "SELECT id FROM orders WHERE customer_id IN (SELECT id FROM customers)"),
    ):
        assert _waits(tables_acme, _save(tables_acme, name, sql)), name
    unrelated = _request(tables_acme, _save(tables_acme, "orders", "SELECT id, amount FROM orders"))
    assert unrelated["status"] == "queued"
    assert tables_acme.drain() == {"succeeded": 1}


def test_a_column_rule_covers_reading_that_column_only(tables_acme: Api) -> None:
    """Marked: customers.email. Reading other columns of customers is queued; selecting the
    email, or only filtering on it, waits for an approval."""
    _mark(tables_acme, EMAIL)
    names = _request(tables_acme, _save(tables_acme, "names", "SELECT id, name FROM customers"))
    assert names["status"] == "queued"
    for name, sql in (
        ("emails", "SELECT email FROM customers"),
        ("by domain", "SELECT name FROM customers WHERE email LIKE '%@example.test'"),
    ):
        assert _waits(tables_acme, _save(tables_acme, name, sql)), name


def test_a_sensitive_query_is_not_previewed_but_an_unrelated_one_is(tables_acme: Api) -> None:
    """A preview would show the rows without an approval: 403 naming the table; a query of
    another table previews."""
    _mark(tables_acme, EMAIL)
    emails = _save(tables_acme, "emails", "SELECT email FROM customers")
    refused = tables_acme.post(f"/api/v1/queries/{emails}/preview", ALICE, json={})
    assert refused.status_code == 403, refused.text
    assert "reads shop: main.customers (email)" in refused.json()["detail"]
    names = _save(tables_acme, "names", "SELECT id, name FROM customers")
    assert tables_acme.post(f"/api/v1/queries/{names}/preview", ALICE, json={}).status_code == 200


def test_marking_a_table_with_revoke_links_ends_live_public_links(tables_acme: Api) -> None:
    """A link shared before the marking works until the admin asks to end it: without
    `revoke_links` it keeps working (but no new link to that file is made); with it, the
    link answers 410 like a revoked one, a link to an unrelated file works on, and the trail
    records the change and each revocation."""
    customers = _save(tables_acme, "customers", CUSTOMERS_SQL)
    orders = _save(tables_acme, "orders", "SELECT id, amount FROM orders")
    made = [_request(tables_acme, customers)["id"], _request(tables_acme, orders)["id"]]
    assert tables_acme.drain() == {"succeeded": 2}
    paths = []
    for export_id in made:
        link = tables_acme.post(f"/api/v1/exports/{export_id}/links", ALICE)
        assert link.status_code == 201, link.text
        paths.append(urlparse(link.json()["url"]).path)
    shared, unrelated = paths

    kept = _mark(tables_acme, CUSTOMERS)
    assert kept["links_revoked"] == 0
    assert tables_acme.client.get(shared).status_code == 200
    again = tables_acme.post(f"/api/v1/exports/{made[0]}/links", ALICE)
    assert again.status_code == 403, again.text
    assert "made without an admin's approval gets no public link" in again.json()["detail"]

    ended = _mark(tables_acme, CUSTOMERS, revoke_links=True)
    assert ended["links_revoked"] == 1
    assert tables_acme.client.get(shared).status_code == 410
    assert tables_acme.client.get(unrelated).status_code == 200
    (revoked,) = _events(tables_acme, "link.revoked")
    assert revoked["actor"]["id"] == tables_acme.user_id(ADMIN)
    assert revoked["details"]["export_id"] == made[0]
    changes = _events(tables_acme, "policy.changed")
    assert changes[0]["details"]["links_revoked"] == 1
    (after,) = changes[0]["details"]["after"]["sensitive_tables"]
    assert (after["source"], after["schema"], after["table"]) == (SOURCE, "main", "customers")
    assert after["identity"].startswith("duckdb:/")  # the data its source reaches


def test_a_scheduled_query_that_becomes_sensitive_is_refused_when_it_fires(
    tables_acme: Api,
) -> None:
    """A schedule made while its query read nothing sensitive fires as due, but its run fails
    access_lost naming the table, reading nothing; a new schedule of it is refused."""
    customers = _save(tables_acme, "customers", CUSTOMERS_SQL)
    schedule = {"query_id": customers, "format": "csv", "cron": "0 6 * * *", "timezone": "UTC"}
    created = tables_acme.post("/api/v1/schedules", ALICE, json=schedule)
    assert created.status_code == 201, created.text
    _mark(tables_acme, EMAIL)
    tables_acme.clock.advance(21 * 3600)  # from Monday 09:00 to Tuesday's 06:00
    fired = tick(
        tables_acme.deps.catalog,
        tables_acme.context.schedules,
        tables_acme.clock,
        grace=timedelta(hours=1),
    )
    (export,) = fired.fired
    assert tables_acme.drain() == {"failed": 1}
    failed = tables_acme.get(f"/api/v1/exports/{export.id}", ALICE).json()
    assert failed["failure"]["code"] == "access_lost"
    assert "reads shop: main.customers (email)" in failed["failure"]["detail"]
    assert "a schedule cannot export it" in failed["failure"]["detail"]
    refused = tables_acme.post("/api/v1/schedules", ALICE, json=schedule)
    assert refused.status_code == 422, refused.text
    assert "no schedule may export it" in refused.json()["errors"][0]["message"]


def test_the_worker_plans_again_before_each_run(
    tables_acme: Api, tmp_path: Path, crm_template: Path
) -> None:
    """A view redefined on the source after the query was saved: the request is queued by
    what the query read when saved, but the run asks the planner again, fails access_lost
    naming the table, and records what it reads, so that the next request waits for an
    approval."""
    source = tmp_path / "shop.duckdb"  # the installation's copy of the source (api_on)
    assert source.is_file()
    _mark(tables_acme, EMAIL)
    contacts = _save(tables_acme, "contacts", "SELECT * FROM contacts")
    assert _request(tables_acme, contacts)["status"] == "queued"  # the view read no email
    rebuilt = tmp_path / "rebuilt.duckdb"
    _crm(rebuilt, contacts_over="(SELECT id, email AS name FROM customers)")
    os.replace(rebuilt, source)  # the source reopens the new file for the next run
    assert tables_acme.drain() == {"failed": 1}
    (failed,) = tables_acme.get("/api/v1/exports", ALICE).json()["items"]
    assert failed["failure"]["code"] == "access_lost"
    assert "main.customers (email)" in failed["failure"]["detail"]
    assert _waits(tables_acme, contacts)
    shutil.copy(crm_template, source)


def test_the_rule_is_checked_when_the_policy_changes(tables_acme: Api) -> None:
    """An unknown source (another workspace's included) or a malformed name is refused
    naming the entry; a name without a schema is DuckDB's `main`, written any case."""
    refused = tables_acme.client.patch(
        POLICY,
        headers=tables_acme.headers(ADMIN),
        json={
            "sensitive_tables": [
                {"source": "warehouse", "table": "customers"},
                {"source": SOURCE, "table": "a.b.c"},
                {"source": SOURCE, "table": "customers", "columns": []},
            ]
        },
    )
    assert refused.status_code == 422, refused.text
    problems = {e["field"]: e["message"] for e in refused.json()["errors"]}
    assert problems["sensitive_tables[0].source"].startswith("unknown source 'warehouse'")
    assert "names more than a schema and a table" in problems["sensitive_tables[1].table"]
    assert "non-empty list of column names" in problems["sensitive_tables[2].columns"]
    marked = _mark(tables_acme, {"source": SOURCE, "table": "Customers", "columns": ["EMAIL"]})
    assert marked["sensitive_tables"] == [
        {"source": SOURCE, "table": "main.customers", "columns": ["email"], "also": []}
    ]
    assert tables_acme.get(POLICY, ALICE).json()["sensitive_tables"] == marked["sensitive_tables"]
