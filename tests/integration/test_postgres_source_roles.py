"""The role check of PostgreSQL sources on a real server, with real roles: privileged roles
are refused (at registration and at a worker's first connection) unless allowed, and with the
README's row-level security setup a query cannot read another requester's rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.services.requests import request_export
from qexport.sources.postgres import PostgresSource
from qexport.sources.postgres_role import SourceRefusedError
from qexport.worker.loop import Worker
from tests.containers import container_of
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.integration.test_postgres_source import url_for
from tests.pg import server_url

ALICE = Requester("alice", "w1")

# The README's setup for a source whose tables use row-level security.
_SETUP = """
CREATE TABLE docs (id int PRIMARY KEY, owner text, body text);
INSERT INTO docs VALUES (1, 'alice', 'alice''s'), (2, 'bob', 'bob''s'), (3, 'bob', 'bob again');
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
CREATE POLICY per_user ON docs USING (owner = current_setting('qexport.user_id'));
REVOKE EXECUTE ON FUNCTION set_config(text, text, boolean) FROM PUBLIC;
"""


@dataclass(frozen=True)
class Server:
    admin_url: str  # a superuser on the test database
    name: str

    def run(self, *statements: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def url_of(self, role: str) -> str:
        return url_for(self.admin_url, username=role)


@pytest.fixture(scope="module")
def server(pg_template: str) -> Iterator[Server]:
    """A database with an RLS-protected table, for this module (dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    name = f"qexport_roles_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    found = Server(url_for(server_url(), database=name), name)
    found.run(_SETUP)
    yield found
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def new_role(server: Server) -> Iterator[Callable[..., str]]:
    """Makes uniquely named login roles with SELECT on docs; drops them after the test."""
    made: list[str] = []

    def make(attributes: str = "", *grants: str) -> str:
        role = f"qexport_role_{uuid.uuid4().hex[:10]}"
        made.append(role)
        server.run(f'CREATE ROLE "{role}" LOGIN {attributes}', f'GRANT SELECT ON docs TO "{role}"')
        server.run(*(g.format(role=f'"{role}"') for g in grants))
        return role

    yield make
    for role in reversed(made):
        server.run(f'DROP OWNED BY "{role}"', f'DROP ROLE IF EXISTS "{role}"')


def _intermediate(server: Server, granted: str) -> str:
    """A NOLOGIN role holding `granted`, to test memberships that are only inherited."""
    mid = f"qexport_mid_{uuid.uuid4().hex[:10]}"
    server.run(f'CREATE ROLE "{mid}" NOLOGIN', f'GRANT {granted} TO "{mid}"')
    return mid


def test_a_role_that_may_only_read_passes(server: Server, new_role: Callable[..., str]) -> None:
    """A plain reader of an RLS database without set_config has nothing to report."""
    source = PostgresSource("warehouse", server.url_of(new_role()))
    assert source.check_role() == []


PRIVILEGES: list[tuple[str, str, tuple[str, ...], str]] = [
    ("superuser", "SUPERUSER", (), "is a superuser"),
    ("bypassrls", "BYPASSRLS", (), "has BYPASSRLS"),
    (
        "read server files",
        "",
        ("GRANT pg_read_server_files TO {role}",),
        "is a member of pg_read_server_files",
    ),
    ("read all data", "", ("GRANT pg_read_all_data TO {role}",), "pg_read_all_data"),
    (
        "pg_read_file granted directly",
        "",
        ("GRANT EXECUTE ON FUNCTION pg_read_file(text) TO {role}",),
        "may execute pg_read_file",
    ),
    (
        "set_config in an RLS database",
        "",
        ("GRANT EXECUTE ON FUNCTION set_config(text, text, boolean) TO {role}",),
        "may execute set_config",
    ),
]


@pytest.mark.parametrize(
    ("attributes", "grants", "finding"),
    [p[1:] for p in PRIVILEGES],
    ids=[p[0] for p in PRIVILEGES],
)
def test_a_privileged_role_is_refused_with_what_was_found(
    server: Server,
    new_role: Callable[..., str],
    attributes: str,
    grants: tuple[str, ...],
    finding: str,
) -> None:
    """Each privilege refuses the source in one line naming it and the fix; allowed by the
    operator, the same finding is returned for a warning."""
    role = new_role(attributes, *grants)
    with pytest.raises(SourceRefusedError) as refused:
        PostgresSource("warehouse", server.url_of(role)).check_role()
    message = str(refused.value)
    assert finding in message
    assert "--allow-privileged-role" in message
    assert "\n" not in message
    assert refused.value.code is FailureCode.ACCESS_LOST
    allowed = PostgresSource("warehouse", server.url_of(role), allow_privileged_role=True)
    assert any(finding in f for f in allowed.check_role())


def test_an_inherited_membership_is_found(server: Server, new_role: Callable[..., str]) -> None:
    """Membership in pg_execute_server_program through another role is found too."""
    mid = _intermediate(server, "pg_execute_server_program")
    try:
        role = new_role("", f'GRANT "{mid}" TO {{role}}')
        with pytest.raises(SourceRefusedError, match="pg_execute_server_program"):
            PostgresSource("warehouse", server.url_of(role)).check_role()
    finally:
        server.run(f'DROP ROLE IF EXISTS "{mid}"')


def test_dblink_is_found_when_installed(server: Server, new_role: Callable[..., str]) -> None:
    """With the dblink extension installed, its functions (EXECUTE granted to PUBLIC by
    default) refuse the source; moved to a schema the role may not use, they no longer do."""
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'dblink'"
        ).fetchone()
    if available is None:
        pytest.skip("the dblink extension is not available on this server")
    server.run("CREATE EXTENSION IF NOT EXISTS dblink")
    try:
        role = new_role()
        with pytest.raises(SourceRefusedError, match="may execute dblink"):
            PostgresSource("warehouse", server.url_of(role)).check_role()
        server.run("CREATE SCHEMA IF NOT EXISTS hidden", "ALTER EXTENSION dblink SET SCHEMA hidden")
        assert PostgresSource("warehouse", server.url_of(role)).check_role() == []
    finally:
        server.run("DROP EXTENSION IF EXISTS dblink", "DROP SCHEMA IF EXISTS hidden")


