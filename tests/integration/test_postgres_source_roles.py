"""The role check of PostgreSQL sources on a real server, with real roles: privileged roles,
and logins that can become one through any chain of grants, are refused (at registration and
at a worker's first connection) naming the path and the fix, unless allowed; and with the
README's row-level security setup a query cannot read another requester's rows."""

from __future__ import annotations

import multiprocessing
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import AccessLostError, FailureCode
from qexport.domain.queries import Query
from qexport.ports import PreviewJob
from qexport.services.requests import record_request
from qexport.sources.postgres.role import SourceRefusedError
from qexport.sources.postgres.source import PostgresSource
from qexport.store.engine import create_engine, migrate
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.integration.test_postgres_source import url_for
from tests.support.containers import container_of
from tests.support.pg import server_url

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
def roles_database(pg_template: str) -> Iterator[Server]:
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
def new_role(roles_database: Server) -> Iterator[Callable[..., str]]:
    """Makes uniquely named login roles with SELECT on docs; drops them after the test."""
    made: list[str] = []

    def make(attributes: str = "", *grants: str) -> str:
        role = f"qexport_role_{uuid.uuid4().hex[:10]}"
        made.append(role)
        roles_database.run(
            f'CREATE ROLE "{role}" LOGIN {attributes}', f'GRANT SELECT ON docs TO "{role}"'
        )
        roles_database.run(*(g.format(role=f'"{role}"') for g in grants))
        return role

    yield make
    for role in reversed(made):
        roles_database.run(f'DROP OWNED BY "{role}"', f'DROP ROLE IF EXISTS "{role}"')


def _intermediate(server: Server, granted: str) -> str:
    """A NOLOGIN role holding `granted`, to test memberships that are only inherited."""
    mid = f"qexport_mid_{uuid.uuid4().hex[:10]}"
    server.run(f'CREATE ROLE "{mid}" NOLOGIN', f'GRANT {granted} TO "{mid}"')
    return mid


def test_a_role_that_may_only_read_passes(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """A plain reader of an RLS database without set_config has nothing to report."""
    source = PostgresSource("warehouse", roles_database.url_of(new_role()))
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
    roles_database: Server,
    new_role: Callable[..., str],
    attributes: str,
    grants: tuple[str, ...],
    finding: str,
) -> None:
    """Each privilege refuses the source in one line naming it and the fix; allowed by the
    operator, the same finding is returned for a warning."""
    role = new_role(attributes, *grants)
    with pytest.raises(SourceRefusedError) as refused:
        PostgresSource("warehouse", roles_database.url_of(role)).check_role()
    message = str(refused.value)
    assert finding in message
    assert "--allow-privileged-role" in message
    assert "\n" not in message
    assert refused.value.code is FailureCode.ACCESS_LOST
    allowed = PostgresSource("warehouse", roles_database.url_of(role), allow_privileged_role=True)
    assert any(finding in f for f in allowed.check_role())


