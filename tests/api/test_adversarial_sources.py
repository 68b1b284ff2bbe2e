"""A hostile member of one workspace against another workspace's data source: they cannot
list it, save a query on it, export, or schedule anything on it, through the API and the
pages; sources shown to members never carry a password, and to viewers no URL at all; a
name is per workspace, and one taken elsewhere is never told; and a workspace admin
registers only PostgreSQL sources whose role may only read.

Workspace "acme" owns the registered source `acme_db`; workspace "other" is the attacker.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import psycopg
import pytest

from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.domain.sources import RegisteredSource
from qexport.services import sources as service
from tests.api.conftest import Api
from tests.integration.test_postgres_source import url_for
from tests.support.pg import server_url
from tests.web.conftest import Browser, add_person, csrf_of

ANN = "ann@acme.test"  # acme's admin
EVE = "eve@other.test"  # other's admin
MALLORY = "mallory@other.test"  # other's editor
SOURCES = "/api/v1/sources"
SQL = "SELECT id, customer FROM orders ORDER BY id"


@pytest.fixture
def sources_world(api_both: Api, tmp_path: Path, source_template: Path) -> Api:
    """acme owns `acme_db` (a copy of the shop data); both workspaces have members."""
    path = tmp_path / "acme.duckdb"
    shutil.copy(source_template, path)
    api_both.context.accounts.add_source(
        RegisteredSource(
            "acme_db", f"duckdb://{path}", "acme", frozenset(), False, api_both.clock.now()
        )
    )
    api_both.member(ANN, "admin")
    api_both.member(EVE, "admin", workspace="other")
    api_both.member(MALLORY, "editor", workspace="other")
    return api_both


def _registered(api: Api) -> list[str]:
    """The names of the registered sources, every workspace's."""
    return [s.name for s in api.context.accounts.registered_sources()]


def _query_body(source: str, name: str = "theirs") -> dict[str, object]:
    return {"name": name, "sql": SQL, "source": source, "parameters": []}


def _planted(api: Api, workspace: str = "other") -> Query:
    """A query of `workspace` on acme_db, as if saved before sources had owners."""
    return api.deps.catalog.add_query(
        Query(str(uuid.uuid4()), workspace, f"planted-{uuid.uuid4().hex[:6]}", SQL, "acme_db")
    )


def test_another_workspaces_source_is_not_listed(sources_world: Api) -> None:
    """GET /sources lists what the caller's workspace may use, nothing of the others'."""
    theirs = sources_world.get(SOURCES, MALLORY).json()["items"]
    assert [s["name"] for s in theirs] == ["shop"]
    mine = sources_world.get(SOURCES, ANN).json()["items"]
    assert [(s["name"], s["kind"]) for s in mine] == [
        ("acme_db", "duckdb"),
        ("audit", "audit"),  # the workspace's own audit trail, for its admins
        ("shop", "duckdb"),
    ]


def test_a_query_cannot_be_saved_on_another_workspaces_source(sources_world: Api) -> None:
    """Creating or changing a query to name acme's source is 422 on `source`, as for a source
    that does not exist; nothing is saved."""
    created = sources_world.post("/api/v1/queries", MALLORY, json=_query_body("acme_db"))
    assert created.status_code == 422
    assert created.json()["field"] == "source"
    own = sources_world.post("/api/v1/queries", MALLORY, json=_query_body("shop", "mine"))
    assert own.status_code == 201
    changed = sources_world.client.put(
        f"/api/v1/queries/{own.json()['id']}",
        headers=sources_world.headers(MALLORY),
        json=_query_body("acme_db", "mine"),
    )
    assert changed.status_code == 422
    assert changed.json()["field"] == "source"
    names = [q["name"] for q in sources_world.get("/api/v1/queries", MALLORY).json()["items"]]
    assert names == ["mine"]
    assert (
        sources_world.get(f"/api/v1/queries/{own.json()['id']}", MALLORY).json()["source"] == "shop"
    )


def test_an_export_on_another_workspaces_source_fails_before_it_runs(sources_world: Api) -> None:
    """A query of `other` naming acme's source (saved before sources had owners) exports
    nothing: the export fails access_lost, with no file."""
    query = _planted(sources_world)
    response = sources_world.post(
        "/api/v1/exports", MALLORY, json={"query_id": query.id, "format": "csv"}
    )
    assert response.status_code == 202
    sources_world.drain()
    export = sources_world.get(f"/api/v1/exports/{response.json()['id']}", MALLORY).json()
    assert export["status"] == "failed"
    assert export["failure"]["code"] == "access_lost"
    assert "acme_db" in export["failure"]["detail"]
    assert export["row_count"] is None
    assert sources_world.get(f"/api/v1/exports/{export['id']}/file", MALLORY).status_code == 409


