"""A PostgreSQL source configured as a user does (QEXPORT_SOURCE_<NAME>=postgresql://...), with
the CLI and `qexport worker` as subprocesses: exports per requester, retries, a refused login."""

from __future__ import annotations

import csv
import hashlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from tests.e2e.conftest import Env
from tests.support.pg import server_url

PASSWORD = "S3cret-Pa55word"  # noqa: S105 - a made-up password, to show it never leaks
_SETUP = """
CREATE TABLE orders (id int, owner text, total numeric(12, 2), note text);
INSERT INTO orders VALUES
    (1, 'alice', 12.50, 'first'), (2, 'alice', 99999999.99, '=HYPERLINK("x")'),
    (3, 'bob', 7.00, 'bob''s'), (4, 'alice', 1.00, 'small'),
    (5, 'alice', 20.00, E'two\\nlines, "quoted"');
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY mine ON orders USING (owner = current_setting('qexport.user_id', true));
GRANT SELECT ON orders TO {role};
REVOKE EXECUTE ON FUNCTION set_config(text, text, boolean) FROM PUBLIC;
"""
ORDERS = "SELECT id, total, note FROM orders WHERE total >= $min ORDER BY id"


def _url(base: str, **parts: str) -> str:
    return sa.make_url(base).set(**parts).render_as_string(hide_password=False)


