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


def test_the_operator_marks_tables_sensitive_and_a_copy_of_the_sql_waits_too(env: Env) -> None:
    """`--sensitive-table` takes a table as the policy lists it (repeatable; `none` clears);
    a query saved with the CLI records what it reads, so a request of it, or of a copy of its
    SQL under another name, waits for an admin; a query of another table is queued. A wrong
    table (malformed, or one the source does not have) exits 2 naming its option;
    `--revoke-links` goes with a change only."""
    created = env.run("users", "create", "ann@demo.test", "--workspace", "demo", "--role", "admin")
    env.extra["QEXPORT_USER"] = created.stdout.strip()
    sql = "SELECT name FROM customers WHERE email LIKE '%@example.com' LIMIT 5"
    env.run("queries", "add", "customers", "--sql", sql)
    env.run("queries", "add", "customers copy", "--sql", sql)
    env.run("queries", "add", "orders", "--sql", "SELECT order_id FROM orders LIMIT 5")
    changed = env.run(
        "workspaces",
        "policy",
        "demo",
        "--sensitive-table",
        "demo: Customers (EMAIL)",
        "--revoke-links",
    )
    assert "sensitive tables: demo: main.customers (email)" in changed.stderr
    assert "public links revoked: 0" in changed.stderr
    for name in ("customers", "customers copy"):
        asked = env.run("exports", "create", "--query", name, "--format", "csv")
        assert "awaits an admin's approval" in asked.stdout, name
    assert env.json("exports", "create", "--query", "orders", "--format", "csv")["status"] == (
        "queued"
    )
    wrong = env.run("workspaces", "policy", "demo", "--sensitive-table", "demo: a.b.c", check=False)
    assert wrong.returncode == 2
    assert "--sensitive-table 1: 'a.b.c' names more than a schema and a table" in wrong.stderr
    missing = env.run(
        "workspaces", "policy", "demo", "--sensitive-table", "demo: nosuchtable", check=False
    )
    assert missing.returncode == 2  # looked up in the source's catalogue: it can never match
    assert "--sensitive-table 1: the source 'demo' has no table main.nosuchtable" in (
        missing.stderr
    )
    alone = env.run("workspaces", "policy", "demo", "--revoke-links", check=False)
    assert alone.returncode == 2
    env.run("workspaces", "policy", "demo", "--sensitive-table", "none")
    assert "sensitive tables: none" in env.run("workspaces", "policy", "demo").stdout
