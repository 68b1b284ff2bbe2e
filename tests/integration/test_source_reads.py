"""What each source's planner says a statement reads (`Source.relations`), on real engines:
DuckDB, PostgreSQL and MariaDB. Views, CTEs and subqueries are seen through to the tables
they read; a column rule is hit only by a statement that reads the column (filtering on it
included), on the sources that report columns; what a plan cannot show (a function that runs
SQL of its own, a view the login may not SHOW) reads, for a policy, every table."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from typing import TYPE_CHECKING, Any

import duckdb
import psycopg
import pytest

from qexport.domain.exports import Requester
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query
from qexport.domain.sensitivity import Relation, SensitiveTable
from qexport.ports import Source
from qexport.sources.duckdb.source import DuckDBSource
from qexport.sources.postgres.source import PostgresSource
from tests.support.mariadb import MariaDBServer, mariadb_server
from tests.support.pg import server_url

if TYPE_CHECKING:  # imports mysqlclient: the MariaDB tests skip without it, the others run
    from qexport.sources.mysql.source import MySQLSource

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

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


@contextlib.contextmanager
def _pg_database(setup: str, grants: str) -> Iterator[PostgresSource]:
    """A database made by `setup` and a role given `grants` (`{role}`), that may read only
    that; both dropped after."""
    import sqlalchemy as sa

    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_reads_{suffix}", f"qexport_reads_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    admin_url = sa.make_url(server_url()).set(database=name)
    try:
        with psycopg.connect(admin_url.render_as_string(hide_password=False)) as conn:
            conn.execute(setup)
            conn.execute(grants.format(role=f'"{role}"'))
        reader = admin_url.set(username=role).render_as_string(hide_password=False)
        yield PostgresSource("warehouse", reader)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture(scope="module")
def reads_warehouse(pg_template: str) -> Iterator[PostgresSource]:
    """A database with the tables above and a role that may only read them (dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    with _pg_database(_PG_SETUP, _PG_GRANTS) as source:
        yield source


PG_EMAIL = SensitiveTable("warehouse", "public", "customers", frozenset({"email"}))
PG_CUSTOMERS = SensitiveTable("warehouse", "public", "customers")


def test_postgresql_sees_through_views_ctes_and_subqueries(reads_warehouse: PostgresSource) -> None:
    """EXPLAIN names the base relation whatever the statement wraps it in; an unrelated
    query reads only its own table."""
    for sql in (
        "SELECT * FROM contacts",
        "WITH c AS MATERIALIZED (SELECT * FROM customers) SELECT id FROM c",
        "SELECT * FROM (SELECT id FROM customers) t",
        "SELECT id FROM orders WHERE customer_id IN (SELECT id FROM customers)",
    ):
        assert "public.customers" in tables(reads(reads_warehouse, sql)), sql
        assert needs_approval(reads_warehouse, PG_CUSTOMERS, sql), sql
    assert tables(reads(reads_warehouse, "SELECT total FROM orders WHERE id = $id", id=1)) == {
        "public.orders"
    }
    assert not needs_approval(reads_warehouse, PG_CUSTOMERS, "SELECT total FROM orders")


def test_a_postgresql_column_rule_is_hit_only_by_reading_the_column(
    reads_warehouse: PostgresSource,
) -> None:
    """Other columns of the table do not need approval; the column selected, filtered on,
    read as a whole row, or through a view, does. Quoted names keep their case."""
    assert not needs_approval(reads_warehouse, PG_EMAIL, "SELECT id, name FROM customers")
    assert not needs_approval(
        reads_warehouse,
        PG_EMAIL,
        "SELECT o.total FROM orders o JOIN customers c ON c.id = o.customer_id",
    )
    for sql in (
        "SELECT email FROM customers",
        "SELECT name FROM customers WHERE email LIKE '%@acme.test'",
        "SELECT row_to_json(c) FROM customers c",
        "SELECT * FROM contacts",
    ):
        assert needs_approval(reads_warehouse, PG_EMAIL, sql), sql
    phone = SensitiveTable("warehouse", "public", "customers", frozenset({"Phone"}))
    assert needs_approval(reads_warehouse, phone, 'SELECT "Phone" FROM customers')
    assert not needs_approval(reads_warehouse, phone, "SELECT name FROM customers")


def test_postgresql_partitions_and_materialised_views_count_as_their_tables(
    reads_warehouse: PostgresSource,
) -> None:
    """A partition scanned is its partitioned table too; a materialised view is a copy of the
    tables it was made from."""
    assert {"public.events", "public.events_1"} <= tables(
        reads(reads_warehouse, "SELECT secret FROM events_1")
    )
    events = SensitiveTable("warehouse", "public", "events", frozenset({"secret"}))
    assert needs_approval(reads_warehouse, events, "SELECT secret FROM events_1")
    assert "public.customers" in tables(reads(reads_warehouse, "SELECT * FROM emails"))
    assert needs_approval(reads_warehouse, PG_EMAIL, "SELECT email FROM emails")


def test_postgresql_cannot_say_for_functions_that_run_sql_or_statistics(
    reads_warehouse: PostgresSource,
) -> None:
    """A plpgsql function, query_to_xml and pg_stats read what no plan shows: the source
    cannot say, which a policy reads as every sensitive table of it."""
    for sql in (
        "SELECT * FROM all_customers()",
        "SELECT query_to_xml('SELECT email FROM customers', true, false, '')",
        "SELECT most_common_vals FROM pg_stats WHERE tablename = 'customers'",
    ):
        assert reads(reads_warehouse, sql) is None, sql
        assert needs_approval(reads_warehouse, PG_EMAIL, sql), sql


# The escapes of an attacker's review: what reads tables no plan shows. tablefunc and xml2
# are contrib extensions of PostgreSQL's own packages; citext and pgcrypto are trusted ones.
_PG_ESCAPES = """
CREATE EXTENSION tablefunc;
CREATE EXTENSION xml2;
CREATE EXTENSION citext;
CREATE EXTENSION pgcrypto;
CREATE TABLE customers (id int PRIMARY KEY, name text, email text, nick citext);
INSERT INTO customers VALUES (1, 'al', 'al@secret.test', 'Al'), (2, 'bo', 'bo@secret.test', 'Bo');
CREATE TABLE orders (id int, customer_id int, total numeric);
CREATE FUNCTION leak_step(s int, v int) RETURNS int LANGUAGE plpgsql
    AS $$ BEGIN PERFORM (SELECT string_agg(email, ' ') FROM customers); RETURN s + v; END $$;
CREATE AGGREGATE leak_agg(int) (sfunc = leak_step, stype = int, initcond = '0');
CREATE FUNCTION leak_sql_step(s int, v int) RETURNS int LANGUAGE sql
    AS 'SELECT s + v + (SELECT count(email)::int FROM customers)';
CREATE AGGREGATE leak_sql_agg(int) (sfunc = leak_sql_step, stype = int, initcond = '0');
CREATE AGGREGATE trusted_looking(int) (sfunc = leak_step, stype = int, initcond = '0');
ALTER EXTENSION citext ADD AGGREGATE trusted_looking(int);
CREATE FUNCTION orders_text(o orders) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN RETURN (SELECT string_agg(email, ' ') FROM customers); END $$;
CREATE CAST (orders AS text) WITH FUNCTION orders_text(orders);
CREATE FUNCTION leak_check(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN PERFORM (SELECT count(email) FROM customers); RETURN true; END $$;
CREATE DOMAIN checked_text AS text CHECK (leak_check(VALUE));
CREATE OPERATOR |~| (leftarg = text, rightarg = text, function = xpath_string);
CREATE FUNCTION all_emails() RETURNS text LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN (SELECT string_agg(email, ',') FROM customers); END $$;
CREATE VIEW order_notes AS SELECT id, all_emails() AS note FROM orders;
CREATE FUNCTION emails_of(o orders) RETURNS text LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN (SELECT string_agg(email, ',') FROM customers); END $$;
"""
_PG_ESCAPE_GRANTS = "GRANT SELECT ON customers, orders, order_notes TO {role};"


@pytest.fixture(scope="module")
def escapes(pg_template: str) -> Iterator[PostgresSource]:
    """A database with the extensions and functions above; skipped (failed under CI) where
    the server lacks tablefunc or xml2."""
    del pg_template
    with psycopg.connect(server_url(), autocommit=True) as admin:
        available = {
            str(row[0])
            for row in admin.execute(
                "SELECT name FROM pg_available_extensions"
                " WHERE name IN ('tablefunc', 'xml2', 'citext', 'pgcrypto')"
            )
        }
    if len(available) < 4:
        missing = "the contrib extensions tablefunc, xml2, citext and pgcrypto"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs {missing} (postgresql-contrib)")
        pytest.skip(f"this server lacks {missing}")
    with _pg_database(_PG_ESCAPES, _PG_ESCAPE_GRANTS) as source:
        yield source


def test_postgresql_cannot_say_for_functions_that_run_sql_given_as_text(
    escapes: PostgresSource,
) -> None:
    """ts_rewrite runs its second argument as a query; tablefunc's crosstab and connectby and
    xml2's xpath_table are C functions that do the same (or read a table by name): each
    previewed every email with a plan that read nothing. Their reads cannot be told."""
    for sql in (
        "SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery,"
        " quote_literal(string_agg(email, '' ''))::tsquery FROM customers')::text AS x",
        "SELECT * FROM crosstab('SELECT name, ''x'', email FROM customers') AS t(n text, e text)",
        "SELECT * FROM connectby('customers', 'email', 'id', '1', 0) AS t(a text, b text, l int)",
        "SELECT * FROM xpath_table('id', '''<a>''||email||''</a>''', 'customers', '/a', 'true')"
        " AS t(id int, e text)",
    ):
        assert reads(escapes, sql) is None, sql
        assert needs_approval(escapes, PG_EMAIL, sql), sql


def test_postgresql_judges_aggregates_by_their_support_functions(escapes: PostgresSource) -> None:
    """An aggregate is language `internal` whatever its transition function is written in:
    one stepping with a plpgsql or SQL function that reads customers, used as an aggregate
    or a window function, reads what cannot be told, and so does one the check would trust
    by itself (a member of a trusted extension) when a support function is not."""
    for sql in (
        "SELECT leak_agg(id) FROM orders",
        "SELECT leak_sql_agg(id) FROM orders",
        "SELECT id, leak_agg(id) OVER (ORDER BY id) FROM orders",
        "SELECT trusted_looking(id) FROM orders",
    ):
        assert reads(escapes, sql) is None, sql
        assert needs_approval(escapes, PG_EMAIL, sql), sql


def test_postgresql_finds_functions_behind_operators_casts_domains_and_folded_calls(
    escapes: PostgresSource,
) -> None:
    """Calls no plan shows by name: an operator over an extension's C function, a cast to
    text through a plpgsql function, a domain whose check is one, and an IMMUTABLE plpgsql
    function PostgreSQL ran while planning (its emails sat in the plan as a constant),
    called directly, in attribute notation (`x.f` is `f(x)`) or through a view."""
    for sql in (
        "SELECT id FROM customers WHERE name |~| '/a' IS NULL",
        "SELECT (o.*)::text AS o FROM orders o",
        "SELECT 'x'::checked_text AS t",
        "SELECT all_emails() AS e",
        "SELECT (ROW(1, 1, 1)::orders).emails_of AS e",
        "SELECT * FROM order_notes",
    ):
        assert reads(escapes, sql) is None, sql
        assert needs_approval(escapes, PG_EMAIL, sql), sql


def test_postgresql_still_reports_plain_reads_where_extensions_are_installed(
    escapes: PostgresSource,
) -> None:
    """Nothing is refused for its neighbours: on the same database, queries of plain tables
    with built-in functions and operators, and with those of trusted extensions (citext's
    `=`, pgcrypto's digest), report what they read and need no approval for the email."""
    for sql, read in (
        ("SELECT id, name FROM customers WHERE nick = 'AL' ORDER BY name", {"id", "name", "nick"}),
        ("SELECT encode(digest(name, 'sha256'), 'hex') AS h FROM customers", {"name"}),
        ("SELECT c.name, o.total FROM customers c JOIN orders o ON o.customer_id = c.id", None),
        ("SELECT count(*), sum(total) AS s FROM orders WHERE total > 0", None),
    ):
        found = reads(escapes, sql)
        assert found is not None, sql
        if read is not None:
            assert found == frozenset({Relation("public", "customers", frozenset(read))}), sql
        assert not needs_approval(escapes, PG_EMAIL, sql), sql


# ---------------------------------------------------------------- MariaDB


@pytest.fixture(scope="module")
def mariadb_shop(mariadb_server: MariaDBServer) -> Iterator[tuple[MySQLSource, MySQLSource]]:
    """A database with customers, orders, a merged and a materialised view and a stored
    function; a login that may SHOW its views and one that may only SELECT (both dropped
    after, with the database)."""
    from qexport.sources.mysql.source import MySQLSource

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