def test_a_schedule_on_another_workspaces_source_delivers_nothing(sources_world: Api) -> None:
    """A schedule of `other` on such a query fires exports that fail access_lost."""
    query = _planted(sources_world)
    body = {"query_id": query.id, "format": "csv", "cron": "0 8 * * *", "recipients": []}
    schedule = sources_world.post("/api/v1/schedules", MALLORY, json=body)
    assert schedule.status_code == 201
    run = sources_world.post(f"/api/v1/schedules/{schedule.json()['id']}/run", MALLORY)
    assert run.status_code in (200, 201, 202)
    sources_world.drain()
    exports = sources_world.deps.exports.list_exports(workspace_id="other")
    assert [(e.status, e.failure_code) for e in exports] == [
        (Status.FAILED, FailureCode.ACCESS_LOST)
    ]


def test_a_source_taken_away_fails_queued_exports_access_lost(sources_world: Api) -> None:
    """Shared with `other`, acme's source can be named and exported; once the operator takes
    it away, an export already queued fails access_lost before it runs."""
    accounts = sources_world.context.accounts
    accounts.share_source("acme", "acme_db", "other", shared=True)
    saved = sources_world.post("/api/v1/queries", MALLORY, json=_query_body("acme_db"))
    assert saved.status_code == 201
    body = {"query_id": saved.json()["id"], "format": "csv"}
    first = sources_world.post("/api/v1/exports", MALLORY, json=body).json()
    sources_world.drain()
    assert (
        sources_world.get(f"/api/v1/exports/{first['id']}", MALLORY).json()["status"] == "succeeded"
    )
    queued = sources_world.post("/api/v1/exports", MALLORY, json=body).json()
    accounts.share_source("acme", "acme_db", "other", shared=False)
    sources_world.drain()
    export = sources_world.get(f"/api/v1/exports/{queued['id']}", MALLORY).json()
    assert (export["status"], export["failure"]["code"]) == ("failed", "access_lost")


def test_the_pages_refuse_another_workspaces_source(sources_world: Api) -> None:
    """The new-query form offers only the workspace's sources, and posting acme's source
    anyway is refused next to the field, with nothing saved."""
    add_person(sources_world, "pat@other.test", "editor", workspace="other")
    browser = Browser(sources_world.client)
    browser.sign_in("pat@other.test")
    form = browser.page("/queries/new")
    assert "acme_db" not in form
    response = sources_world.client.post(
        "/queries/new",
        data={
            "csrf": csrf_of(form),
            "name": "theirs",
            "source": "acme_db",
            "sql": SQL,
            "parameters": "",
            "visibility": "workspace",
        },
        follow_redirects=False,
    )
    assert response.status_code == 400
    assert "unknown source" in response.text
    assert sources_world.deps.catalog.find_query("other", "theirs") is None


# ---------------------------------------------------------------- registering through the API