def test_an_inherited_membership_is_found(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """Membership in pg_execute_server_program through another role is found too."""
    mid = _intermediate(roles_database, "pg_execute_server_program")
    try:
        role = new_role("", f'GRANT "{mid}" TO {{role}}')
        with pytest.raises(SourceRefusedError, match="pg_execute_server_program"):
            PostgresSource("warehouse", roles_database.url_of(role)).check_role()
    finally:
        roles_database.run(f'DROP ROLE IF EXISTS "{mid}"')


def test_dblink_is_found_when_installed(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """With the dblink extension installed, its functions (EXECUTE granted to PUBLIC by
    default) refuse the source; moved to a schema the role may not use, they no longer do."""
    with psycopg.connect(roles_database.admin_url, autocommit=True) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'dblink'"
        ).fetchone()
    if available is None:
        pytest.skip("the dblink extension is not available on this server")
    roles_database.run("CREATE EXTENSION IF NOT EXISTS dblink")
    try:
        role = new_role()
        with pytest.raises(SourceRefusedError, match="may execute dblink"):
            PostgresSource("warehouse", roles_database.url_of(role)).check_role()
        roles_database.run(
            "CREATE SCHEMA IF NOT EXISTS hidden", "ALTER EXTENSION dblink SET SCHEMA hidden"
        )
        assert PostgresSource("warehouse", roles_database.url_of(role)).check_role() == []
    finally:
        roles_database.run("DROP EXTENSION IF EXISTS dblink", "DROP SCHEMA IF EXISTS hidden")


# ---------------------------------------------------------------- roles the login can become


@dataclass(frozen=True)
class Becoming:
    """A login and the NOLOGIN roles around it; `{login}`, `{table}` and the groups' names
    are placeholders in the statements and in the expected finding."""

    login: str  # the login's attributes
    groups: tuple[tuple[str, str], ...]  # (placeholder, attributes) of NOLOGIN roles
    statements: tuple[str, ...]  # run as the superuser, groups made first
    finding: str


_SU = (("admin", "SUPERUSER"),)
_RLS_TABLE = (
    "CREATE TABLE {table} (id int, owner text)",
    "INSERT INTO {table} VALUES (1, 'alice'), (2, 'bob')",
    "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
    "CREATE POLICY per_user ON {table} USING (owner = current_setting('qexport.user_id'))",
)
# The review's function: whoever may call it reads any server file, as its owner.
_READF = (
    "CREATE FUNCTION public.{function}(p text) RETURNS text LANGUAGE sql SECURITY DEFINER"
    " AS $$ SELECT pg_read_file(p) $$"
)
BECOMING: dict[str, Becoming] = {
    "member of a superuser": Becoming(
        "",
        _SU,
        ("GRANT {admin} TO {login}",),
        "can become the superuser {admin} ({login} -> {admin}: REVOKE {admin} FROM {login})",
    ),
    "indirect member of a superuser": Becoming(
        "",
        (("mid", ""), *_SU),
        ("GRANT {admin} TO {mid}", "GRANT {mid} TO {login}"),
        "can become the superuser {admin} ({login} -> {mid} -> {admin}: REVOKE {admin} FROM {mid})",
    ),
    "NOINHERIT chain to a superuser": Becoming(
        "NOINHERIT",
        (("mid", "NOINHERIT"), *_SU),
        ("GRANT {admin} TO {mid}", "GRANT {mid} TO {login}"),
        "can become the superuser {admin} ({login} -> {mid} -> {admin}: REVOKE {admin} FROM {mid})",
    ),
    "member of a BYPASSRLS role": Becoming(
        "",
        (("mid", ""), ("bypass", "BYPASSRLS")),
        ("GRANT {bypass} TO {mid}", "GRANT {mid} TO {login}"),
        "can become {bypass}, which has BYPASSRLS ({login} -> {mid} -> {bypass}:"
        " REVOKE {bypass} FROM {mid})",
    ),
    "member of the owner of an RLS table": Becoming(
        "",
        (("owner", ""),),
        (*_RLS_TABLE, "ALTER TABLE {table} OWNER TO {owner}", "GRANT {owner} TO {login}"),
        "can become {owner}, which owns a table whose row-level security is not forced on its"
        " owner: public.{table} ({login} -> {owner}: REVOKE {owner} FROM {login}, or"
        " ALTER TABLE public.{table} FORCE ROW LEVEL SECURITY)",
    ),
    "owner of an RLS table": Becoming(
        "",
        (),
        (*_RLS_TABLE, "ALTER TABLE {table} OWNER TO {login}"),
        "owns a table whose row-level security is not forced on its owner: public.{table}"
        " (ALTER TABLE public.{table} FORCE ROW LEVEL SECURITY)",
    ),
    "pg_read_all_stats through pg_monitor": Becoming(
        "",
        (),
        ("GRANT pg_monitor TO {login}",),
        "is a member of pg_read_all_stats ({login} -> pg_monitor -> pg_read_all_stats:"
        " REVOKE pg_monitor FROM {login})",
    ),
    "SECURITY DEFINER function of a superuser": Becoming(
        "",
        _SU,
        (_READF, "ALTER FUNCTION public.{function}(text) OWNER TO {admin}"),
        "may execute public.{function}(text), a SECURITY DEFINER function of {admin}, which is"
        " a superuser (REVOKE EXECUTE ON FUNCTION public.{function}(text) FROM PUBLIC, or ALTER"
        " FUNCTION public.{function}(text) OWNER TO a reader)",
    ),
    "SECURITY DEFINER function of a role that can become a superuser": Becoming(
        "",
        (("owner", ""), *_SU),
        (
            _READF,
            "ALTER FUNCTION public.{function}(text) OWNER TO {owner}",
            "GRANT {admin} TO {owner}",
        ),
        "may execute public.{function}(text), a SECURITY DEFINER function of {owner}, which can"
        " become the superuser {admin} (REVOKE EXECUTE ON FUNCTION public.{function}(text) FROM"
        " PUBLIC, or ALTER FUNCTION public.{function}(text) OWNER TO a reader)",
    ),
    "aggregate over a SECURITY DEFINER function of a superuser": Becoming(
        "",
        _SU,
        (
            "CREATE FUNCTION public.{function}(s text, p text) RETURNS text LANGUAGE sql"
            " SECURITY DEFINER AS $$ SELECT coalesce(s, '') || pg_read_file(p) $$",
            "REVOKE EXECUTE ON FUNCTION public.{function}(text, text) FROM PUBLIC",
            "CREATE AGGREGATE public.{function}_agg(text)"
            " (sfunc = public.{function}, stype = text)",
            "ALTER FUNCTION public.{function}(text, text) OWNER TO {admin}",
            "ALTER AGGREGATE public.{function}_agg(text) OWNER TO {admin}",
        ),
        "may execute public.{function}_agg(text), an aggregate that runs"
        " public.{function}(text, text), a SECURITY DEFINER function of {admin}, which is a"
        " superuser (REVOKE EXECUTE ON FUNCTION public.{function}_agg(text) FROM PUBLIC, or"
        " ALTER FUNCTION public.{function}(text, text) OWNER TO a reader)",
    ),
    "SECURITY DEFINER function only after SET ROLE": Becoming(
        "NOINHERIT",
        (("mid", ""), *_SU),
        (
            _READF,
            "ALTER FUNCTION public.{function}(text) OWNER TO {admin}",
            "REVOKE EXECUTE ON FUNCTION public.{function}(text) FROM PUBLIC",
            "GRANT EXECUTE ON FUNCTION public.{function}(text) TO {mid}",
            "GRANT {mid} TO {login}",
        ),
        "can become {mid}, which may execute public.{function}(text), a SECURITY DEFINER"
        " function of {admin}, which is a superuser ({login} -> {mid}: REVOKE {mid} FROM"
        " {login}, or REVOKE EXECUTE ON FUNCTION public.{function}(text) FROM {mid})",
    ),
    "pg_read_file only after SET ROLE": Becoming(
        "NOINHERIT",
        (("mid", ""),),
        ("GRANT EXECUTE ON FUNCTION pg_read_file(text) TO {mid}", "GRANT {mid} TO {login}"),
        "can become {mid}, which may execute pg_read_file ({login} -> {mid}:"
        " REVOKE {mid} FROM {login})",
    ),
}


@pytest.fixture
def becoming(
    roles_database: Server, new_role: Callable[..., str]
) -> Iterator[Callable[[Becoming], dict[str, str]]]:
    """Sets a case up: the names its placeholders stand for; drops its roles after."""
    groups: list[str] = []

    def make(case: Becoming) -> dict[str, str]:
        names = {
            "table": f"qexport_rls_{uuid.uuid4().hex[:10]}",
            "function": f"qexport_readf_{uuid.uuid4().hex[:10]}",
        }
        for placeholder, attributes in case.groups:
            names[placeholder] = f"qexport_{placeholder}_{uuid.uuid4().hex[:10]}"
            groups.append(names[placeholder])
            roles_database.run(f"CREATE ROLE {names[placeholder]} NOLOGIN {attributes}")
        names["login"] = new_role(case.login)
        roles_database.run(*(s.format(**names) for s in case.statements))
        return names

    yield make
    for group in groups:
        roles_database.run(f"DROP OWNED BY {group}", f"DROP ROLE IF EXISTS {group}")


_FIX = re.compile(
    r"REVOKE (?:EXECUTE ON FUNCTION )?\S+ FROM \S+(?=[,)])|ALTER TABLE \S+ FORCE ROW LEVEL SECURITY"
)


@pytest.mark.parametrize("case", BECOMING.values(), ids=BECOMING.keys())
def test_a_role_the_login_can_become_refuses_the_source(
    roles_database: Server, becoming: Callable[[Becoming], dict[str, str]], case: Becoming
) -> None:
    """Whatever the login can become, through any chain of grants (NOINHERIT ones too: SET
    ROLE is still possible), is judged like the login itself: refused in one line naming
    the role, the grant path and the fix; once the fix the message gives is applied, the
    same login passes."""
    names = becoming(case)
    finding = case.finding.format(**names)
    with pytest.raises(SourceRefusedError) as refused:
        PostgresSource("warehouse", roles_database.url_of(names["login"])).check_role()
    message = str(refused.value)
    assert finding in message
    assert "\n" not in message
    assert refused.value.code is FailureCode.ACCESS_LOST
    roles_database.run(_FIX.findall(finding)[-1])
    assert PostgresSource("warehouse", roles_database.url_of(names["login"])).check_role() == []


def test_a_superuser_login_cannot_hide_behind_a_role_option(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """A superuser login whose URL sets a reader as the session's role (`options=-c
    role=...`) is judged as the login it is: a query could go back with set_config('role',
    'none', true)."""
    reader = new_role()
    url = f"{roles_database.admin_url}?options=-c%20role%3D{reader}"
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (reader,)
    with pytest.raises(SourceRefusedError, match="is a superuser"):
        PostgresSource("warehouse", url).check_role()


def test_the_shortest_path_is_named_then_the_next(
    roles_database: Server, becoming: Callable[[Becoming], dict[str, str]]
) -> None:
    """Two chains to one superuser: the message names the shorter; once it is revoked, the
    longer; both revoked, the login passes."""
    names = becoming(
        Becoming(
            "",
            (("a", ""), ("b", ""), *_SU),
            ("GRANT {admin} TO {a}", "GRANT {b} TO {a}", "GRANT {admin} TO {b}"),
            "",
        )
    )
    login, a, b, admin = names["login"], names["a"], names["b"], names["admin"]
    roles_database.run(f"GRANT {a} TO {login}")
    source = PostgresSource("warehouse", roles_database.url_of(login))
    with pytest.raises(SourceRefusedError) as refused:
        source.check_role()
    assert f"({login} -> {a} -> {admin}: REVOKE {admin} FROM {a})" in str(refused.value)
    roles_database.run(f"REVOKE {admin} FROM {a}")
    with pytest.raises(SourceRefusedError) as refused:
        source.check_role()
    assert f"({login} -> {a} -> {b} -> {admin}: REVOKE {admin} FROM {b})" in str(refused.value)
    roles_database.run(f"REVOKE {admin} FROM {b}")
    assert source.check_role() == []


def test_a_definer_function_that_cannot_do_more_passes(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """SECURITY DEFINER functions that give the caller nothing past reading do not refuse
    the source: one owned by a plain reader, and a trigger function of the superuser (no
    query can call it)."""
    reader, owner = new_role(), f"qexport_owner_{uuid.uuid4().hex[:10]}"
    function, trigger = (f"qexport_{kind}_{uuid.uuid4().hex[:10]}" for kind in ("fn", "trg"))
    roles_database.run(
        f"CREATE ROLE {owner} NOLOGIN",
        f"GRANT SELECT ON docs TO {owner}",
        f"CREATE FUNCTION public.{function}() RETURNS bigint LANGUAGE sql SECURITY DEFINER"
        " AS $$ SELECT count(*) FROM docs $$",
        f"ALTER FUNCTION public.{function}() OWNER TO {owner}",
        f"CREATE FUNCTION public.{trigger}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
        " AS $$ BEGIN RETURN NEW; END $$",
    )
    try:
        assert PostgresSource("warehouse", roles_database.url_of(reader)).check_role() == []
    finally:
        roles_database.run(
            f"DROP FUNCTION public.{trigger}()", f"DROP OWNED BY {owner}", f"DROP ROLE {owner}"
        )


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
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "docs", by_name=True), fmt),
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
    roles_database: Server, new_role: Callable[..., str], tmp_path: Path
) -> None:
    """A worker's first connection checks the role: an export on a BYPASSRLS role fails
    access_lost, not retried, naming the finding; once the operator removes it, the same
    worker exports (a refusal is not remembered)."""
    role = new_role("BYPASSRLS")
    deps = _deps(
        tmp_path, PostgresSource("warehouse", roles_database.url_of(role)), "SELECT * FROM docs"
    )
    status, code, detail, _ = _export(deps)
    assert (status, code) == (Status.FAILED, FailureCode.ACCESS_LOST)
    assert "BYPASSRLS" in detail
    roles_database.run(f'ALTER ROLE "{role}" NOBYPASSRLS')
    status, code, _, data = _export(deps)
    assert (status, code) == (Status.SUCCEEDED, None)
    assert data == b"id,owner,body\r\n1,alice,alice's\r\n"


