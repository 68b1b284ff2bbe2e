"""`qexport users|tokens|sources` as an administrator runs them, and the API accepting what
they create."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
from fastapi.testclient import TestClient

from qexport.domain.exports import Status
from qexport.store.accounts import SqlAccountStore
from tests.e2e.conftest import Env, wait_for

TOKEN = re.compile(r"^qx_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ACME = ("--workspace", "acme")
PASSWORD = "hunter2-but-longer"  # noqa: S105 - a test password, given on stdin


def _run_with_stdin(
    env: Env, stdin: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`env.run`, with `stdin` piped in (for --password-stdin)."""
    proc = subprocess.run(
        [sys.executable, "-m", "qexport", *args],
        env=env.environ,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert not check or proc.returncode == 0, proc.stderr
    return proc


def _accounts(env: Env) -> SqlAccountStore:
    return SqlAccountStore(env.store.engine)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_users_create_prints_the_user_id_only(env: Env) -> None:
    """stdout is the user id; adding the same email elsewhere keeps the id and adds the role;
    `users list` shows members with their roles."""
    first = env.run("users", "create", "Ann@Acme.test", "--workspace", "acme", "--role", "editor")
    user_id = first.stdout.strip()
    assert UUID.match(user_id)
    assert "ann@acme.test" in first.stderr
    again = env.run("users", "create", "ann@acme.test", "--workspace", "beta", "--role", "admin")
    assert again.stdout.strip() == user_id
    env.run("users", "create", "bob@acme.test", "--workspace", "acme", "--role", "viewer")
    listed = json.loads(env.run("users", "list", "--workspace", "acme", "--json").stdout)
    assert [(m["email"], m["role"]) for m in listed] == [
        ("ann@acme.test", "editor"),
        ("bob@acme.test", "viewer"),
    ]
    assert listed[0]["id"] == user_id


def test_a_password_from_stdin_is_stored_as_an_argon2_hash(env: Env) -> None:
    """--password-stdin reads one line; only its argon2id hash is stored, never printed."""
    proc = _run_with_stdin(
        env,
        f"{PASSWORD}\n",
        "users",
        "create",
        "ann@acme.test",
        "--workspace",
        "acme",
        "--role",
        "viewer",
        "--password-stdin",
    )
    assert PASSWORD not in proc.stdout + proc.stderr
    user = _accounts(env).find_user("ann@acme.test")
    assert user is not None
    assert user.password_hash is not None
    assert user.password_hash.startswith("$argon2id$")
    assert PASSWORD not in user.password_hash


def test_a_cli_token_is_accepted_by_the_api_until_revoked(env: Env, api_client: TestClient) -> None:
    """`tokens create` prints the token and nothing else; the API accepts it and records its
    use; after `tokens revoke` the same token gets 401."""
    env.run("users", "create", "ann@acme.test", "--workspace", "acme", "--role", "editor")
    proc = env.run("tokens", "create", "ann@acme.test")
    token = proc.stdout.strip()
    assert proc.stdout == f"{token}\n"
    assert TOKEN.match(token)
    assert token not in proc.stderr

    response = api_client.get("/api/v1/queries", headers=_bearer(token))
    assert response.status_code == 200
    assert response.json() == {"items": []}
    [listed] = json.loads(env.run("tokens", "list", "ann@acme.test", "--json").stdout)
    assert listed["id"] == token.split("_")[1]
    assert listed["workspace"] == "acme"
    assert listed["last_used_at"] is not None
    assert listed["revoked_at"] is None
    assert token not in json.dumps(listed)

    revoked = env.run("tokens", "revoke", listed["id"])
    assert f"revoked token {listed['id']}" in revoked.stderr
    response = api_client.get("/api/v1/queries", headers=_bearer(token))
    assert response.status_code == 401
    [listed] = json.loads(env.run("tokens", "list", "ann@acme.test", "--json").stdout)
    assert listed["revoked_at"] is not None
    assert "already revoked" in env.run("tokens", "revoke", listed["id"]).stderr


def test_a_token_names_its_workspace_when_the_user_has_several(
    env: Env, api_client: TestClient
) -> None:
    """With two memberships `tokens create` needs --workspace; the token acts in that one."""
    env.run("users", "create", "ann@acme.test", "--workspace", "acme", "--role", "viewer")
    env.run("users", "create", "ann@acme.test", "--workspace", "beta", "--role", "editor")
    ambiguous = env.run("tokens", "create", "ann@acme.test", check=False)
    assert ambiguous.returncode == 2
    assert ambiguous.stdout == ""
    assert "choose one with --workspace" in ambiguous.stderr
    token = env.run("tokens", "create", "ann@acme.test", "--workspace", "beta").stdout.strip()
    body = {"name": "mine", "sql": "SELECT 1", "source": "demo"}
    response = api_client.post("/api/v1/queries", headers=_bearer(token), json=body)
    assert response.status_code == 201  # an editor in beta (a viewer in acme)
    assert env.store.find_query("beta", "mine") is not None


# (arguments, what the one line on stderr says); run as ann, a viewer in acme.
BAD_INPUT: list[tuple[list[str], str]] = [
    (
        ["users", "create", "not-an-email", "--workspace", "acme", "--role", "viewer"],
        "invalid email address",
    ),
    (
        ["users", "create", "ann@acme.test", "--workspace", "Acme Corp", "--role", "viewer"],
        "invalid workspace",
    ),
    (
        ["users", "create", "ann@acme.test", "--workspace", "acme", "--role", "owner"],
        "unknown role 'owner'",
    ),
    (["users", "list", "--workspace", "nowhere"], "no workspace 'nowhere'"),
    (["tokens", "create", "nobody@acme.test"], "no user 'nobody@acme.test'"),
    (
        ["tokens", "create", "ann@acme.test", "--workspace", "beta"],
        "not a member of workspace 'beta'",
    ),
    (["tokens", "revoke", "0123456789abcdef"], "no token '0123456789abcdef'"),
    (["tokens", "list", "nobody@acme.test"], "no user"),
    (["sources", "add", "shop", "duckdb://relative/shop.duckdb", *ACME], "absolute"),
    (["sources", "add", "shop", "shop.duckdb", *ACME], "has no scheme (such as duckdb:"),
    (["sources", "add", "shop", "ftp://root@db/shop", *ACME], "scheme 'ftp'; installed: duckdb"),
    (["sources", "add", "shop", "postgresql://u@db:99999/x", *ACME], "cannot be parsed"),
    (["sources", "add", "shop", "mysql://root:hunter2@db/shop", *ACME], "--url-stdin"),
    (["sources", "add", "shop", "postgresql://u@db/x?password=hunter2", *ACME], "--url-stdin"),
    (["sources", "add", "shop", "duckdb:///data/shop.duckdb"], "--workspace"),
    (["sources", "add", "shop", "env:1NOPE", *ACME], "environment variable"),
    (["sources", "add", "Shop!", "duckdb:///data/shop.duckdb", *ACME], "invalid source name"),
    (["sources", "add", "demo", "duckdb:///data/shop.duckdb", *ACME], "already configured"),
]


def test_bad_input_exits_2_with_one_line(env: Env) -> None:
    """Each case: exit 2, one line on stderr naming the problem, nothing on stdout, no
    password echoed, and nothing written. (One data dir for all: each command takes a
    second to start.)"""
    env.run("users", "create", "ann@acme.test", "--workspace", "acme", "--role", "viewer")
    for args, message in BAD_INPUT:
        proc = env.run(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stdout == "", args
        assert len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert "hunter2" not in proc.stderr
    accounts = _accounts(env)
    assert accounts.registered_sources() == []
    assert [m.workspace_id for m in accounts.memberships_of(_user_id(env))] == ["acme"]
    assert accounts.find_user("not-an-email") is None
    assert accounts.list_tokens(_user_id(env)) == []


def _user_id(env: Env) -> str:
    user = _accounts(env).find_user("ann@acme.test")
    assert user is not None
    return user.id


def test_an_empty_password_on_stdin_is_refused(env: Env) -> None:
    """--password-stdin with nothing to read creates no user."""
    proc = _run_with_stdin(
        env,
        "\n",
        "users",
        "create",
        "ann@acme.test",
        "--workspace",
        "acme",
        "--role",
        "viewer",
        "--password-stdin",
        check=False,
    )
    assert proc.returncode == 2
    assert "empty password" in proc.stderr
    assert _accounts(env).find_user("ann@acme.test") is None


def test_sources_are_listed_with_passwords_masked(env: Env) -> None:
    """`sources add` takes a password only from stdin, stores it sealed under
    QEXPORT_SECRET_KEY, and `sources add`/`sources list` never print it; a name is registered
    once per workspace, and sharing one that several workspaces have needs --owner."""
    env.extra["QEXPORT_SECRET_KEY"] = "e2e-secret-key"  # noqa: S105 - a test key
    url = "postgresql://reader:hunter2@db.internal/crm"
    added = _run_with_stdin(
        env,
        url + "\n",
        "sources",
        "add",
        "crm",
        "--url-stdin",
        "--workspace",
        "acme",
        "--share-with",
        "beta",
        "--allow-privileged-role",  # db.internal does not exist: nothing to check
        check=False,
    )
    assert "hunter2" not in added.stdout + added.stderr
    assert added.returncode == 1  # PostgreSQL sources are checked: this one cannot be reached
    assert "cannot be reached" in added.stderr or "crm" in added.stderr
    env.run("sources", "add", "shop", "duckdb:///srv/data/shop.duckdb", *ACME)
    unset = env.run("sources", "add", "wh", "env:WAREHOUSE_URL", "--workspace", "beta", check=False)
    assert unset.returncode == 1  # checked as a worker would read it
    assert "$WAREHOUSE_URL" in unset.stderr
    env.extra["WAREHOUSE_URL"] = "duckdb:///srv/data/wh.duckdb"
    env.run("sources", "add", "wh", "env:WAREHOUSE_URL", "--workspace", "beta")
    taken = env.run("sources", "add", "shop", "duckdb:///srv/other.duckdb", *ACME, check=False)
    assert taken.returncode == 2
    assert "workspace 'acme' already has a source named 'shop'" in taken.stderr
    stored = {s.name: s for s in _accounts(env).registered_sources()}
    assert stored["shop"].url.startswith("v2:")
    assert stored["wh"].url == "env:WAREHOUSE_URL"
    env.run("sources", "share", "shop", "beta")
    listed = json.loads(env.run("sources", "list", "--json").stdout)
    assert listed == [
        {
            "name": "demo",
            "owner": "built-in",
            "kind": "duckdb",
            "url": f"duckdb://{env.data_dir / 'demo.duckdb'}",
            "origin": "built-in",
            "workspaces": ["demo"],
            "allow_privileged_role": False,
        },
        {
            "name": "shop",
            "owner": "acme",
            "kind": "duckdb",
            "url": "duckdb:///srv/data/shop.duckdb",
            "origin": "registered",
            "workspaces": ["acme", "beta"],
            "allow_privileged_role": False,
        },
        {
            "name": "wh",
            "owner": "beta",
            "kind": "env",
            "url": "env:WAREHOUSE_URL",
            "origin": "registered",
            "workspaces": ["beta"],
            "allow_privileged_role": False,
        },
    ]
    env.run("sources", "add", "shop", "duckdb:///srv/data/gamma.duckdb", "--workspace", "gamma")
    ambiguous = env.run("sources", "unshare", "shop", "beta", check=False)
    assert ambiguous.returncode == 2
    assert "several workspaces have a source named 'shop' (acme, gamma)" in ambiguous.stderr
    env.run("sources", "unshare", "shop", "beta", "--owner", "acme")
    table = env.run("sources", "list").stdout
    assert "acme" in table
    assert "beta" in table  # wh's


def test_a_running_worker_finds_a_source_registered_after_it_started(
    env: Env, tmp_path: Path
) -> None:
    """The worker starts first; then a source is registered and a query on it saved; the
    worker's next export reads that source."""
    shop = tmp_path / "shop.duckdb"
    with duckdb.connect(str(shop)) as con:
        con.execute("CREATE TABLE items AS SELECT i AS id FROM range(1, 43) t(i)")
    env.start_worker(QEXPORT_POLL_SECONDS="0.1")
    env.run("sources", "add", "shop", f"duckdb://{shop}", "--workspace", "demo")
    env.run("queries", "add", "items", "--source", "shop", "--sql", "SELECT id FROM items")
    export_id = env.request("items", "csv")
    record = wait_for(lambda: env.record(export_id).settled and env.record(export_id))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    assert record.row_count == 42


def test_a_local_requester_outside_a_workspace_with_accounts_is_refused_up_front(
    env: Env, tmp_path: Path
) -> None:
    """Once a workspace has accounts, a local export for someone who is not a member is
    refused with one line and nothing recorded; a member's user id is accepted."""
    shop = tmp_path / "shop.duckdb"
    with duckdb.connect(str(shop)) as con:
        con.execute("CREATE TABLE items AS SELECT i AS id FROM range(1, 4) t(i)")
    env.run("sources", "add", "shop", f"duckdb://{shop}", "--workspace", "demo")
    env.run("queries", "add", "items", "--source", "shop", "--sql", "SELECT id FROM items")
    user_id = env.run(
        "users", "create", "ana@example.com", "--workspace", "demo", "--role", "viewer"
    ).stdout.strip()

    refused = env.run("exports", "create", "--query", "items", "--format", "csv", check=False)
    assert refused.returncode == 2
    assert "not a member of workspace 'demo'" in refused.stderr
    assert env.json("--user", user_id, "exports", "list")["items"] == []
    assert env.store.list_exports(workspace_id="demo", requested_by="alice", limit=10) == []

    accepted = env.run(
        "--user", user_id, "exports", "create", "--query", "items", "--format", "csv"
    )
    assert accepted.stdout.startswith("export ")


def test_the_local_cli_saves_queries_only_on_the_workspaces_sources(
    env: Env, tmp_path: Path
) -> None:
    """`queries add` as a member of another workspace cannot name acme's source (exit 2,
    nothing saved), nor the demo source outside the demo workspace; acme can."""
    shop = tmp_path / "shop.duckdb"
    with duckdb.connect(str(shop)) as con:
        con.execute("CREATE TABLE items AS SELECT i AS id FROM range(1, 4) t(i)")
    env.run("sources", "add", "shop", f"duckdb://{shop}", *ACME)
    add = ("queries", "add", "items", "--sql", "SELECT id FROM items")
    for workspace, source in (("other", "shop"), ("other", "demo"), ("acme", "demo")):
        refused = env.run("--workspace", workspace, *add, "--source", source, check=False)
        assert refused.returncode == 2, refused.stderr
        assert "unknown source" in refused.stderr
    assert env.store.find_query("other", "items") is None
    env.run("--workspace", "acme", *add, "--source", "shop")
    assert env.store.find_query("acme", "items") is not None