@pytest.fixture
def reader(pg_template: str) -> Iterator[str]:
    """A PostgreSQL login role with a password that may only read; dropped after."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    role = f"qexport_api_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=3) as admin:
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'hunter2-{role}'")
    yield role
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture
def loopback_open(sources_world: Api) -> Api:
    """The operator opened 127.0.0.1 to members' sources (QEXPORT_EGRESS_ALLOW), where the
    test server listens."""
    context = sources_world.client.app.state.context  # type: ignore[attr-defined]
    settings = dataclasses.replace(context.settings, egress_allow="127.0.0.1/32")
    sources_world.client.app.state.context = dataclasses.replace(context, settings=settings)  # type: ignore[attr-defined]
    return sources_world


def _pg_url(role: str, password: str) -> str:
    return f"postgresql://{role}:{password}@127.0.0.1:5432/postgres"


def test_an_admin_registers_a_postgresql_source_for_their_workspace(
    loopback_open: Api, reader: str
) -> None:
    """An admin's source belongs to their workspace only, its URL comes back masked, and no
    other workspace can list it or save a query on it."""
    world = loopback_open
    password = f"hunter2-{reader}"
    created = world.post(SOURCES, EVE, json={"name": "eve_pg", "url": _pg_url(reader, password)})
    assert created.status_code == 201, created.text
    assert created.json() == {
        "name": "eve_pg",
        "kind": "postgresql",
        "url": f"postgresql://{reader}:***@127.0.0.1:5432/postgres",
    }
    listed = world.get(SOURCES, MALLORY).text
    assert "eve_pg" in listed
    assert password not in listed
    assert "eve_pg" not in world.get(SOURCES, ANN).text
    refused = world.post("/api/v1/queries", ANN, json=_query_body("eve_pg"))
    assert refused.status_code == 422


def test_a_superuser_source_is_refused_through_the_api(loopback_open: Api) -> None:
    """A URL whose role is a superuser is refused (422 on `url`), naming what was found;
    nothing is registered."""
    world = loopback_open
    url = _pg_url("postgres", "anything")  # the test server trusts local logins
    refused = world.post(SOURCES, EVE, json={"name": "root", "url": url})
    assert refused.status_code == 422
    assert refused.json()["field"] == "url"
    assert "superuser" in refused.json()["detail"]
    assert "root" not in _registered(world)


# What a login can become through grants, as the operator of the report set it up: each
# statement runs as the superuser in a database of the test's own; {login} is the login.
BECOMING = {
    "member of a superuser": (
        ["CREATE ROLE {admin} SUPERUSER NOLOGIN", "GRANT {admin} TO {login}"],
        "can become the superuser {admin} ({login} -> {admin}: REVOKE {admin} FROM {login})",
    ),
    "indirect member of a superuser": (
        [
            "CREATE ROLE {admin} SUPERUSER NOLOGIN",
            "CREATE ROLE {mid} NOLOGIN",
            "GRANT {admin} TO {mid}",
            "GRANT {mid} TO {login}",
        ],
        "can become the superuser {admin} ({login} -> {mid} -> {admin}: REVOKE {admin} FROM {mid})",
    ),
    "member of an RLS table's owner": (
        [
            "CREATE ROLE {owner} NOLOGIN",
            "CREATE TABLE secrets (id int, owner text)",
            "ALTER TABLE secrets ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE secrets OWNER TO {owner}",
            "GRANT {owner} TO {login}",
        ],
        "can become {owner}, which owns a table whose row-level security is not forced on its"
        " owner: public.secrets ({login} -> {owner}: REVOKE {owner} FROM {login}, or"
        " ALTER TABLE public.secrets FORCE ROW LEVEL SECURITY)",
    ),
}


@pytest.fixture
def own_database(pg_template: str) -> Iterator[str]:
    """A database of the test's own (the shared `postgres` one must not gain RLS tables);
    dropped after, with the roles the test made, whose names start with its name."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    name = f"qexport_api_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url(), autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for (role,) in admin.execute(
            "SELECT rolname FROM pg_roles WHERE starts_with(rolname, %s)", [name]
        ).fetchall():
            admin.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize("case", BECOMING.values(), ids=BECOMING.keys())
def test_a_login_that_can_become_a_privileged_role_is_refused_through_the_api(
    loopback_open: Api, reader: str, own_database: str, case: tuple[list[str], str]
) -> None:
    """A login that may only read itself but can become a superuser (directly or through
    another role) or the owner of a table with row-level security is refused: 422 on `url`,
    naming the role, the grant path and the fix; nothing is registered."""
    statements, finding = case
    names = {p: f"{own_database}_{p}" for p in ("admin", "mid", "owner")}
    names["login"] = reader
    with psycopg.connect(url_for(server_url(), database=own_database), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.format(**names))
    url = f"postgresql://{reader}:hunter2-{reader}@127.0.0.1:5432/{own_database}"
    refused = loopback_open.post(SOURCES, EVE, json={"name": "becoming", "url": url})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "url"
    assert finding.format(**names) in refused.json()["detail"]
    assert "becoming" not in loopback_open.context.accounts.registered_sources()


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "127.1", "[::1]", "169.254.169.254", "10.0.0.5"]
)
def test_a_members_source_on_an_internal_address_is_refused(
    sources_world: Api, reader: str, host: str
) -> None:
    """Under the default egress policy an admin cannot make qexport connect to an internal
    address (the metadata service, the server's own PostgreSQL): 422 on `url`, naming the
    policy, before any connection; nothing is registered."""
    url = f"postgresql://{reader}:hunter2-{reader}@{host}:5432/postgres"
    refused = sources_world.post(SOURCES, EVE, json={"name": "inside", "url": url})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "url"
    assert "egress policy" in refused.json()["detail"]
    assert "inside" not in _registered(sources_world)


