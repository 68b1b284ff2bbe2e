"""A file is judged by what its own run read, not by what its query reads now: each run's
reads, as its sources' planners reported them before it ran, are recorded with the export, and
revoking links (`revoke_links`), refusing new links and withholding deliveries judge that
record. The attacker's two ways around a judgement by the query (edit the query after the
export; a parameter that decides which table is read) end with the link revoked (410) and a
new link refused (403); an unrelated file keeps its link. On SQLite and PostgreSQL metadata,
over a DuckDB source and a PostgreSQL source."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
import psycopg
import pytest
import sqlalchemy as sa

from qexport.domain.sources import RegisteredSource
from qexport.store.tables.exports import SETTLED_IMMUTABLE_SQLITE, exports
from tests.api.conftest import SOURCE, Api, api_on
from tests.support.pg import server_url

ALICE = "alice@acme.test"  # an editor
ADMIN = "admin@acme.test"
POLICY = "/api/v1/workspaces/acme/policy"
PG = "pg3"


def _shop(path: Path) -> None:
    """The DuckDB source: customers (with their emails), and orders."""
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE customers AS SELECT i AS id, 'customer ' || i AS name,"
            " 'c' || i || '@example.test' AS email FROM range(1, 6) t(i)"
        )
        con.execute("CREATE TABLE orders AS SELECT i AS id, i * 10 AS total FROM range(1, 6) t(i)")


@pytest.fixture(scope="session")
def files_shop_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("files") / "shop.duckdb"
    _shop(path)
    return path


@pytest.fixture(scope="module")
def files_warehouse(pg_template: str) -> Iterator[str]:
    """A PostgreSQL database with orders and customers, and the URL of a role that may only
    read them (both dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_files_{suffix}", f"qexport_files_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    admin_url = sa.make_url(server_url()).set(database=name)
    try:
        with psycopg.connect(admin_url.render_as_string(hide_password=False)) as conn:
            conn.execute(
                "CREATE TABLE orders (id int, total numeric);"
                " INSERT INTO orders VALUES (1, 10), (2, 20);"
                " CREATE TABLE customers (id int, email text);"
                " INSERT INTO customers VALUES (1, 'al@secret.test');"
                f' GRANT SELECT ON orders, customers TO "{role}"'
            )
        yield admin_url.set(username=role).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture(params=["sqlite", "postgresql"])
def files_acme(
    request: pytest.FixtureRequest, tmp_path: Path, files_shop_template: Path
) -> Iterator[Api]:
    """A workspace over the DuckDB `shop`, on SQLite and on PostgreSQL metadata."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    with api_on(tmp_path, files_shop_template, url) as api:
        api.member(ALICE, "editor")
        api.member(ADMIN, "admin")
        yield api


def _save(api: Api, name: str, sql: str, source: str = SOURCE, **extra: Any) -> str:
    saved = api.post(
        "/api/v1/queries", ALICE, json={"name": name, "sql": sql, "source": source, **extra}
    )
    assert saved.status_code == 201, saved.text
    query_id: str = saved.json()["id"]
    return query_id


def _made(api: Api, query_id: str, **parameters: Any) -> str:
    """A file of the query, made (the worker drained), with these parameters."""
    body = {"query_id": query_id, "format": "csv", "parameters": parameters}
    asked = api.post("/api/v1/exports", ALICE, json=body)
    assert asked.status_code == 202, asked.text
    assert api.drain() == {"succeeded": 1}
    export_id: str = asked.json()["id"]
    return export_id


def _link(api: Api, export_id: str) -> str:
    """A public link to the file: the path its URL answers on."""
    created = api.post(f"/api/v1/exports/{export_id}/links", ALICE)
    assert created.status_code == 201, created.text
    return urlparse(created.json()["url"]).path


def _mark(api: Api, *tables: dict[str, Any]) -> int:
    """Mark the tables sensitive, revoking links; how many links the change revoked."""
    changed = api.client.patch(
        POLICY,
        headers=api.headers(ADMIN),
        json={"sensitive_tables": list(tables), "revoke_links": True},
    )
    assert changed.status_code == 200, changed.text
    revoked: int = changed.json()["links_revoked"]
    return revoked


def _refused_a_new_link(api: Api, export_id: str) -> str:
    again = api.post(f"/api/v1/exports/{export_id}/links", ALICE)
    assert again.status_code == 403, again.text
    detail: str = again.json()["detail"]
    return detail


def test_a_query_edited_after_its_export_does_not_clear_its_file(files_acme: Api) -> None:
    """The review's (a): `edited` read the emails when its file was made, then was changed
    to read orders. Marking customers with revoke_links ends that file's link (410) and
    refuses a new one (403), naming what the file was made from; a file of orders keeps its
    link."""
    edited = _save(files_acme, "edited", "SELECT email FROM customers")
    emails = _made(files_acme, edited)
    shared = _link(files_acme, emails)
    orders = _made(files_acme, _save(files_acme, "orders", "SELECT id, total FROM orders"))
    unrelated = _link(files_acme, orders)
    changed = files_acme.client.put(
        f"/api/v1/queries/{edited}",
        headers=files_acme.headers(ALICE),
        json={"name": "edited", "sql": "SELECT id FROM orders", "source": SOURCE},
    )
    assert changed.status_code == 200, changed.text
    assert files_acme.client.get(shared).status_code == 200

    assert _mark(files_acme, {"source": SOURCE, "table": "customers"}) == 1
    assert files_acme.client.get(shared).status_code == 410
    assert files_acme.client.get(unrelated).status_code == 200
    detail = _refused_a_new_link(files_acme, emails)
    assert "the file was made from shop: main.customers" in detail
    assert _link(files_acme, orders)


def test_a_column_rule_judges_the_columns_the_file_read(files_acme: Api) -> None:
    """Marked: customers.email. A file of the customers' names keeps its link, one of their
    emails loses it, whatever the query was changed to since."""
    names = _made(files_acme, _save(files_acme, "names", "SELECT id, name FROM customers"))
    named = _link(files_acme, names)
    query = _save(files_acme, "emails", "SELECT email FROM customers")
    emails = _made(files_acme, query)
    mailed = _link(files_acme, emails)
    files_acme.client.put(
        f"/api/v1/queries/{query}",
        headers=files_acme.headers(ALICE),
        json={"name": "emails", "sql": "SELECT name FROM customers", "source": SOURCE},
    )
    assert _mark(files_acme, {"source": SOURCE, "table": "customers", "columns": ["email"]}) == 1
    assert files_acme.client.get(named).status_code == 200
    assert files_acme.client.get(mailed).status_code == 410


def _forget_reads(api: Api, export_id: str) -> None:
    """Empty a settled export's record of what it read, as the migration leaves the exports
    made before it: past the trigger that keeps settled exports as they are, put back after."""
    engine: sa.Engine = api.deps.exports.engine  # type: ignore[attr-defined]
    forget = exports.update().where(exports.c.id == export_id).values(reads=sa.null())
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ALTER TABLE exports DISABLE TRIGGER exports_settled_immutable")
            conn.execute(forget)
            conn.exec_driver_sql("ALTER TABLE exports ENABLE TRIGGER exports_settled_immutable")
        else:
            conn.exec_driver_sql("DROP TRIGGER exports_settled_immutable")
            conn.execute(forget)
            conn.exec_driver_sql(SETTLED_IMMUTABLE_SQLITE)


def test_a_file_whose_reads_are_not_on_record_counts_as_sensitive(files_acme: Api) -> None:
    """A file made before reads were recorded (its record emptied here, as the migration
    leaves older exports) reads, for the policy, every marked table: its link is revoked and
    no new one is made, even though its query reads nothing marked."""
    orders = _made(files_acme, _save(files_acme, "orders", "SELECT id, total FROM orders"))
    shared = _link(files_acme, orders)
    _forget_reads(files_acme, orders)
    assert _mark(files_acme, {"source": SOURCE, "table": "customers"}) == 1
    assert files_acme.client.get(shared).status_code == 410
    assert "not on record" in _refused_a_new_link(files_acme, orders)


def _report(title: str, *queries: str) -> dict[str, Any]:
    return {
        "title": title,
        "sections": [{"heading": f"part {i}", "query_id": q} for i, q in enumerate(queries)],
    }


def test_a_reports_file_reads_what_every_section_read(files_acme: Api) -> None:
    """A report's file holds what each of its sections' runs read: after its emails section
    is taken out of the report, marking customers still ends the link of the file made with
    it; a report of orders alone keeps its link."""
    orders = _save(files_acme, "orders", "SELECT id, total FROM orders")
    emails = _save(files_acme, "emails", "SELECT email FROM customers")
    reports, files = [], []
    for body in (_report("mixed", orders, emails), _report("plain", orders)):
        report = files_acme.post("/api/v1/reports", ALICE, json=body)
        assert report.status_code == 201, report.text
        reports.append(report.json()["id"])
        asked = files_acme.post(
            "/api/v1/exports", ALICE, json={"report_id": reports[-1], "format": "html"}
        )
        assert asked.status_code == 202, asked.text
        files.append(asked.json()["id"])
    assert files_acme.drain() == {"succeeded": 2}
    mixed, plain = (_link(files_acme, f) for f in files)
    cut = files_acme.client.put(
        f"/api/v1/reports/{reports[0]}",
        headers=files_acme.headers(ALICE),
        json=_report("mixed", orders),
    )
    assert cut.status_code == 200, cut.text
    assert _mark(files_acme, {"source": SOURCE, "table": "customers"}) == 1
    assert files_acme.client.get(mixed).status_code == 410
    assert files_acme.client.get(plain).status_code == 200


def test_a_parameter_that_decides_what_is_read_is_judged_by_the_run(
    files_acme: Api, files_warehouse: str
) -> None:
    """The review's (b): `WHERE $flag` on PostgreSQL read no table when saved (PostgreSQL
    folds `WHERE false` away), but the file made with flag = true read orders. Marking orders
    revokes that file's link and refuses a new one; the file made with flag = false read
    nothing and keeps its link."""
    files_acme.context.accounts.add_source(
        RegisteredSource(PG, files_warehouse, "acme", frozenset(), False, files_acme.clock.now())
    )
    query = _save(
        files_acme,
        "flagged",
        "SELECT total FROM orders WHERE $flag",
        source=PG,
        parameters=[{"name": "flag", "type": "boolean", "default": False}],
    )
    saved = files_acme.deps.catalog.get_query(query)
    assert saved is not None
    assert saved.reads == frozenset()  # what the planner said with the default value
    read = _made(files_acme, query, flag=True)
    shared = _link(files_acme, read)
    empty = _made(files_acme, query, flag=False)
    kept = _link(files_acme, empty)

    assert _mark(files_acme, {"source": PG, "table": "orders"}) == 1
    assert files_acme.client.get(shared).status_code == 410
    assert "the file was made from pg3: public.orders" in _refused_a_new_link(files_acme, read)
    assert files_acme.client.get(kept).status_code == 200
