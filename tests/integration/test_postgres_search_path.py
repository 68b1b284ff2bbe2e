"""qexport's own catalog statements on a PostgreSQL source (the role check, the planner's
lookups, the catalogue of sensitive tables) mean the catalog whatever search_path the login
chose: a login whose own schema, first on its path, holds views named pg_roles, pg_proc or
pg_class passes nothing and hides no read; the member's query still sees the login's path."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from qexport.domain.exports import Requester
from qexport.domain.rule_check import TableKind
from qexport.sources.postgres.role import SourceRefusedError, role_findings
from qexport.sources.postgres.source import PostgresSource
from tests.integration.test_postgres_source import url_for
from tests.support.pg import server_url

ANN = Requester("ann", "acme")

_TABLES = """
CREATE TABLE customers (id int PRIMARY KEY, email text);
INSERT INTO customers VALUES (1, 'al@secret.test');
CREATE MATERIALIZED VIEW emails AS SELECT id, email FROM customers;
CREATE TABLE events (id int, tenant int, secret text) PARTITION BY LIST (tenant);
CREATE TABLE events_1 PARTITION OF events FOR VALUES IN (1);
CREATE FUNCTION all_customers() RETURNS SETOF customers LANGUAGE plpgsql STABLE
    AS $$ BEGIN RETURN QUERY SELECT * FROM customers; END $$;
"""
# What a superuser login puts first on its path: a pg_roles that says it is none, and no
# function at all.
_SUPERUSER_SHADOW = """
CREATE VIEW {schema}.pg_roles AS
    SELECT oid, rolname, false AS rolsuper, false AS rolbypassrls FROM pg_catalog.pg_roles
    WHERE rolname = session_user;
CREATE VIEW {schema}.pg_proc AS SELECT * FROM pg_catalog.pg_proc WHERE false;
"""
# What a reader puts first: no relation, no function, no partition's parent, no dependency.
_READER_SHADOW = """
CREATE VIEW {schema}.pg_class AS SELECT * FROM pg_catalog.pg_class WHERE false;
CREATE VIEW {schema}.pg_proc AS SELECT * FROM pg_catalog.pg_proc WHERE false;
CREATE VIEW {schema}.pg_inherits AS SELECT * FROM pg_catalog.pg_inherits WHERE false;
CREATE VIEW {schema}.pg_depend AS SELECT * FROM pg_catalog.pg_depend WHERE false;
"""


@dataclass(frozen=True)
class Shadowed:
    """A database with a superuser login and a reader login, each owning a schema of views
    that shadow the catalog (not on their path until a test puts them there)."""

    admin_url: str
    database: str
    superuser: str
    reader: str

    def run(self, *statements: str, url: str | None = None) -> None:
        with psycopg.connect(url or self.admin_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def url_of(self, role: str, path: str | None = None) -> str:
        url = url_for(self.admin_url, username=role)
        return url if path is None else f"{url}?options=-c%20search_path%3D{path}"


@pytest.fixture(scope="module")
def shadowed(pg_template: str) -> Iterator[Shadowed]:
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    suffix = uuid.uuid4().hex[:10]
    database = f"qexport_path_{suffix}"
    superuser, reader = f"qexport_su_{suffix}", f"qexport_sr_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
        admin.execute(f"CREATE ROLE {superuser} LOGIN SUPERUSER")
        admin.execute(f"CREATE ROLE {reader} LOGIN")
    found = Shadowed(url_for(server_url(), database=database), database, superuser, reader)
    try:
        found.run(
            _TABLES,
            f"GRANT SELECT ON customers, emails, events, events_1 TO {reader}",
            f"CREATE SCHEMA shadow AUTHORIZATION {superuser}",
            f"CREATE SCHEMA shadow_r AUTHORIZATION {reader}",
        )
        found.run(_SUPERUSER_SHADOW.format(schema="shadow"), url=found.url_of(superuser))
        found.run(_READER_SHADOW.format(schema="shadow_r"), url=found.url_of(reader))
        yield found
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            admin.execute(f"DROP ROLE IF EXISTS {superuser}")
            admin.execute(f"DROP ROLE IF EXISTS {reader}")


@pytest.fixture
def role_path(shadowed: Shadowed) -> Iterator[None]:
    """Both logins' paths in the database put their shadow schema first, as the review's
    `ALTER ROLE ... IN DATABASE ... SET search_path` does; reset after."""
    for role, schema in ((shadowed.superuser, "shadow"), (shadowed.reader, "shadow_r")):
        shadowed.run(
            f"ALTER ROLE {role} IN DATABASE {shadowed.database}"
            f" SET search_path = {schema}, pg_catalog, public"
        )
    yield
    for role in (shadowed.superuser, shadowed.reader):
        shadowed.run(f"ALTER ROLE {role} IN DATABASE {shadowed.database} RESET search_path")


def _preview(source: PostgresSource, sql: str) -> list[dict[str, object]]:
    preview = source.preview(
        sql,
        {},
        ANN,
        timeout_seconds=10,
        max_rows=5,
        max_cell_chars=200,
        max_bytes=100_000,
    )
    rows: list[dict[str, object]] = preview.table.to_pylist()
    return rows


@pytest.mark.usefixtures("role_path")
def test_a_superuser_shadowing_pg_roles_is_refused(shadowed: Shadowed) -> None:
    """The login's own pg_roles says it is no superuser and its own pg_proc holds nothing: it
    is refused as the superuser it is, at registration and at the start of every session,
    before its query runs."""
    # What the login's own statements see: the shadow.
    with psycopg.connect(shadowed.url_of(shadowed.superuser)) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert row.fetchone() == (False,)
    source = PostgresSource("warehouse", shadowed.url_of(shadowed.superuser))
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        source.check_role()
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        _preview(source, "SELECT pg_catalog.pg_read_file('/etc/hostname') AS f")
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        source.relations("SELECT id FROM customers", {}, ANN, timeout_seconds=10)
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        source.catalogue([("public", "customers")], timeout_seconds=10)


def test_a_superuser_shadowing_pg_roles_through_its_url_is_refused(shadowed: Shadowed) -> None:
    """The same path set by the source URL's `options=-c search_path=...`."""
    url = shadowed.url_of(shadowed.superuser, path="shadow,pg_catalog")
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW search_path").fetchone() == ("shadow,pg_catalog",)
    source = PostgresSource("warehouse", url)
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        source.check_role()
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        _preview(source, "SELECT 1 AS x")


