"""The login check of MySQL/MariaDB sources on a real MariaDB, with real roles and accounts:
whatever the login can become (granted roles, default or not, through any chain; a PROXY
grant; a role it may hand on) is judged like the login itself, at registration and at a
worker's first connection, and the session's own role is left as it was."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.mysql import from_url
from qexport.sources.postgres.role import SourceRefusedError
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.mariadb import ADMIN, MariaDBServer, mariadb_server, require_mysqlclient

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

require_mysqlclient()  # skips this module without the driver (fails in CI)

from qexport.sources.mysql.source import MySQLSource  # noqa: E402 - needs mysqlclient, checked above

ALICE = Requester("u-alice", "w1")
PASSWORD = "Rol3s pw"  # noqa: S105 - the test accounts' password


@dataclass(frozen=True)
class Accounts:
    """Makes uniquely named logins (SELECT on the test database unless told otherwise) and
    roles; `{login}` and the roles' placeholders stand for their names in statements."""

    server: MariaDBServer
    made: list[str]

    def role(self) -> str:
        name = f"qexport_role_{uuid.uuid4().hex[:10]}"
        self.made.append(f"ROLE {name}")
        self.server.execute(f"CREATE ROLE {name}")
        return name

    def login(self, *statements: str, select: bool = True) -> str:
        name = f"qexport_login_{uuid.uuid4().hex[:10]}"
        self.made.append(f"USER '{name}'@'%'")
        self.server.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'")
        if select:
            self.server.execute(f"GRANT SELECT ON {self.server.database}.* TO '{name}'@'%'")
        self.server.execute(*(s.format(login=f"'{name}'@'%'") for s in statements))
        return name

    def source(self, login: str, *, allowed: bool = False) -> MySQLSource:
        url = self.server.url(login, PASSWORD)
        return from_url("maria", url, Settings(), allow_privileged_role=allowed)


@pytest.fixture
def maria_accounts(mariadb_server: MariaDBServer) -> Iterator[Accounts]:
    """Accounts and roles of this test only, dropped after."""
    made = Accounts(mariadb_server, [])
    yield made
    for thing in reversed(made.made):
        mariadb_server.execute(f"DROP {thing}")


def _refusal(source: MySQLSource) -> str:
    with pytest.raises(SourceRefusedError) as refused:
        source.check_role()
    assert refused.value.code is FailureCode.ACCESS_LOST
    assert "\n" not in str(refused.value)
    return str(refused.value)


def test_a_plain_select_login_and_a_reading_role_pass(maria_accounts: Accounts) -> None:
    """SELECT on its database, and a role (default or not) that only reads: nothing found."""
    assert maria_accounts.source(maria_accounts.login()).check_role() == []
    reading = maria_accounts.role()
    maria_accounts.server.execute(
        f"GRANT SELECT ON {maria_accounts.server.database}.* TO {reading}"
    )
    login = maria_accounts.login(f"GRANT {reading} TO {{login}}")
    assert maria_accounts.source(login).check_role() == []
    maria_accounts.server.execute(f"SET DEFAULT ROLE {reading} FOR '{login}'@'%'")
    assert maria_accounts.source(login).check_role() == []


@pytest.mark.parametrize("default", [False, True], ids=["not default", "default"])
def test_a_role_with_file_refuses_the_login_naming_the_path(
    maria_accounts: Accounts, default: bool
) -> None:
    """FILE on a role granted to the login, default or not (SET ROLE enables it either way):
    refused naming the privilege, the role, the path and the REVOKE."""
    filer = maria_accounts.role()
    maria_accounts.server.execute(f"GRANT FILE ON *.* TO {filer}")
    login = maria_accounts.login(f"GRANT {filer} TO {{login}}")
    if default:
        maria_accounts.server.execute(f"SET DEFAULT ROLE {filer} FOR '{login}'@'%'")
    message = _refusal(maria_accounts.source(login))
    assert (
        f"has FILE on *.*, through the role {filer}"
        f" ({login} -> {filer}: REVOKE `{filer}` FROM `{login}`@`%`)"
    ) in message
    assert "--allow-privileged-role" in message
    allowed = maria_accounts.source(login, allowed=True).check_role()
    assert any("has FILE on *.*" in finding for finding in allowed)


def test_a_role_reached_through_another_is_judged(maria_accounts: Accounts) -> None:
    """login -> team -> filer: the finding names the whole chain and the grant that hands
    `filer` on; once it is revoked, the login passes."""
    team, filer = maria_accounts.role(), maria_accounts.role()
    maria_accounts.server.execute(
        f"GRANT FILE ON *.* TO {filer}",
        f"GRANT {filer} TO {team}",
        f"GRANT SELECT ON {maria_accounts.server.database}.* TO {team}",
    )
    login = maria_accounts.login(f"GRANT {team} TO {{login}}")
    message = _refusal(maria_accounts.source(login))
    assert f"({login} -> {team} -> {filer}: REVOKE `{filer}` FROM `{team}`)" in message
    maria_accounts.server.execute(f"REVOKE {filer} FROM {team}")
    assert maria_accounts.source(login).check_role() == []