@pytest.mark.parametrize("case", BECOMING.values(), ids=BECOMING.keys())
def test_a_worker_refuses_a_login_that_can_become_a_privileged_role(
    roles_database: Server,
    becoming: Callable[[Becoming], dict[str, str]],
    tmp_path: Path,
    case: Becoming,
) -> None:
    """At a worker's first connection, a login that can become a privileged role fails the
    export access_lost after one attempt (not retried: only the operator can fix the role),
    the detail naming the role, the path and the fix; no row is exported."""
    names = becoming(case)
    source = PostgresSource("warehouse", roles_database.url_of(names["login"]))
    deps = _deps(tmp_path, source, "SELECT * FROM docs")
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "docs", by_name=True), "csv"),
    )
    Worker(deps, drain=True).run()
    final = deps.exports.get_export(record.id)
    assert final is not None
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.ACCESS_LOST)
    assert final.attempt == 1
    assert case.finding.format(**names) in (final.failure_detail or "")
    assert final.row_count is None


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT set_config('qexport.user_id', 'bob', true) AS s, * FROM docs",
        "SELECT * FROM docs WHERE set_config('qexport.user_id', 'bob', true) IS NOT NULL",
        "SELECT d.* FROM (SELECT set_config('qexport.user_id', 'bob', true)) s, docs d",
    ],
)
def test_a_query_cannot_read_another_users_rows(
    roles_database: Server, new_role: Callable[..., str], tmp_path: Path, sql: str
) -> None:
    """With the README's advice applied (set_config revoked from PUBLIC), alice's export that
    tries to become bob never returns bob's rows: it fails query_invalid. qexport still sets
    the requester itself (SET LOCAL needs no EXECUTE on set_config): a plain export of the
    same table returns exactly alice's row."""
    source = PostgresSource("warehouse", roles_database.url_of(new_role()))
    status, code, detail, data = _export(_deps(tmp_path, source, sql))
    assert b"bob" not in data
    assert (status, code) == (Status.FAILED, FailureCode.QUERY_INVALID)
    assert "set_config" in detail
    status, _, _, data = _export(_deps(tmp_path, source, "SELECT * FROM docs"))
    assert status is Status.SUCCEEDED
    assert data == b"id,owner,body\r\n1,alice,alice's\r\n"


