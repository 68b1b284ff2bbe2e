"""`qexport approvals`: an export of a sensitive query waits for another admin, from the
terminal as from the API."""

from __future__ import annotations

from tests.e2e.conftest import Env

SMALL = "SELECT 1 AS n"


def _user(env: Env, email: str, role: str) -> str:
    return env.run("users", "create", email, "--workspace", "demo", "--role", role).stdout.strip()


def test_a_sensitive_export_waits_for_another_admin_on_the_command_line(env: Env) -> None:
    """`exports create` prints the request and how to approve it; the requester cannot
    approve their own (exit 1, four eyes); another admin's approval queues the export, which
    then lists as the requester's; a second decision is refused."""
    env.add_query("payroll", SMALL)
    ada = _user(env, "ada@example.com", "admin")
    bob = _user(env, "bob@example.com", "admin")
    env.run("workspaces", "policy", "demo", "--sensitive-queries", "payroll")
    asked = env.run("--user", ada, "exports", "create", "--query", "payroll", "--format", "csv")
    assert "awaits an admin's approval" in asked.stdout
    request = env.json("--user", ada, "approvals", "list")["items"]
    assert [(r["status"], r["subject"]["name"]) for r in request] == [("pending", "payroll")]
    approval_id = request[0]["id"]
    assert approval_id in asked.stdout
    assert env.json("--user", ada, "exports", "list")["items"] == []

    own = env.run("--user", ada, "approvals", "approve", approval_id, check=False)
    assert own.returncode == 1
    assert "four eyes" in own.stderr
    approved = env.run("--user", bob, "approvals", "approve", approval_id, "--reason", "ok")
    assert "approved: export" in approved.stdout
    (export,) = env.json("--user", ada, "exports", "list")["items"]
    assert (export["status"], export["requested_by"]) == ("queued", ada)
    again = env.run("--user", bob, "approvals", "deny", approval_id, check=False)
    assert again.returncode == 1
    assert "already approved" in again.stderr
    actions = [e["action"] for e in env.json("audit", "list", "--action", "approval.")["items"]]
    assert actions == ["approval.decided", "approval.decided", "approval.requested"]
