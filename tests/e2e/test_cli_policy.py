"""`qexport workspaces policy W`: the operator reads and changes what a workspace lets leave,
and `exports create` is held to it like the API."""

from __future__ import annotations

from tests.e2e.conftest import Env


def test_the_operator_sets_prints_and_lifts_a_policy(env: Env) -> None:
    env.run("users", "create", "ann@acme.test", "--workspace", "acme", "--role", "admin")
    assert "formats: any" in env.run("workspaces", "policy", "acme").stdout
    changed = env.run(
        "workspaces",
        "policy",
        "acme",
        "--formats",
        "csv,parquet",
        "--max-rows",
        "1000",
        "--links",
        "off",
        "--recipient-domains",
        "acme.test",
    )
    assert "formats: csv, parquet" in changed.stderr
    shown = env.run("workspaces", "policy", "acme").stdout.splitlines()
    assert shown == [
        "formats: csv, parquet",
        "max rows: 1,000",
        "public links: off",
        "link lifetime: the file's",
        "retention: the installation's",
        "email recipients: acme.test",
        "sensitive tables: none",
        "sensitive queries: none",
    ]
    env.run("workspaces", "policy", "acme", "--formats", "any", "--max-rows", "none")
    assert env.run("workspaces", "policy", "acme").stdout.startswith(
        "formats: any\nmax rows: the installation's\npublic links: off"
    )


def test_bad_rules_exit_2_naming_each_option(env: Env) -> None:
    env.run("users", "create", "ann@acme.test", "--workspace", "acme", "--role", "admin")
    proc = env.run(
        "workspaces",
        "policy",
        "acme",
        "--formats",
        "csv,docx",
        "--retention-days",
        "365",
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: --formats: unknown format 'docx'")
    assert lines[1].startswith("error: --retention-days: retention_days may not exceed")
    assert env.run("workspaces", "policy", "acme").stdout.startswith("formats: any")
    typo = env.run("workspaces", "policy", "acme", "--sensitive-queries", "ordrs", check=False)
    assert typo.returncode == 2
    assert "--sensitive-queries: no query 'ordrs' in this workspace" in typo.stderr
    missing = env.run("workspaces", "policy", "nowhere", "--links", "off", check=False)
    assert missing.returncode == 2
    assert "no workspace 'nowhere'" in missing.stderr


def test_exports_create_is_held_to_the_policy(env: Env) -> None:
    """The demo workspace allows csv only: an xlsx request exits 2 naming the policy and
    records nothing; csv is accepted."""
    created = env.run(
        "users", "create", "alice@demo.test", "--workspace", "demo", "--role", "admin"
    )
    env.extra["QEXPORT_USER"] = created.stdout.strip()
    env.run("workspaces", "policy", "demo", "--formats", "csv")
    env.add_query("orders", "SELECT 1 AS n")
    proc = env.run("exports", "create", "--query", "orders", "--format", "xlsx", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "the workspace's policy does not allow xlsx exports (allowed: csv)" in proc.stderr
    assert env.json("exports", "list")["items"] == []
    env.run("exports", "create", "--query", "orders", "--format", "csv")