def test_an_allowed_privileged_source_is_used_and_logged(
    roles_database: Server,
    new_role: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Registered with --allow-privileged-role, the source is used and the worker logs a
    warning naming what it found."""
    role = new_role("BYPASSRLS")
    source = PostgresSource("warehouse", roles_database.url_of(role), allow_privileged_role=True)
    status, _, _, _ = _export(_deps(tmp_path, source, "SELECT id FROM docs"))
    assert status is Status.SUCCEEDED
    logged = capsys.readouterr()
    assert "source_role_privileged" in logged.out + logged.err
    assert "BYPASSRLS" in logged.out + logged.err


def test_the_reviews_readf_refuses_the_source_and_its_export(
    roles_database: Server, new_role: Callable[..., str], tmp_path: Path
) -> None:
    """`readf(p)`, a SECURITY DEFINER function of the superuser that reads any server file,
    executable by PUBLIC: the export that calls it fails access_lost naming the function, its
    owner and the fix, and no byte of the file is exported; once EXECUTE is revoked from
    PUBLIC, the source passes again."""
    with psycopg.connect(roles_database.admin_url) as conn:
        (superuser,) = conn.execute("SELECT quote_ident(current_user)").fetchone() or ("",)
    roles_database.run(
        "CREATE FUNCTION public.readf(p text) RETURNS text LANGUAGE sql SECURITY DEFINER"
        " AS $$ SELECT pg_read_file(p) $$"
    )
    try:
        source = PostgresSource("warehouse", roles_database.url_of(new_role()))
        sql = "SELECT readf('/etc/hostname') AS f"
        status, code, detail, data = _export(_deps(tmp_path, source, sql))
        assert (status, code, data) == (Status.FAILED, FailureCode.ACCESS_LOST, b"")
        assert (
            f"may execute public.readf(text), a SECURITY DEFINER function of {superuser}, which"
            " is a superuser (REVOKE EXECUTE ON FUNCTION public.readf(text) FROM PUBLIC, or"
            " ALTER FUNCTION public.readf(text) OWNER TO a reader)"
        ) in detail
        roles_database.run("REVOKE EXECUTE ON FUNCTION public.readf(text) FROM PUBLIC")
        assert source.check_role() == []
    finally:
        roles_database.run("DROP FUNCTION public.readf(text)")


# ---------------------------------------------------------------- judged again at each session


@pytest.fixture(scope="module")
def plain(pg_template: str) -> Iterator[Server]:
    """A database without row-level security, where set_config is PUBLIC's as by default."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    name = f"qexport_plain_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    found = Server(url_for(server_url(), database=name), name)
    found.run("CREATE TABLE docs (id int, owner text)", "INSERT INTO docs VALUES (1, 'alice')")
    yield found
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class Grantable:
    """A reader login of `plain` and a NOLOGIN superuser that may be granted to it."""

    login: str
    admin: str


@pytest.fixture
def grantable(plain: Server) -> Iterator[Grantable]:
    """Made for one test, dropped after."""
    found = Grantable(*(f"qexport_{kind}_{uuid.uuid4().hex[:10]}" for kind in ("login", "admin")))
    plain.run(
        f"CREATE ROLE {found.login} LOGIN",
        f"GRANT SELECT ON docs TO {found.login}",
        f"CREATE ROLE {found.admin} SUPERUSER NOLOGIN",
    )
    yield found
    for role in (found.login, found.admin):
        plain.run(f"DROP OWNED BY {role}", f"DROP ROLE {role}")


# The review's query: become the superuser for one statement and read a server file.
_BECOME_AND_READ = (
    "SELECT set_config('role', '{admin}', true) AS r,"
    " query_to_xml('select pg_read_file(''/etc/hostname'') as f', true, false, '')::text AS x"
)


def test_a_running_worker_sees_a_superuser_granted_after_it_exported(
    plain: Server, grantable: Grantable, tmp_path: Path
) -> None:
    """A worker that exported through a reader (the same source object throughout, as a
    worker holds it) judges the role again at the next export: once a superuser is granted
    to the login, the query that would become it and read a server file fails access_lost
    naming the grant path, with nothing exported; once revoked, exports run again."""
    login, admin = grantable.login, grantable.admin
    source = PostgresSource("warehouse", plain.url_of(login))
    reader = _deps(tmp_path, source, "SELECT id FROM docs")
    becomer = _deps(tmp_path, source, _BECOME_AND_READ.format(admin=admin))
    assert _export(reader)[:2] == (Status.SUCCEEDED, None)
    plain.run(f"GRANT {admin} TO {login}")
    status, code, detail, data = _export(becomer)
    assert (status, code, data) == (Status.FAILED, FailureCode.ACCESS_LOST, b"")
    path = f"({login} -> {admin}: REVOKE {admin} FROM {login})"
    assert f"can become the superuser {admin} {path}" in detail
    assert _export(reader)[:2] == (Status.FAILED, FailureCode.ACCESS_LOST)
    plain.run(f"REVOKE {admin} FROM {login}")
    assert _export(reader) == (Status.SUCCEEDED, None, "", b"id\r\n1\r\n")


def test_row_level_security_turned_on_later_is_seen_at_the_next_export(
    plain: Server, grantable: Grantable, tmp_path: Path
) -> None:
    """set_config is harmless until the database uses row-level security: once a table
    turns it on, the same worker's next export fails access_lost (a query could change
    qexport.user_id); once set_config is revoked from PUBLIC, exports run again."""
    table = f"qexport_rls_{uuid.uuid4().hex[:10]}"
    source = PostgresSource("warehouse", plain.url_of(grantable.login))
    deps = _deps(tmp_path, source, "SELECT id FROM docs")
    assert _export(deps)[:2] == (Status.SUCCEEDED, None)
    plain.run(
        f"CREATE TABLE {table} (id int)",
        f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
    )
    try:
        status, code, detail, _ = _export(deps)
        assert (status, code) == (Status.FAILED, FailureCode.ACCESS_LOST)
        assert "may execute set_config while the database uses row-level security" in detail
        plain.run("REVOKE EXECUTE ON FUNCTION set_config(text, text, boolean) FROM PUBLIC")
        assert _export(deps)[:2] == (Status.SUCCEEDED, None)
    finally:
        plain.run(
            f"DROP TABLE {table}",
            "GRANT EXECUTE ON FUNCTION set_config(text, text, boolean) TO PUBLIC",
        )


def test_a_kept_preview_process_sees_a_superuser_granted_after_it_previewed(
    plain: Server, grantable: Grantable, tmp_path: Path
) -> None:
    """A preview process answers preview after preview with the same source: a grant made
    after its first preview refuses the next one (access_lost, naming the path), in the same
    process; once revoked, it previews again."""
    login, admin = grantable.login, grantable.admin
    settings = Settings(
        data_dir=tmp_path,
        sources={"warehouse": plain.url_of(login)},
        source_workspaces={"warehouse": frozenset({ALICE.workspace_id})},
    )
    engine = create_engine(settings.database_url)
    migrate(engine)
    engine.dispose()
    runner = bootstrap.preview_processes(settings, start_method="fork")
    try:

        def preview(sql: str) -> list[list[object]]:
            job = PreviewJob("warehouse", sql, {}, ALICE, 30.0, 10, 100, 64 * 1024)
            return runner.run(job).rows

        assert preview("SELECT id FROM docs") == [[1]]
        first = _preview_pids()
        plain.run(f"GRANT {admin} TO {login}")
        with pytest.raises(AccessLostError) as refused:
            preview(_BECOME_AND_READ.format(admin=admin))
        assert f"({login} -> {admin}: REVOKE {admin} FROM {login})" in str(refused.value)
        assert _preview_pids() == first
        plain.run(f"REVOKE {admin} FROM {login}")
        assert preview("SELECT id FROM docs") == [[1]]
    finally:
        runner.close()


def _preview_pids() -> list[int]:
    return [p.pid or 0 for p in multiprocessing.active_children() if p.name == "qexport-preview"]


# ---------------------------------------------------------------- functions that leave the database


def _available(server: Server, *extensions: str) -> set[str]:
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)", [list(extensions)]
        ).fetchall()
    return {str(row[0]) for row in rows}


