"""`qexport members list|remove` and `qexport users disable|enable|set-password` as an
administrator runs them, and what they end: local actions, tokens, sessions, schedules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from qexport.domain.queries import Parameter, ParamType
from qexport.store.accounts import SqlAccountStore
from tests.e2e.conftest import Env

SMALL_ORDERS = "SELECT order_id, total FROM orders WHERE order_id <= $n ORDER BY order_id"
N = Parameter("n", ParamType.INTEGER, required=False, default="10")


def _user(env: Env, email: str, role: str) -> str:
    """A member of workspace `demo` made by the CLI; their user id."""
    return env.run("users", "create", email, "--workspace", "demo", "--role", role).stdout.strip()


def _queries_status(client: TestClient, token: str) -> int:
    return client.get("/api/v1/queries", headers={"Authorization": f"Bearer {token}"}).status_code


def test_a_removed_member_is_refused_by_every_local_requester_action(
    env: Env, api_client: TestClient, tmp_path: Path
) -> None:
    """After `members remove`, each local action as that member exits 2 with the same line;
    their token gets 401, their schedule is paused, and `members list` no longer shows them."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    _user(env, "ada@example.com", "admin")
    ann = _user(env, "ann@example.com", "editor")
    token = env.run("tokens", "create", "ann@example.com").stdout.strip()
    export_id = env.json("--user", ann, "exports", "create", "--query", "small_orders",
                         "--format", "csv")["id"]  # fmt: skip
    schedule = env.json("--user", ann, "schedules", "add", "small_orders", "--format", "csv",
                        "--cron", "0 8 * * 1")  # fmt: skip
    listed = env.json("members", "list", "--workspace", "demo")
    assert [(m["email"], m["role"]) for m in listed] == [
        ("ada@example.com", "admin"),
        ("ann@example.com", "editor"),
    ]

    removed = env.run("members", "remove", "ann@example.com", "--workspace", "demo")
    assert "1 token(s) revoked, 1 schedule(s) paused" in removed.stderr

    refusal = f"user {ann!r} is not a member of workspace 'demo'"
    for action in (
        ["exports", "create", "--query", "small_orders", "--format", "csv"],
        ["exports", "get", export_id],
        ["exports", "list"],
        ["exports", "wait", export_id],
        ["exports", "download", export_id, "--output", str(tmp_path / "out.csv")],
        ["exports", "download", export_id, "--url"],
        ["exports", "cancel", export_id],
        ["queries", "list"],
        ["schedules", "list"],
        ["schedules", "resume", schedule["id"]],
    ):
        proc = env.run("--user", ann, *action, check=False)
        assert proc.returncode == 2, (action, proc.stdout, proc.stderr)
        assert refusal in proc.stderr, (action, proc.stderr)
        assert proc.stdout == "", action
    assert not (tmp_path / "out.csv").exists()
    assert env.record(export_id).status.value == "queued"  # not cancelled by her

    assert _queries_status(api_client, token) == 401
    [kept] = env.json("--user", _admin_id(env), "schedules", "list")["items"]
    assert (kept["id"], kept["enabled"]) == (schedule["id"], False)
    assert [m["email"] for m in env.json("members", "list", "--workspace", "demo")] == [
        "ada@example.com"
    ]
    again = env.run("members", "remove", "ann@example.com", "--workspace", "demo", check=False)
    assert again.returncode == 2
    assert "not a member of workspace 'demo'" in again.stderr


def _admin_id(env: Env) -> str:
    user = SqlAccountStore(env.store.engine).find_user("ada@example.com")
    assert user is not None
    return user.id


