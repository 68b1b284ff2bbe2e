"""What each source's planner says a statement reads (`Source.relations`), on real engines:
DuckDB, PostgreSQL and MariaDB. Views, CTEs and subqueries are seen through to the tables
they read; a column rule is hit only by a statement that reads the column (filtering on it
included), on the sources that report columns; what a plan cannot show (a function that runs
SQL of its own, a view the login may not SHOW) reads, for a policy, every table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from typing import Any

import duckdb
import psycopg
import pytest

from qexport.domain.exports import Requester
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query
from qexport.domain.sensitivity import Relation, SensitiveTable
from qexport.ports import Source
from qexport.sources.duckdb import DuckDBSource
from qexport.sources.mysql_source import MySQLSource
from qexport.sources.postgres import PostgresSource
from tests.mariadb import MariaDBServer, mariadb_server
from tests.pg import server_url

__all__ = ["mariadb_server"]  # the session's server, from tests/mariadb.py

ANN = Requester("ann", "acme")


def reads(source: Source, sql: str, **values: Any) -> frozenset[Relation] | None:
    return source.relations(sql, values, ANN, timeout_seconds=10)


def tables(found: frozenset[Relation] | None) -> set[str]:
    assert found is not None
    return {f"{r.schema}.{r.table}" for r in found}


def needs_approval(source: Source, rule: SensitiveTable, sql: str, **values: Any) -> bool:
    """Whether a query of `sql` on `source` waits for an approval under a policy of `rule`,
    judged by what the source's planner reports."""
    query = Query("q1", "acme", "q", sql, rule.source)
    planned = replace(query, reads=reads(source, sql, **values))
    return WorkspacePolicy(sensitive_tables=(rule,)).needs_approval([planned])


# ---------------------------------------------------------------- DuckDB


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> DuckDBSource:
    path = tmp_path_factory.mktemp("shop") / "shop.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE customers (id INT, name VARCHAR, email VARCHAR,"
            " domain VARCHAR GENERATED ALWAYS AS (split_part(email, '@', 2)))"
        )
        con.execute("CREATE TABLE orders (id INT, customer_id INT, total DECIMAL(10, 2))")
        con.execute("CREATE VIEW contacts AS SELECT id, email FROM customers")
        con.execute("CREATE SCHEMA archive")
        con.execute("CREATE TABLE archive.customers (id INT, email VARCHAR)")
        con.execute("CREATE MACRO best_email() AS (SELECT max(email) FROM customers)")
    return DuckDBSource("shop", path)


DUCK_EMAIL = SensitiveTable("shop", "main", "customers", frozenset({"email"}))
DUCK_CUSTOMERS = SensitiveTable("shop", "main", "customers")


def test_duckdb_sees_through_views_ctes_subqueries_and_macros(shop: DuckDBSource) -> None:
    """The unoptimised plan names the base table whatever the statement wraps it in."""
    for sql in (
        "SELECT * FROM contacts",
        "WITH c AS (SELECT * FROM customers) SELECT id FROM c",
        "SELECT * FROM (SELECT id FROM customers) t",
        "SELECT best_email()",
        "SELECT 1 WHERE EXISTS (SELECT 1 FROM customers)",
    ):
        assert tables(reads(shop, sql)) == {"main.customers"}, sql
        assert needs_approval(shop, DUCK_CUSTOMERS, sql), sql
    assert tables(reads(shop, "SELECT total FROM orders WHERE id = $id", id=3)) == {"main.orders"}
    assert not needs_approval(shop, DUCK_CUSTOMERS, "SELECT total FROM orders")
    assert tables(reads(shop, "SELECT * FROM archive.customers")) == {"archive.customers"}
    assert not needs_approval(shop, DUCK_CUSTOMERS, "SELECT * FROM archive.customers")