def test_a_proxy_grant_refuses_the_login(maria_accounts: Accounts) -> None:
    """PROXY on another account lets the login become it: refused naming that account."""
    login = maria_accounts.login(f"GRANT PROXY ON '{ADMIN}'@'%' TO {{login}}")
    message = _refusal(maria_accounts.source(login))
    assert (
        f"can become the account `{ADMIN}`@`%`"
        f" (PROXY: REVOKE PROXY ON `{ADMIN}`@`%` FROM `{login}`@`%`)"
    ) in message


def test_a_role_the_login_may_hand_on_refuses_it(maria_accounts: Accounts) -> None:
    """WITH ADMIN OPTION: the login may grant the role to anyone (itself included)."""
    reading = maria_accounts.role()
    login = maria_accounts.login(f"GRANT {reading} TO {{login}} WITH ADMIN OPTION")
    message = _refusal(maria_accounts.source(login))
    assert f"may grant the role {reading} on to others (WITH ADMIN OPTION" in message


def test_a_privilege_granted_to_public_is_judged(maria_accounts: Accounts) -> None:
    """MariaDB's PUBLIC: what it holds every account holds, the login included."""
    table = f"{maria_accounts.server.database}.people"
    maria_accounts.server.execute(f"GRANT UPDATE ON {table} TO PUBLIC")
    try:
        message = _refusal(maria_accounts.source(maria_accounts.login()))
    finally:
        maria_accounts.server.execute(f"REVOKE UPDATE ON {table} FROM PUBLIC")
    assert "has UPDATE on `qexport_test`.`people`, granted to PUBLIC" in message


DATABASE_PATTERNS = [
    (
        "`my%`.*",
        "may read the mysql system schema (SELECT on `my%`.*, a pattern that matches mysql)",
    ),
    ("`%`.*", "may read every database (SELECT on `%`.*, a pattern that matches any name)"),
    ("`m_sql`.*", "may read the mysql system schema (SELECT on `m_sql`.*, a pattern that matches"),
    ("`my\\_db`.*", None),
]


@pytest.mark.parametrize(
    ("target", "finding"), DATABASE_PATTERNS, ids=[t for t, _ in DATABASE_PATTERNS]
)
def test_a_database_grant_is_judged_as_the_pattern_it_is(
    maria_accounts: Accounts, target: str, finding: str | None
) -> None:
    """A database-level grant names databases with LIKE's `%` and `_`: one whose pattern
    matches `mysql` (password hashes) or every database refuses the login; an escaped
    underscore matches only itself, so `my\\_db` passes."""
    login = maria_accounts.login(f"GRANT SELECT ON {target} TO {{login}}")
    if finding is None:
        assert maria_accounts.source(login).check_role() == []
    else:
        assert finding in _refusal(maria_accounts.source(login))


def test_a_role_granted_to_public_is_judged(maria_accounts: Accounts) -> None:
    """MariaDB gives what a role granted to PUBLIC holds to every account (LOAD_FILE works
    for a login with no grant of its own): the role's FILE refuses any login, naming the
    path through PUBLIC and the REVOKE; once revoked, the login passes."""
    filer = maria_accounts.role()
    maria_accounts.server.execute(f"GRANT FILE ON *.* TO {filer}", f"GRANT {filer} TO PUBLIC")
    try:
        login = maria_accounts.login()
        message = _refusal(maria_accounts.source(login))
        assert (
            f"has FILE on *.*, through the role {filer}"
            f" ({login} -> PUBLIC -> {filer}: REVOKE `{filer}` FROM PUBLIC)"
        ) in message
    finally:
        maria_accounts.server.execute(f"REVOKE {filer} FROM PUBLIC")
    assert maria_accounts.source(login).check_role() == []


# ---------------------------------------------------------------- in a worker


def _deps(tmp_path: Path, source: MySQLSource, sql: str) -> Container:
    store = InMemoryMetadataStore()
    store.add_query(Query("q1", ALICE.workspace_id, "people", sql, "maria"))
    return container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"maria": source}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path, statement_timeout_seconds=30),
    )


def _export(deps: Container) -> tuple[Status, FailureCode | None, int, str, bytes]:
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "people", by_name=True), "csv"),
    )
    Worker(deps, drain=True).run()
    final = deps.exports.get_export(record.id)
    assert final is not None
    data = b""
    if final.status is Status.SUCCEEDED:
        with deps.objects.open(final.storage_key) as body:
            data = body.read()
    return final.status, final.failure_code, final.attempt, final.failure_detail or "", data


Make = Callable[[Accounts], str]


def _role_with_file(accounts: Accounts) -> str:
    filer = accounts.role()
    accounts.server.execute(f"GRANT FILE ON *.* TO {filer}")
    return accounts.login(f"GRANT {filer} TO {{login}}")