@pytest.fixture
def rls_warehouse(pg_template: str) -> Iterator[str]:
    """The URL of a fresh database with RLS-protected orders, for a role that may only read."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_e2e_{suffix}", f"qexport_e2e_reader_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    with psycopg.connect(_url(server_url(), database=name), autocommit=True) as conn:
        conn.execute(_SETUP.format(role=f'"{role}"'))
    yield _url(server_url(), database=name, username=role)
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def _drain(env: Env) -> None:
    assert env.start_worker("--drain").wait(timeout=120) == 0


def test_each_requester_downloads_their_own_rows_as_csv(
    env: Env, rls_warehouse: str, tmp_path: Path
) -> None:
    """Two people export the same saved query; the worker runs it on PostgreSQL with each one's
    identity, row-level security keeps bob's rows from alice and alice's from bob, and the
    downloaded csv holds exact decimals, a neutralised formula and a value with a line feed."""
    env.extra["QEXPORT_SOURCE_WAREHOUSE"] = rls_warehouse
    env.extra["QEXPORT_SOURCE_WAREHOUSE_WORKSPACES"] = "demo"
    env.run(
        "queries", "add", "my_orders", "--sql", ORDERS, "--param", "min:number",
        "--source", "warehouse",
    )  # fmt: skip
    alice = env.create("my_orders", "csv", "min=5")
    env.extra["QEXPORT_USER"] = "bob"
    bob = env.create("my_orders", "csv", "min=5")
    _drain(env)

    view = env.get(bob)
    assert (view["status"], view["row_count"]) == ("succeeded", 1)
    env.run("exports", "download", bob, "-o", str(tmp_path / "bob.csv"))
    assert (tmp_path / "bob.csv").read_bytes() == b"id,total,note\r\n3,7.00,bob's\r\n"

    env.extra["QEXPORT_USER"] = "alice"
    view = env.get(alice)
    assert (view["status"], view["row_count"], view["attempts"]) == ("succeeded", 3, 1)
    out = tmp_path / "alice.csv"
    env.run("exports", "download", alice, "-o", str(out))
    data = out.read_bytes()
    assert hashlib.sha256(data).hexdigest() == view["sha256"]
    assert data.startswith(b"id,total,note\r\n1,12.50,first\r\n")
    assert list(csv.reader(io.StringIO(data.decode(), newline=""))) == [
        ["id", "total", "note"],
        ["1", "12.50", "first"],
        ["2", "99999999.99", '\'=HYPERLINK("x")'],
        ["5", "20.00", 'two\nlines, "quoted"'],
    ]


def test_an_unreachable_source_fails_source_unavailable_after_retries(env: Env) -> None:
    """Nothing listens at the source's address: the export is retried with backoff and then
    fails source_unavailable, after max_attempts attempts."""
    env.extra.update(
        {
            "QEXPORT_SOURCE_DOWN": f"postgresql://reader:{PASSWORD}@127.0.0.1:1/sales",
            "QEXPORT_SOURCE_DOWN_WORKSPACES": "demo",
            "QEXPORT_MAX_ATTEMPTS": "2",
            "QEXPORT_RETRY_BASE_SECONDS": "0.2",
            "QEXPORT_POLL_SECONDS": "0.1",
        }
    )
    env.add_query("down", "SELECT 1 AS one", source="down")  # saving would ask the source
    export_id = env.create("down", "csv")
    _drain(env)
    view = env.get(export_id)
    assert (view["status"], view["attempts"]) == ("failed", 2)
    assert view["failure"]["code"] == "source_unavailable"
    assert "PostgreSQL source 'down' cannot be reached" in view["failure"]["detail"]
    assert PASSWORD not in view["failure"]["detail"]


def test_a_refused_login_fails_at_once_with_a_clear_reason(env: Env, rls_warehouse: str) -> None:
    """A role the server does not know (the test server trusts any password, so a wrong role
    stands in for a wrong password): failed access_lost after one attempt, the detail says
    the login was refused, and the password is nowhere in it."""
    url = _url(rls_warehouse, username="nobody_at_all", password=PASSWORD)
    env.extra.update(
        {
            "QEXPORT_SOURCE_WAREHOUSE": url,
            "QEXPORT_SOURCE_WAREHOUSE_WORKSPACES": "*",
            "QEXPORT_MAX_ATTEMPTS": "3",
        }
    )
    env.add_query("q", "SELECT 1 AS one", source="warehouse")  # saving would ask the source
    export_id = env.create("q", "parquet")
    _drain(env)
    view = env.get(export_id)
    assert (view["status"], view["attempts"]) == ("failed", 1)
    assert view["failure"]["code"] == "access_lost"
    detail = view["failure"]["detail"]
    assert "refused qexport's login (authentication failed" in detail
    assert 'role "nobody_at_all" does not exist' in detail
    assert PASSWORD not in detail


def test_queries_add_on_postgres_is_checked_by_the_server(env: Env, rls_warehouse: str) -> None:
    """`queries add` on a PostgreSQL source: a mistake exits 2 with the server's message and
    its place in the SQL as written; a good query is saved with PostgreSQL's type names."""
    env.extra["QEXPORT_SOURCE_WAREHOUSE"] = rls_warehouse
    env.extra["QEXPORT_SOURCE_WAREHOUSE_WORKSPACES"] = "demo"
    add = ("queries", "add", "q", "--source", "warehouse", "--param", "min:number")
    refused = env.run(*add, "--sql", "SELECT id, $min AS m, nope FROM orders", check=False)
    assert refused.returncode == 2
    assert 'column "nope" does not exist (line 1, column 23)' in " ".join(refused.stderr.split())
    assert env.store.find_query("demo", "q") is None
    saved = env.run(*add, "--sql", ORDERS)
    assert "columns: id integer, total numeric(12,2), note text" in saved.stdout


def test_queries_add_on_an_unreachable_source_saves_nothing(env: Env) -> None:
    """A source that cannot be reached when the query is saved: exit 1, a message saying the
    query was not saved (and no password), nothing saved."""
    env.extra.update(
        {
            "QEXPORT_SOURCE_DOWN": f"postgresql://reader:{PASSWORD}@127.0.0.1:1/sales",
            "QEXPORT_SOURCE_DOWN_WORKSPACES": "demo",
        }
    )
    proc = env.run(
        "queries", "add", "q", "--sql", "SELECT 1 AS one", "--source", "down", check=False
    )
    assert proc.returncode == 1
    message = " ".join(proc.stderr.split())
    assert "PostgreSQL source 'down' cannot be reached" in message
    assert "The query was not saved" in message
    assert PASSWORD not in proc.stderr
    assert env.store.find_query("demo", "q") is None