def test_duckdb_counts_a_table_read_even_when_the_optimiser_would_not_scan_it(
    shop: DuckDBSource,
) -> None:
    """`count(*)` is answered from statistics by the optimised plan, which then names no
    table: the unoptimised plan still does (and reads no column of it)."""
    found = reads(shop, "SELECT count(*) FROM customers")
    assert found == frozenset({Relation("main", "customers", frozenset())})
    assert needs_approval(shop, DUCK_CUSTOMERS, "SELECT count(*) FROM customers")
    assert not needs_approval(shop, DUCK_EMAIL, "SELECT count(*) FROM customers")


def test_a_duckdb_column_rule_is_hit_only_by_reading_the_column(shop: DuckDBSource) -> None:
    """Reading other columns of the table does not need approval; selecting the column, or
    only filtering or sorting on it (which tells its values), or a column computed from it
    (a generated column, a view's), does."""
    assert not needs_approval(shop, DUCK_EMAIL, "SELECT id, name FROM customers")
    assert not needs_approval(
        shop, DUCK_EMAIL, "SELECT c.id FROM customers c JOIN orders o ON o.customer_id = c.id"
    )
    for sql in (
        "SELECT email FROM customers",
        "SELECT name FROM customers WHERE email LIKE '%@acme.test'",
        "SELECT name FROM customers ORDER BY email",
        "SELECT domain FROM customers",
        "SELECT * FROM contacts",
        "SELECT c FROM customers c",
    ):
        assert needs_approval(shop, DUCK_EMAIL, sql), sql


def test_duckdb_plans_a_statement_whose_parameters_it_cannot_type(shop: DuckDBSource) -> None:
    """DuckDB cannot plan `SELECT $since AS since` without a value (its type is unknown):
    the statement is planned with the bound values written in, a quote in one included."""
    found = reads(
        shop,
        "SELECT $since AS since, $user_id AS me, id FROM customers WHERE name = $name",
        since=date(2024, 1, 1),
        name="O'Brien '$name' -- x",
    )
    assert found == frozenset({Relation("main", "customers", frozenset({"id", "name"}))})


def test_duckdb_reports_names_folded_and_is_only_asked_after_the_statement_check(
    shop: DuckDBSource,
) -> None:
    """DuckDB compares names ignoring case: the plan's names come folded. A statement the
    sandbox refuses is refused before any plan."""
    assert tables(reads(shop, 'SELECT "EMAIL" FROM "Customers"')) == {"main.customers"}
    from qexport.domain.failures import QueryInvalidError

    with pytest.raises(QueryInvalidError, match="not allowed"):
        reads(shop, "SELECT * FROM read_csv('/etc/passwd')")


# ---------------------------------------------------------------- PostgreSQL

_PG_SETUP = """
CREATE TABLE customers (id int PRIMARY KEY, name text, email text, "Phone" text);
CREATE TABLE orders (id int, customer_id int, total numeric);
CREATE VIEW contacts AS SELECT id, email FROM customers;
CREATE MATERIALIZED VIEW emails AS SELECT id, email FROM customers;
CREATE TABLE events (id int, tenant int, secret text) PARTITION BY LIST (tenant);
CREATE TABLE events_1 PARTITION OF events FOR VALUES IN (1);
CREATE FUNCTION all_customers() RETURNS SETOF customers LANGUAGE plpgsql STABLE
    AS $$ BEGIN RETURN QUERY SELECT * FROM customers; END $$;
"""
_PG_GRANTS = """
GRANT SELECT ON customers, orders, contacts, emails, events, events_1 TO {role};
"""