def _proxy(accounts: Accounts) -> str:
    return accounts.login(f"GRANT PROXY ON '{ADMIN}'@'%' TO {{login}}")


@pytest.mark.parametrize(
    ("make", "finding"),
    [
        (_role_with_file, "has FILE on *.*, through the role"),
        (_proxy, f"can become the account `{ADMIN}`@`%`"),
    ],
    ids=["role with FILE", "PROXY"],
)
def test_a_worker_refuses_the_login_at_its_first_connection(
    maria_accounts: Accounts, tmp_path: Path, make: Make, finding: str
) -> None:
    """The export fails access_lost after one attempt (not retried), naming the finding."""
    deps = _deps(tmp_path, maria_accounts.source(make(maria_accounts)), "SELECT name FROM people")
    status, code, attempt, detail, _ = _export(deps)
    assert (status, code, attempt) == (Status.FAILED, FailureCode.ACCESS_LOST, 1)
    assert finding in detail


def test_judging_leaves_the_sessions_own_role_as_it_was(
    maria_accounts: Accounts, tmp_path: Path
) -> None:
    """A login that reads through its default role, with a privileged role besides, allowed
    by the operator: judging enables the other role to read its grants, then sets the
    default one back, so the export reads through it (and not as the FILE role)."""
    reading, filer = maria_accounts.role(), maria_accounts.role()
    maria_accounts.server.execute(
        f"GRANT SELECT ON {maria_accounts.server.database}.* TO {reading}",
        f"GRANT FILE ON *.* TO {filer}",
    )
    login = maria_accounts.login(
        f"GRANT {reading} TO {{login}}", f"GRANT {filer} TO {{login}}", select=False
    )
    maria_accounts.server.execute(f"SET DEFAULT ROLE {reading} FOR '{login}'@'%'")
    source = maria_accounts.source(login, allowed=True)
    sql = "SELECT name, CURRENT_ROLE() AS active FROM people ORDER BY id"
    status, _, _, detail, data = _export(_deps(tmp_path, source, sql))
    assert status is Status.SUCCEEDED, detail
    assert data == f'"name","active"\r\n"Ann","{reading}"\r\n"Bob","{reading}"\r\n'.encode()


def test_describe_and_preview_judge_the_login_too(maria_accounts: Accounts) -> None:
    """Under their row limits (sql_select_limit 0, and one row more than shown), describe
    and preview judge the login like an export: refused for the role with FILE; a reader's
    pass."""
    refused = maria_accounts.source(_role_with_file(maria_accounts))
    with pytest.raises(SourceRefusedError, match="has FILE on"):
        refused.describe("SELECT name FROM people", {}, ALICE, timeout_seconds=10)
    with pytest.raises(SourceRefusedError, match="has FILE on"):
        refused.preview(
            "SELECT name FROM people",
            {},
            ALICE,
            timeout_seconds=10,
            max_rows=1,
            max_cell_chars=10,
            max_bytes=1000,
        )
    reader = maria_accounts.source(maria_accounts.login())
    assert [
        c.name for c in reader.describe("SELECT name FROM people", {}, ALICE, timeout_seconds=10)
    ] == ["name"]


def test_a_running_worker_sees_a_role_granted_after_it_exported(
    maria_accounts: Accounts, tmp_path: Path
) -> None:
    """The same source object exports, then a role with FILE is granted to its login: the
    next export fails access_lost naming the role, the path and the REVOKE, and a preview
    through the same source is refused too; once revoked, both run again."""
    login, filer = maria_accounts.login(), maria_accounts.role()
    maria_accounts.server.execute(f"GRANT FILE ON *.* TO {filer}")
    source = maria_accounts.source(login)
    deps = _deps(tmp_path, source, "SELECT name FROM people ORDER BY id")

    def preview() -> list[dict[str, object]]:
        rows = source.preview(
            "SELECT name FROM people ORDER BY id",
            {},
            ALICE,
            timeout_seconds=10,
            max_rows=1,
            max_cell_chars=10,
            max_bytes=1000,
        )
        return rows.table.to_pylist()

    assert _export(deps)[:2] == (Status.SUCCEEDED, None)
    assert preview() == [{"name": "Ann"}]
    maria_accounts.server.execute(f"GRANT {filer} TO '{login}'@'%'")
    status, code, attempt, detail, data = _export(deps)
    assert (status, code, attempt, data) == (Status.FAILED, FailureCode.ACCESS_LOST, 1, b"")
    assert (
        f"has FILE on *.*, through the role {filer}"
        f" ({login} -> {filer}: REVOKE `{filer}` FROM `{login}`@`%`)"
    ) in detail
    with pytest.raises(SourceRefusedError, match="has FILE on"):
        preview()
    maria_accounts.server.execute(f"REVOKE {filer} FROM '{login}'@'%'")
    assert _export(deps)[:2] == (Status.SUCCEEDED, None)
    assert preview() == [{"name": "Ann"}]