def test_the_last_admin_of_a_workspace_is_not_removed(env: Env) -> None:
    """Removing the only admin exits 2 saying why and what to do; nothing changes. With a
    second admin, the first can go."""
    _user(env, "ada@example.com", "admin")
    _user(env, "ann@example.com", "viewer")
    refused = env.run("members", "remove", "ada@example.com", "--workspace", "demo", check=False)
    assert refused.returncode == 2
    assert "only admin of workspace 'demo'" in refused.stderr
    assert "--role admin" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert len(env.json("members", "list", "--workspace", "demo")) == 2
    _user(env, "ann@example.com", "admin")
    env.run("members", "remove", "ada@example.com", "--workspace", "demo")
    listed = env.json("members", "list", "--workspace", "demo")
    assert [(m["email"], m["role"]) for m in listed] == [("ann@example.com", "admin")]


def test_members_list_shows_email_role_and_who_is_disabled(env: Env) -> None:
    """The table names each member with their role; `users disable` marks them disabled, in
    the table and in --json; an unknown workspace or email exits 2."""
    _user(env, "ada@example.com", "admin")
    _user(env, "ann@example.com", "viewer")
    env.run("users", "disable", "ann@example.com")
    table = env.run("members", "list", "--workspace", "demo").stdout
    assert "ada@example.com" in table
    assert "admin" in table
    ann_line = next(line for line in table.splitlines() if "ann@example.com" in line)
    assert "viewer" in ann_line
    assert "disabled" in ann_line
    listed = env.json("members", "list", "--workspace", "demo")
    assert [(m["email"], m["disabled"]) for m in listed] == [
        ("ada@example.com", False),
        ("ann@example.com", True),
    ]
    for args, message in (
        (["members", "list", "--workspace", "nowhere"], "no workspace 'nowhere'"),
        (["members", "remove", "nobody@example.com", "--workspace", "demo"], "no user"),
        (["users", "disable", "nobody@example.com"], "no user"),
    ):
        proc = env.run(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr


def test_a_disabled_users_token_and_local_actions_stop_until_enabled(
    env: Env, api_client: TestClient
) -> None:
    """`users disable`: their token gets 401, local actions as them exit 2, no new token is
    issued and their schedule is paused; `users enable`: the same token works again (the
    schedule stays paused)."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    ann = _user(env, "ann@example.com", "editor")
    token = env.run("tokens", "create", "ann@example.com").stdout.strip()
    assert _queries_status(api_client, token) == 200
    env.run("--user", ann, "schedules", "add", "small_orders", "--format", "csv",
            "--cron", "0 8 * * 1")  # fmt: skip
    disabled = env.run("users", "disable", "ann@example.com")
    assert "1 schedule(s) paused" in disabled.stderr
    assert _queries_status(api_client, token) == 401
    local = env.run("--user", ann, "exports", "list", check=False)
    assert local.returncode == 2
    assert "not a member" in local.stderr
    refused = env.run("tokens", "create", "ann@example.com", check=False)
    assert refused.returncode == 2
    assert "disabled" in refused.stderr
    again = env.run("users", "disable", "ann@example.com")
    assert "already disabled" in again.stderr
    env.run("users", "enable", "ann@example.com")
    assert _queries_status(api_client, token) == 200
    assert env.json("--user", ann, "exports", "list")["items"] == []
    [schedule] = env.json("--user", ann, "schedules", "list")["items"]
    assert schedule["enabled"] is False


def test_set_password_reads_stdin_and_ends_the_users_sessions(env: Env) -> None:
    """`users set-password --password-stdin` stores a new argon2 hash and raises the
    session epoch; without --password-stdin it is refused and nothing changes."""
    _user(env, "ann@example.com", "viewer")
    accounts = SqlAccountStore(env.store.engine)
    refused = env.run("users", "set-password", "ann@example.com", check=False)
    assert refused.returncode == 2
    proc = subprocess.run(
        [sys.executable, "-m", "qexport", "users", "set-password", "ann@example.com",
         "--password-stdin"],
        env=env.environ, input="a new password\n", capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "a new password" not in proc.stdout + proc.stderr
    user = accounts.find_user("ann@example.com")
    assert user is not None
    assert user.password_hash is not None
    assert user.password_hash.startswith("$argon2id$")
    assert user.session_epoch == 1
    assert json.loads(env.run("members", "list", "--json").stdout)[0]["email"] == (
        "ann@example.com"
    )