@pytest.fixture(scope="module")
def warehouse(pg_template: str) -> Iterator[PostgresSource]:
    """A database with the tables above and a role that may only read them (dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    import sqlalchemy as sa

    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_reads_{suffix}", f"qexport_reads_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    admin_url = sa.make_url(server_url()).set(database=name)
    try:
        with psycopg.connect(admin_url.render_as_string(hide_password=False)) as conn:
            conn.execute(_PG_SETUP)
            conn.execute(_PG_GRANTS.format(role=f'"{role}"'))
        reader = admin_url.set(username=role).render_as_string(hide_password=False)
        yield PostgresSource("warehouse", reader)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


PG_EMAIL = SensitiveTable("warehouse", "public", "customers", frozenset({"email"}))
PG_CUSTOMERS = SensitiveTable("warehouse", "public", "customers")


def test_postgresql_sees_through_views_ctes_and_subqueries(warehouse: PostgresSource) -> None:
    """EXPLAIN names the base relation whatever the statement wraps it in; an unrelated
    query reads only its own table."""
    for sql in (
        "SELECT * FROM contacts",
        "WITH c AS MATERIALIZED (SELECT * FROM customers) SELECT id FROM c",
        "SELECT * FROM (SELECT id FROM customers) t",
        "SELECT id FROM orders WHERE customer_id IN (SELECT id FROM customers)",
    ):
        assert "public.customers" in tables(reads(warehouse, sql)), sql
        assert needs_approval(warehouse, PG_CUSTOMERS, sql), sql
    assert tables(reads(warehouse, "SELECT total FROM orders WHERE id = $id", id=1)) == {
        "public.orders"
    }
    assert not needs_approval(warehouse, PG_CUSTOMERS, "SELECT total FROM orders")


def test_a_postgresql_column_rule_is_hit_only_by_reading_the_column(
    warehouse: PostgresSource,
) -> None:
    """Other columns of the table do not need approval; the column selected, filtered on,
    read as a whole row, or through a view, does. Quoted names keep their case."""
    assert not needs_approval(warehouse, PG_EMAIL, "SELECT id, name FROM customers")
    assert not needs_approval(
        warehouse,
        PG_EMAIL,
        "SELECT o.total FROM orders o JOIN customers c ON c.id = o.customer_id",
    )
    for sql in (
        "SELECT email FROM customers",
        "SELECT name FROM customers WHERE email LIKE '%@acme.test'",
        "SELECT row_to_json(c) FROM customers c",
        "SELECT * FROM contacts",
    ):
        assert needs_approval(warehouse, PG_EMAIL, sql), sql
    phone = SensitiveTable("warehouse", "public", "customers", frozenset({"Phone"}))
    assert needs_approval(warehouse, phone, 'SELECT "Phone" FROM customers')
    assert not needs_approval(warehouse, phone, "SELECT name FROM customers")


def test_postgresql_partitions_and_materialised_views_count_as_their_tables(
    warehouse: PostgresSource,
) -> None:
    """A partition scanned is its partitioned table too; a materialised view is a copy of the
    tables it was made from."""
    assert {"public.events", "public.events_1"} <= tables(
        reads(warehouse, "SELECT secret FROM events_1")
    )
    events = SensitiveTable("warehouse", "public", "events", frozenset({"secret"}))
    assert needs_approval(warehouse, events, "SELECT secret FROM events_1")
    assert "public.customers" in tables(reads(warehouse, "SELECT * FROM emails"))
    assert needs_approval(warehouse, PG_EMAIL, "SELECT email FROM emails")


def test_postgresql_cannot_say_for_functions_that_run_sql_or_statistics(
    warehouse: PostgresSource,
) -> None:
    """A plpgsql function, query_to_xml and pg_stats read what no plan shows: the source
    cannot say, which a policy reads as every sensitive table of it."""
    for sql in (
        "SELECT * FROM all_customers()",
        "SELECT query_to_xml('SELECT email FROM customers', true, false, '')",
        "SELECT most_common_vals FROM pg_stats WHERE tablename = 'customers'",
    ):
        assert reads(warehouse, sql) is None, sql
        assert needs_approval(warehouse, PG_EMAIL, sql), sql


# ---------------------------------------------------------------- MariaDB


@pytest.fixture(scope="module")
def mariadb_shop(mariadb_server: MariaDBServer) -> Iterator[tuple[MySQLSource, MySQLSource]]:
    """A database with customers, orders, a merged and a materialised view and a stored
    function; a login that may SHOW its views and one that may only SELECT (both dropped
    after, with the database)."""
    suffix = uuid.uuid4().hex[:8]
    db, seer, reader = f"shop_{suffix}", f"seer_{suffix}", f"reader_{suffix}"
    mariadb_server.execute(
        f"CREATE DATABASE {db}",
        f"USE {db}",
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40), email VARCHAR(80),"
        " KEY (email))",
        "INSERT INTO customers VALUES (1, 'Ann', 'ann@example.test')",
        "CREATE TABLE orders (id INT, customer_id INT, total DECIMAL(10, 2))",
        "CREATE VIEW contacts AS SELECT id, email FROM customers",
        "CREATE VIEW per_domain AS SELECT count(*) AS n, max(c.email) AS m FROM customers c",
        "CREATE FUNCTION best_email() RETURNS VARCHAR(80) READS SQL DATA"
        " RETURN (SELECT max(email) FROM customers)",
        f"CREATE USER '{seer}'@'%' IDENTIFIED BY 'pw'",
        f"GRANT SELECT, SHOW VIEW, EXECUTE ON {db}.* TO '{seer}'@'%'",
        f"CREATE USER '{reader}'@'%' IDENTIFIED BY 'pw'",
        f"GRANT SELECT ON {db}.* TO '{reader}'@'%'",
    )
    base = f"mysql://{{}}:pw@{mariadb_server.host}:{mariadb_server.port}/{db}"
    try:
        yield (
            MySQLSource("crm", base.format(seer)),
            MySQLSource("crm", base.format(reader)),
        )
    finally:
        mariadb_server.execute(
            f"DROP USER IF EXISTS '{seer}'@'%'",
            f"DROP USER IF EXISTS '{reader}'@'%'",
            f"DROP DATABASE IF EXISTS {db}",
        )


def test_mariadb_names_tables_through_aliases_views_and_ctes(
    mariadb_shop: tuple[MySQLSource, MySQLSource],
) -> None:
    """EXPLAIN FORMAT=JSON names an aliased table by its alias (`FROM customers orders`
    shows `orders`): the server's rewritten statement names the table it is. Merged and
    materialised views, CTEs, subqueries, a statement proven empty and a subquery the
    optimiser answered while planning (which neither the plan nor the rewritten statement
    names) all read customers; an unrelated query reads only orders."""
    source, _ = mariadb_shop
    db = source.reads_reporting.default_schema
    assert db is not None
    customers = SensitiveTable("crm", db, "customers")
    for sql in (
        "SELECT * FROM contacts",
        "SELECT * FROM per_domain",
        "SELECT orders.name FROM customers orders",
        "WITH c AS (SELECT * FROM customers) SELECT id FROM c",
        "SELECT id FROM orders WHERE customer_id IN (SELECT id FROM customers)",
        "SELECT * FROM customers WHERE 1 = 0",
        # answered from the index while planning: "Select tables optimized away", `WHERE 1`
        "SELECT total FROM orders WHERE (SELECT min(email) FROM customers) LIKE 'a%'",
        "SELECT 1 FROM DUAL WHERE EXISTS (SELECT 1 FROM customers WHERE email = 'x')",
    ):
        assert f"{db}.customers" in tables(reads(source, sql)), sql
        assert needs_approval(source, customers, sql), sql
    assert tables(reads(source, "SELECT total FROM orders WHERE id = $id", id=1)) == {
        f"{db}.orders"
    }
    assert not needs_approval(source, customers, "SELECT total FROM orders")
    email = SensitiveTable("crm", db, "customers", frozenset({"email"}))
    assert needs_approval(source, email, "SELECT id FROM customers")  # tables only: all of it


def test_mariadb_cannot_say_for_stored_functions_or_views_it_may_not_show(
    mariadb_shop: tuple[MySQLSource, MySQLSource],
) -> None:
    """A stored function reads tables no plan shows; a login without SHOW VIEW cannot
    EXPLAIN a view: both cannot say, which a policy reads as every sensitive table."""
    seer, reader = mariadb_shop
    assert reads(seer, "SELECT best_email()") is None
    assert reads(reader, "SELECT * FROM contacts") is None
    assert tables(reads(reader, "SELECT name FROM customers")) == {
        f"{reader.reads_reporting.default_schema}.customers"
    }