def test_a_members_source_connects_to_the_address_that_was_checked(
    loopback_open: Api, reader: str
) -> None:
    """The stored URL carries the checked address as libpq's hostaddr, so a worker never
    looks the name up again (a second answer could be internal); a hostaddr of the member's
    own is refused."""
    world = loopback_open
    url = f"postgresql://{reader}:hunter2-{reader}@localhost:5432/postgres"
    created = world.post(SOURCES, EVE, json={"name": "pinned", "url": url})
    assert created.status_code == 201, created.text
    listed = {s["name"]: s["url"] for s in world.get(SOURCES, EVE).json()["items"]}
    assert listed["pinned"].endswith("@localhost:5432/postgres?hostaddr=127.0.0.1"), listed
    own = world.post(SOURCES, EVE, json={"name": "own", "url": url + "?hostaddr=127.0.0.1"})
    assert own.status_code == 422


@pytest.mark.parametrize("member", ["name", "url"])
def test_a_null_member_of_a_source_is_refused_by_name(
    loopback_open: Api, reader: str, member: str
) -> None:
    """Either member of a valid registration set to null is 422 naming it; nothing is
    registered."""
    body: dict[str, object] = {"name": "nulls", "url": _pg_url(reader, f"hunter2-{reader}")}
    body[member] = None
    refused = loopback_open.post(SOURCES, EVE, json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == member
    assert "nulls" not in _registered(loopback_open)


@pytest.mark.parametrize("who", [MALLORY, "viewer@other.test"])
def test_only_admins_register_sources(sources_world: Api, who: str) -> None:
    """Editors and viewers get 403."""
    sources_world.member("viewer@other.test", "viewer", workspace="other")
    response = sources_world.post(SOURCES, who, json={"name": "x", "url": _pg_url("r", "p")})
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("shop", "postgresql://r:p@127.0.0.1/postgres"),  # a configured name
        ("files", "duckdb:///srv/acme.duckdb"),  # another team's file
        ("env", "env:QEXPORT_DATABASE_URL"),  # the server's own credentials
        ("nopw", "postgresql://postgres@127.0.0.1/postgres"),  # trusted without a password
        ("sock", "postgresql://r:p@%2Fvar%2Frun%2Fpostgresql/postgres"),  # a socket path
    ],
)
def test_a_hostile_registration_is_refused(sources_world: Api, name: str, url: str) -> None:
    """Configured names, files, environment references, password-less or socket URLs: 422,
    and nothing changes."""
    before = sources_world.context.accounts.registered_sources()
    response = sources_world.post(SOURCES, EVE, json={"name": name, "url": url})
    assert response.status_code == 422, response.text
    assert sources_world.context.accounts.registered_sources() == before


def test_a_fragment_cannot_smuggle_a_hostaddr_past_the_egress_policy(
    sources_world: Api, reader: str
) -> None:
    """libpq has no URL fragments: `#&hostaddr=127.0.0.1` after a public address would be read
    as another option after the pinned one and win. Refused (422 on `url`) before any
    connection; nothing is registered."""
    url = f"postgresql://{reader}:hunter2-{reader}@93.184.216.34:5432/postgres#&hostaddr=127.0.0.1"
    refused = sources_world.post(SOURCES, EVE, json={"name": "smuggled", "url": url})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "url"
    assert "smuggled" not in _registered(sources_world)


def test_a_refused_address_is_not_told_to_the_member(sources_world: Api) -> None:
    """What a refused name resolved to stays in the operator's log: the answer names the
    host as typed and the policy, never the internal address it resolved to."""
    url = "postgresql://r:p@localhost:5432/postgres"
    refused = sources_world.post(SOURCES, EVE, json={"name": "probe", "url": url})
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert "egress policy" in detail
    assert "127.0.0.1" not in detail
    assert "loopback)" not in detail.replace("loopback,", "")


def test_a_percent_encoded_password_option_is_masked(loopback_open: Api, reader: str) -> None:
    """`?%70assword=...` is a password to libpq; neither the answer to the registration nor
    the list shown to the workspace's members (viewers included) repeats it."""
    world = loopback_open
    world.member("viewer@other.test", "viewer", workspace="other")
    password = f"hunter2-{reader}"
    url = f"postgresql://{reader}@127.0.0.1:5432/postgres?%70assword={password}"
    created = world.post(SOURCES, EVE, json={"name": "encoded", "url": url})
    assert created.status_code == 201, created.text
    assert password not in created.text
    listed = world.get(SOURCES, "viewer@other.test").text
    assert "encoded" in listed
    assert password not in listed