def test_a_temporary_view_cannot_shadow_the_catalog(shadowed: Shadowed) -> None:
    """On a connection whose temporary schema is first on its path and holds pg_roles and
    pg_proc views, the check still finds the superuser; the connection's path is the same
    after it."""
    with psycopg.connect(shadowed.url_of(shadowed.superuser), autocommit=True) as conn:
        conn.execute("SET search_path = pg_temp, pg_catalog")
        conn.execute(_SUPERUSER_SHADOW.format(schema="pg_temp").replace("VIEW", "TEMP VIEW"))
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert row.fetchone() == (False,)
        assert role_findings(conn) == ["is a superuser"]
        assert conn.execute("SHOW search_path").fetchone() == ("pg_temp, pg_catalog",)


@pytest.mark.usefixtures("role_path")
def test_the_members_query_runs_with_the_logins_search_path(shadowed: Shadowed) -> None:
    """qexport pins the path for its own statements only: the member's query, after the role
    check and the result's description, sees the login's path and what it names there."""
    source = PostgresSource("warehouse", shadowed.url_of(shadowed.reader))
    assert source.check_role() == []
    rows = _preview(
        source, "SELECT current_setting('search_path') AS p, (SELECT count(*) FROM pg_proc) AS n"
    )
    assert rows == [{"p": "shadow_r, pg_catalog, public", "n": 0}]
    described = source.describe("SELECT * FROM pg_class", {}, ANN, timeout_seconds=10)
    assert "relname" in [column.name for column in described]


@pytest.mark.usefixtures("role_path")
def test_a_shadowed_catalog_hides_no_read(shadowed: Shadowed) -> None:
    """The reader's own pg_class, pg_proc, pg_inherits and pg_depend are empty: the planner's
    lookups still see the partition's parent, the table a materialised view was made from and
    the plpgsql function whose reads no plan shows; the sensitive-table catalogue still finds
    the table and its columns."""
    source = PostgresSource("warehouse", shadowed.url_of(shadowed.reader))

    def tables(sql: str) -> set[str] | None:
        found = source.relations(sql, {}, ANN, timeout_seconds=10)
        return None if found is None else {f"{r.schema}.{r.table}" for r in found}

    assert tables("SELECT secret FROM events_1") == {"public.events", "public.events_1"}
    assert tables("SELECT email FROM emails") == {"public.emails", "public.customers"}
    assert tables("SELECT * FROM all_customers()") is None
    catalogue = source.catalogue([("public", "customers")], timeout_seconds=10)
    (table,) = catalogue.tables
    assert (table.kind, table.columns) == (TableKind.TABLE, ("id", "email"))