# ---------------------------------------------------------------- in a worker


def _deps(tmp_path: Path, source: PostgresSource, sql: str) -> Container:
    store = InMemoryMetadataStore()
    store.add_query(Query("q1", ALICE.workspace_id, "docs", sql, "warehouse"))
    return container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"warehouse": source}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path, statement_timeout_seconds=30),
    )


def _export(deps: Container, fmt: str = "csv") -> tuple[Status, FailureCode | None, str, bytes]:
    record = request_export(
        deps.exports, deps.catalog, deps.clock, ALICE, query_ref="docs", fmt=fmt
    )
    Worker(deps, drain=True).run()
    final = deps.exports.get_export(record.id)
    assert final is not None
    data = b""
    if final.status is Status.SUCCEEDED:
        with deps.objects.open(final.storage_key) as body:
            data = body.read()
    return final.status, final.failure_code, final.failure_detail or "", data


def test_a_worker_refuses_a_privileged_source_until_the_role_is_fixed(
    server: Server, new_role: Callable[..., str], tmp_path: Path
) -> None:
    """A worker's first connection checks the role: an export on a BYPASSRLS role fails
    access_lost, not retried, naming the finding; once the operator removes it, the same
    worker exports (a refusal is not remembered)."""
    role = new_role("BYPASSRLS")
    deps = _deps(tmp_path, PostgresSource("warehouse", server.url_of(role)), "SELECT * FROM docs")
    status, code, detail, _ = _export(deps)
    assert (status, code) == (Status.FAILED, FailureCode.ACCESS_LOST)
    assert "BYPASSRLS" in detail
    server.run(f'ALTER ROLE "{role}" NOBYPASSRLS')
    status, code, _, data = _export(deps)
    assert (status, code) == (Status.SUCCEEDED, None)
    assert data == b"id,owner,body\r\n1,alice,alice's\r\n"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT set_config('qexport.user_id', 'bob', true) AS s, * FROM docs",
        "SELECT * FROM docs WHERE set_config('qexport.user_id', 'bob', true) IS NOT NULL",
        "SELECT d.* FROM (SELECT set_config('qexport.user_id', 'bob', true)) s, docs d",
    ],
)
def test_a_query_cannot_read_another_users_rows(
    server: Server, new_role: Callable[..., str], tmp_path: Path, sql: str
) -> None:
    """With the README's advice applied (set_config revoked from PUBLIC), alice's export that
    tries to become bob never returns bob's rows: it fails query_invalid. qexport still sets
    the requester itself (SET LOCAL needs no EXECUTE on set_config): a plain export of the
    same table returns exactly alice's row."""
    source = PostgresSource("warehouse", server.url_of(new_role()))
    status, code, detail, data = _export(_deps(tmp_path, source, sql))
    assert b"bob" not in data
    assert (status, code) == (Status.FAILED, FailureCode.QUERY_INVALID)
    assert "set_config" in detail
    status, _, _, data = _export(_deps(tmp_path, source, "SELECT * FROM docs"))
    assert status is Status.SUCCEEDED
    assert data == b"id,owner,body\r\n1,alice,alice's\r\n"


def test_an_allowed_privileged_source_is_used_and_logged(
    server: Server, new_role: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Registered with --allow-privileged-role, the source is used and the worker logs a
    warning naming what it found."""
    role = new_role("BYPASSRLS")
    source = PostgresSource("warehouse", server.url_of(role), allow_privileged_role=True)
    status, _, _, _ = _export(_deps(tmp_path, source, "SELECT id FROM docs"))
    assert status is Status.SUCCEEDED
    logged = capsys.readouterr()
    assert "source_role_privileged" in logged.out + logged.err
    assert "BYPASSRLS" in logged.out + logged.err