# ---------------------------------------------------------------- names are per workspace


def _operator_registers(api: Api, name: str, path: Path, workspace: str) -> None:
    service.register_source(
        api.context.accounts,
        api.clock,
        api.context.settings,
        service.SourceRequest(name, f"duckdb://{path}", workspace),
        check_role=lambda _name, _url, _allow: [],
    )


def _export_text(api: Api, who: str, query_id: str) -> str:
    started = api.post("/api/v1/exports", who, json={"query_id": query_id, "format": "csv"})
    assert started.status_code == 202, started.text
    api.drain()
    file = api.get(f"/api/v1/exports/{started.json()['id']}/file", who)
    assert file.status_code == 200, file.text
    return str(file.text)


def test_two_workspaces_each_read_their_own_source_of_one_name(
    sources_world: Api, tmp_path: Path, source_template: Path
) -> None:
    """acme and other each register `warehouse` (the second is not told of the first); each
    workspace's query on `warehouse` exports its own workspace's data, and each lists one
    `warehouse`."""
    mine, theirs = tmp_path / "wh-acme.duckdb", tmp_path / "wh-other.duckdb"
    shutil.copy(source_template, mine)
    shutil.copy(source_template, theirs)
    with duckdb.connect(str(theirs)) as con:
        con.execute("UPDATE orders SET customer = 'other ' || id")
    _operator_registers(sources_world, "warehouse", mine, "acme")
    _operator_registers(sources_world, "warehouse", theirs, "other")
    sql = "SELECT customer FROM orders ORDER BY id LIMIT 2"
    body = {"name": "wh", "sql": sql, "source": "warehouse", "parameters": []}
    ann = sources_world.post("/api/v1/queries", ANN, json=body)
    mallory = sources_world.post("/api/v1/queries", MALLORY, json=body)
    assert (ann.status_code, mallory.status_code) == (201, 201), (ann.text, mallory.text)
    mine_rows = _export_text(sources_world, ANN, ann.json()["id"]).splitlines()
    theirs_rows = _export_text(sources_world, MALLORY, mallory.json()["id"]).splitlines()
    assert mine_rows == ["customer", "customer 1", "customer 2"]
    assert theirs_rows == ["customer", "other 1", "other 2"]
    for who in (ANN, MALLORY):
        names = [s["name"] for s in sources_world.get(SOURCES, who).json()["items"]]
        assert names.count("warehouse") == 1


def test_a_name_taken_in_another_workspace_is_not_revealed(loopback_open: Api, reader: str) -> None:
    """other's admin registers `acme_db`, the name of acme's source: 201, a PostgreSQL source
    of their own, and acme's stays its DuckDB file. Registering it again in `other` is refused
    naming only `other`'s own source, never acme or its file."""
    world = loopback_open
    url = _pg_url(reader, f"hunter2-{reader}")
    created = world.post(SOURCES, EVE, json={"name": "acme_db", "url": url})
    assert created.status_code == 201, created.text
    theirs = {s["name"]: s["kind"] for s in world.get(SOURCES, EVE).json()["items"]}
    mine = {s["name"]: s["kind"] for s in world.get(SOURCES, ANN).json()["items"]}
    assert (theirs["acme_db"], mine["acme_db"]) == ("postgresql", "duckdb")
    again = world.post(SOURCES, EVE, json={"name": "acme_db", "url": url})
    assert again.status_code == 422
    assert again.json()["field"] == "name"
    assert (
        "workspace 'other' already has a source named 'acme_db' (its own source)"
        in (again.json()["detail"])
    )
    assert "acme.duckdb" not in again.text
    assert "'acme'" not in again.text


def test_a_viewers_source_listing_has_no_path(sources_world: Api, tmp_path: Path) -> None:
    """A viewer's source listing has names and kinds, with no URL, file path or folder;
    those who write queries (an editor, the admin) still see each URL."""
    sources_world.member("vic@acme.test", "viewer")
    sources_world.member("ed@acme.test", "editor")
    listed = sources_world.get(SOURCES, "vic@acme.test")
    assert listed.status_code == 200
    assert listed.json()["items"] == [
        {"name": "acme_db", "kind": "duckdb", "url": None},
        {"name": "shop", "kind": "duckdb", "url": None},
    ]
    assert str(tmp_path) not in listed.text
    for who in ("ed@acme.test", ANN):
        urls = {s["name"]: s["url"] for s in sources_world.get(SOURCES, who).json()["items"]}
        assert urls["acme_db"] == f"duckdb://{tmp_path}/acme.duckdb"
