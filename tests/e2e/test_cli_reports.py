"""`qexport reports add|list` and `qexport exports create --report`, as a user runs them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from qexport.domain.queries import Parameter, ParamType
from qexport.store.accounts import SqlAccountStore
from tests.e2e.conftest import Env

ORDERS = "SELECT order_id, total FROM orders WHERE order_id <= $n ORDER BY order_id"


def _add_orders(env: Env) -> None:
    env.add_query("orders", ORDERS, Parameter("n", ParamType.INTEGER, required=False, default=10))


def test_a_report_added_on_the_command_line_is_listed_and_exported(env: Env) -> None:
    """Sections keep their order, display (with a chart's value columns), row cap and fixed
    values; the query is stored by id; the report can then be requested by title as a pdf
    export of subject type report."""
    _add_orders(env)
    added = env.run(
        "reports",
        "add",
        "Sales",
        "--description",
        "Every order",
        "--section",
        "First ten|orders|table",
        "--section",
        "First fifty|orders|bar of total|20",
        "--param",
        "2:n=50",
    )
    assert "saved report 'Sales'" in added.stdout
    (listed,) = env.json("reports", "list")
    query_id = env.store.find_query("demo", "orders").id  # type: ignore[union-attr]
    assert listed["title"] == "Sales"
    assert listed["description"] == "Every order"
    assert listed["visibility"] == "workspace"
    assert listed["sections"] == [
        {
            "heading": "First ten",
            "query_id": query_id,
            "parameters": {},
            "display": "table",
            "row_cap": 1000,
            "series": None,
            "values": [],
        },
        {
            "heading": "First fifty",
            "query_id": query_id,
            "parameters": {"n": "50"},
            "display": "bar",
            "row_cap": 20,
            "series": None,
            "values": ["total"],
        },
    ]
    export = env.json("exports", "create", "--report", "Sales", "--format", "pdf", "--param", "n=5")
    assert export["status"] == "queued"
    assert export["subject"] == {"type": "report", "id": listed["id"], "name": "Sales"}
    assert export["filename"] == "Sales.pdf"
    assert export["parameters"] == {"n": "5"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--section", "Only a heading"], "--section expects HEADING|QUERY|DISPLAY"),
        (["--section", "S|orders|pie"], "unknown display 'pie'"),
        (["--section", "S|orders|table|lots"], "is not a whole number"),
        (["--section", "S|orders|table by total"], "section 1 series: a table has no series"),
        (
            ["--section", "S|orders|line of total by total"],
            "section 1 series: the series column 'total' cannot also be a value column",
        ),
        (["--section", "S|orders|bar of total,"], "has an empty value column"),
        (["--section", "S|orders|table|0"], "section 1 row_cap: a row cap is 1 to"),
        (["--section", "S|nope|table"], "section 1: no query 'nope'"),
        (["--section", "S|orders|table", "--param", "2:n=5"], "there are sections 1 to 1"),
        (["--section", "S|orders|table", "--param", "1:m=5"], "the query has no parameter 'm'"),
        (["--section", "S|orders|table", "--param", "1:n=five"], "must be an integer"),
        (["--section", "S|orders|table", "--param", "n=5"], "--param expects N:NAME=VALUE"),
    ],
)
def test_bad_reports_are_refused_and_nothing_is_saved(
    env: Env, args: list[str], message: str
) -> None:
    """Exit code 2 with one line naming the problem; no report is saved."""
    _add_orders(env)
    proc = env.run("reports", "add", "Sales", *args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert env.store.list_reports("demo") == []


def test_brackets_in_names_and_messages_are_printed_as_written(env: Env) -> None:
    """Square brackets are text, not console markup: a refusal keeps its `[by SERIES]`, a
    name holding `[/b]` is quoted back in the error instead of crashing the command, a
    query so named is listed like any other, and a list column's type reads `INTEGER[]`."""
    _add_orders(env)
    pie = env.run("reports", "add", "Sales", "--section", "S|orders|pie", check=False)
    assert pie.returncode == 2
    assert "DISPLAY [of VALUE[, VALUE...]] [by SERIES])" in pie.stderr
    odd = env.run("reports", "add", "Sales", "--section", "S|a[/b]|table", check=False)
    assert odd.returncode == 2
    assert odd.stderr.strip() == "error: section 1: no query 'a[/b]' that you can read"
    env.add_query("x[/y]", "SELECT 1 AS a")
    listed = env.run("queries", "list")
    assert "x[/y]" in listed.stdout
    saved = env.run("queries", "add", "lists", "--sql", "SELECT [1, 2] AS xs")
    assert "columns: xs INTEGER[]" in saved.stdout


def test_bad_report_export_requests_are_refused(env: Env) -> None:
    """A non-report format, an unknown report, or both --query and --report: exit 2 and
    nothing recorded."""
    _add_orders(env)
    env.run("reports", "add", "Sales", "--section", "S|orders|table")
    for args, message in [
        (["--report", "Sales", "--format", "csv"], "unknown report format 'csv'"),
        (["--report", "Nope", "--format", "pdf"], "no report"),
        (["--report", "Sales", "--query", "orders", "--format", "pdf"], "exactly one of"),
    ]:
        proc = env.run("exports", "create", *args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr
    assert env.json("exports", "list")["items"] == []


def test_a_workspace_time_zone_is_set_and_checked(env: Env) -> None:
    """`workspaces timezone W ZONE` stores an IANA name (printed back without ZONE); an
    unknown zone or workspace exits 2 and changes nothing."""
    accounts = SqlAccountStore(env.store.engine)
    accounts.ensure_workspace("demo", now=datetime.now(UTC))
    assert env.run("workspaces", "timezone", "demo").stdout.strip() == "UTC"
    env.run("workspaces", "timezone", "demo", "Europe/Paris")
    assert env.run("workspaces", "timezone", "demo").stdout.strip() == "Europe/Paris"
    for args, message in [
        (["demo", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["demo", "../../etc/passwd"], "unknown time zone"),
        (["elsewhere", "UTC"], "no workspace 'elsewhere'"),
    ]:
        proc = env.run("workspaces", "timezone", *args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr
    assert accounts.workspace_timezone("demo") == "Europe/Paris"


def test_a_report_is_deleted_by_title_and_its_queued_exports_fail(env: Env) -> None:
    """`reports delete TITLE` removes it (recorded in the trail as the operator's); an export
    of it still queued then fails access_lost; an unknown title fails with one line."""
    _add_orders(env)
    env.run("reports", "add", "Sales", "--section", "S|orders|table")
    created = env.json("exports", "create", "--report", "Sales", "--format", "pdf")
    deleted = env.run("reports", "delete", "Sales")
    assert deleted.stdout.startswith("deleted report 'Sales' (")
    assert env.json("reports", "list") == []
    env.run("worker", "--drain")
    shown = env.json("exports", "get", created["id"])
    assert (shown["status"], shown["failure"]["code"]) == ("failed", "access_lost")
    again = env.run("reports", "delete", "Sales", check=False)
    assert again.returncode == 1
    assert again.stderr.strip() == "error: no report 'Sales' that you can read (not_found)"