def test_adminpacks_file_functions_are_found(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """adminpack installed, a reader passes (its functions are revoked from PUBLIC, and the
    SQL pg_file_rename(text, text) only calls the C one); granted EXECUTE on pg_file_write and
    pg_file_unlink, which write and remove server files past the read-only transaction, it is
    refused naming each and its REVOKE; once revoked, it passes again."""
    if not _available(roles_database, "adminpack"):
        pytest.skip("the adminpack extension is not available on this server")
    roles_database.run("CREATE EXTENSION adminpack")
    try:
        role = new_role()
        source = PostgresSource("warehouse", roles_database.url_of(role))
        assert source.check_role() == []
        write = "pg_catalog.pg_file_write(text, text, boolean)"
        unlink = "pg_catalog.pg_file_unlink(text)"
        roles_database.run(f"GRANT EXECUTE ON FUNCTION {write}, {unlink} TO {role}")
        with pytest.raises(SourceRefusedError) as refused:
            source.check_role()
        message = str(refused.value)
        for signature, does in ((write, "writes"), (unlink, "removes")):
            finding = (
                f"may execute {signature}, an adminpack function that {does} server files,"
                f" read-only transaction or not (REVOKE EXECUTE ON FUNCTION {signature}"
                f" FROM {role})"
            )
            assert finding in message
        with pytest.raises(SourceRefusedError, match="pg_file_write"):
            source.preview(
                "SELECT pg_file_write('qexport_probe.txt', 'x', false) AS w",
                {},
                ALICE,
                timeout_seconds=10,
                max_rows=1,
                max_cell_chars=100,
                max_bytes=1000,
            )
        roles_database.run(f"REVOKE EXECUTE ON FUNCTION {write}, {unlink} FROM {role}")
        assert source.check_role() == []
    finally:
        roles_database.run("DROP EXTENSION IF EXISTS adminpack")


# A function in each untrusted language, by the extension that brings it (None: a language
# made here on plpgsql's handler, untrusted as plpython3u is, which any server has).
UNTRUSTED: dict[str, tuple[str | None, str]] = {
    "plpython3u": ("plpython3u", "return t"),
    "plperlu": ("plperlu", "return $_[0];"),
    "an untrusted language on plpgsql's handler": (None, "BEGIN RETURN t; END"),
}


@pytest.mark.parametrize("case", UNTRUSTED.values(), ids=UNTRUSTED.keys())
def test_a_function_in_an_untrusted_language_is_found(
    roles_database: Server, new_role: Callable[..., str], case: tuple[str | None, str]
) -> None:
    """A function in an untrusted language runs its code as the server's operating-system
    user: executable by PUBLIC (as any new function is), it refuses a reader, naming the
    function, the language and the REVOKE; its trigger functions do not count (no query calls
    them); once EXECUTE is revoked from PUBLIC, the reader passes."""
    extension, body = case
    suffix = uuid.uuid4().hex[:10]
    language = extension or f"qexport_untrusted_{suffix}"
    if extension is None:
        roles_database.run(
            f"CREATE LANGUAGE {language} HANDLER plpgsql_call_handler"
            " INLINE plpgsql_inline_handler VALIDATOR plpgsql_validator"
        )
    elif not _available(roles_database, extension):
        reason = f"the {extension} extension is not available on this server"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI installs postgresql-plperl and postgresql-plpython3")
        pytest.skip(reason)
    else:
        roles_database.run(f"CREATE EXTENSION IF NOT EXISTS {extension}")
    function = f"public.qexport_run_{suffix}(text)"
    try:
        roles_database.run(
            f"CREATE FUNCTION public.qexport_run_{suffix}(t text) RETURNS text"
            f" LANGUAGE {language} AS $${body}$$",
        )
        if extension is None:
            roles_database.run(
                f"CREATE FUNCTION public.qexport_trg_{suffix}() RETURNS trigger"
                f" LANGUAGE {language} AS $$BEGIN RETURN NEW; END$$"
            )
        source = PostgresSource("warehouse", roles_database.url_of(new_role()))
        with pytest.raises(SourceRefusedError) as refused:
            source.check_role()
        message = str(refused.value)
        assert (
            f"may execute {function}, a function in the untrusted language {language}: its code"
            " runs as the server's operating-system user, read-only transaction or not"
            f" (REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC)"
        ) in message
        assert "qexport_trg_" not in message
        roles_database.run(f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC")
        assert source.check_role() == []
    finally:
        roles_database.run(f"DROP FUNCTION IF EXISTS {function}")
        if extension is None:
            roles_database.run(f"DROP LANGUAGE IF EXISTS {language} CASCADE")
        else:
            roles_database.run(f"DROP EXTENSION IF EXISTS {extension} CASCADE")


def test_an_untrusted_function_only_after_set_role_is_found(
    roles_database: Server, new_role: Callable[..., str]
) -> None:
    """EXECUTE on the function granted to a role the login can become (NOINHERIT: only after
    SET ROLE) refuses the login, naming the path and both fixes."""
    suffix = uuid.uuid4().hex[:10]
    language, mid = f"qexport_untrusted_{suffix}", f"qexport_mid_{suffix}"
    function = f"public.qexport_run_{suffix}(text)"
    roles_database.run(
        f"CREATE LANGUAGE {language} HANDLER plpgsql_call_handler VALIDATOR plpgsql_validator",
        f"CREATE FUNCTION {function.replace('(text)', '(t text)')} RETURNS text"
        f" LANGUAGE {language} AS $$BEGIN RETURN t; END$$",
        f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC",
        f"CREATE ROLE {mid} NOLOGIN",
        f"GRANT EXECUTE ON FUNCTION {function} TO {mid}",
    )
    try:
        login = new_role("NOINHERIT", f"GRANT {mid} TO {{role}}")
        with pytest.raises(SourceRefusedError) as refused:
            PostgresSource("warehouse", roles_database.url_of(login)).check_role()
        assert (
            f"can become {mid}, which may execute {function}, a function in the untrusted"
            f" language {language}: its code runs as the server's operating-system user,"
            f" read-only transaction or not ({login} -> {mid}: REVOKE {mid} FROM {login}, or"
            f" REVOKE EXECUTE ON FUNCTION {function} FROM {mid})"
        ) in str(refused.value)
    finally:
        roles_database.run(
            f"DROP LANGUAGE IF EXISTS {language} CASCADE",
            f"DROP OWNED BY {mid}",
            f"DROP ROLE IF EXISTS {mid}",
        )
