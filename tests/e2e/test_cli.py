"""The CLI as a user runs it: bad input, sandboxed SQL, limits, expiry, JSON output."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode
from tests.e2e.conftest import Env

ORDERS = "SELECT order_id, total, note FROM orders WHERE order_id <= $n ORDER BY order_id"


def _add_orders(env: Env) -> None:
    env.run("queries", "add", "orders", "--sql", ORDERS, "--param", "n:integer=100")


def _drain(env: Env, **extra: str) -> None:
    assert env.start_worker("--drain", "--concurrency", "2", **extra).wait(timeout=120) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "docx"], "unknown format 'docx'"),
        (["--format", "csv", "--param", "n=ten"], "parameter 'n' must be an integer"),
        (["--format", "csv", "--param", "colour=red"], "unknown parameter 'colour'"),
        (["--format", "csv", "--param", "n"], "--param expects KEY=VALUE"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_recorded(
    env: Env, args: list[str], message: str
) -> None:
    """Exit code 2, a message naming the problem, and no export recorded."""
    _add_orders(env)
    proc = env.run("exports", "create", "--query", "orders", *args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert env.json("exports", "list")["items"] == []


def test_an_unknown_query_is_refused(env: Env) -> None:
    """Asking for a query that does not exist names it."""
    proc = env.run("exports", "create", "--query", "nope", "--format", "csv", check=False)
    assert proc.returncode == 2
    assert "no query 'nope'" in proc.stderr


def test_a_missing_required_parameter_is_refused(env: Env) -> None:
    """A required parameter without a value is named in the error."""
    env.run("queries", "add", "by_day", "--sql", "SELECT $day AS d", "--param", "day:date")
    proc = env.run("exports", "create", "--query", "by_day", "--format", "csv", check=False)
    assert proc.returncode == 2
    assert "missing required parameter 'day' (date)" in proc.stderr


ESCAPES = {
    "insert": "INSERT INTO orders SELECT * FROM orders LIMIT 1",
    "drop": "DROP TABLE orders",
    "copy_to": "COPY orders TO '/tmp/qexport-stolen.csv'",
    "attach": "ATTACH '/tmp/qexport-other.duckdb' AS other",
    "install": "INSTALL httpfs",
    "read_file": "SELECT * FROM read_csv('/etc/passwd')",
    "two_statements": "SELECT 1; DROP TABLE orders",
}


def test_sql_that_writes_or_escapes_the_sandbox_fails_query_invalid(
    env: Env, demo_db: Path
) -> None:
    """Writes, file access, ATTACH and INSTALL end failed/query_invalid and change nothing."""
    before = hashlib.sha256(demo_db.read_bytes()).hexdigest()
    ids = {}
    for name, sql in ESCAPES.items():
        env.add_query(name, sql)
        ids[name] = env.request(name, "csv")
    _drain(env)
    for name, export_id in ids.items():
        record = env.record(export_id)
        assert record.status is Status.FAILED, name
        assert record.failure_code is FailureCode.QUERY_INVALID, (name, record.failure_detail)
    assert not Path("/tmp/qexport-stolen.csv").exists()  # noqa: S108 - the path the SQL tried
    assert hashlib.sha256(demo_db.read_bytes()).hexdigest() == before


def test_a_syntax_error_fails_with_the_source_message(env: Env) -> None:
    """The user sees DuckDB's own explanation, bounded and without a stack trace (a query
    saved before saving checked it)."""
    env.add_query("typo", "SELEC order_id FROM orders")
    export_id = env.create("typo", "csv")
    _drain(env)
    failure = env.get(export_id)["failure"]
    assert failure["code"] == "query_invalid"
    assert "syntax error" in failure["detail"].lower()
    assert "Traceback" not in failure["detail"]
    assert len(failure["detail"]) <= 500


def test_statement_timeout_fails_query_timeout(env: Env) -> None:
    """A statement running past the timeout fails query_timeout."""
    env.run("queries", "add", "slow", "--sql", "SELECT count(*) FROM range(100000000000) a")
    export_id = env.create("slow", "csv")
    _drain(env, QEXPORT_STATEMENT_TIMEOUT_SECONDS="0.5")
    assert env.get(export_id)["failure"]["code"] == "query_timeout"


def test_row_limit_fails_limit_exceeded_and_stores_nothing(env: Env) -> None:
    """Past the row limit: limit_exceeded, the upload aborted, no object."""
    _add_orders(env)
    export_id = env.create("orders", "parquet", "n=5000")
    _drain(env, QEXPORT_MAX_ROWS="1000")
    assert env.get(export_id)["failure"]["code"] == "limit_exceeded"
    key = env.record(export_id).storage_key
    assert env.objects.head(key) is None
    assert env.objects.incomplete_uploads(key) == []


def test_export_json_follows_the_contract_and_expires(env: Env, tmp_path: Path) -> None:
    """`--json` prints the DESIGN fields and the file downloads; once an export's retention
    has passed its status reads `expired` (the record stays succeeded) and the download is
    refused."""
    # The retention is the worker's when the export settles: a day for the first export (its
    # download is checked however slow the machine), a second for the one that expires.
    env.extra["QEXPORT_RETENTION"] = "1d"
    _add_orders(env)
    export_id = env.create("orders", "jsonl", "n=10")
    _drain(env)
    view = env.get(export_id)
    assert set(view) == {
        "id",
        "status",
        "subject",
        "format",
        "parameters",
        "filename",
        "requested_by",
        "created_at",
        "started_at",
        "completed_at",
        "expires_at",
        "size_bytes",
        "row_count",
        "sha256",
        "attempts",
        "progress",
        "failure",
    }
    assert view["status"] == "succeeded"
    assert view["subject"] == {"type": "query", "id": view["subject"]["id"], "name": "orders"}
    assert (view["row_count"], view["attempts"], view["failure"]) == (10, 1, None)
    assert view["parameters"] == {"n": 10}
    out = tmp_path / "orders.jsonl"
    env.run("exports", "download", export_id, "-o", str(out))
    assert len(out.read_text().splitlines()) == 10
    assert hashlib.sha256(out.read_bytes()).hexdigest() == view["sha256"]
    env.extra["QEXPORT_RETENTION"] = "1s"
    export_id = env.create("orders", "jsonl", "n=10")
    _drain(env)
    expires_at = datetime.fromisoformat(env.get(export_id)["expires_at"])
    time.sleep(max(0.0, (expires_at - datetime.now(UTC)).total_seconds()) + 0.2)
    assert env.get(export_id)["status"] == "expired"
    assert env.record(export_id).status is Status.SUCCEEDED
    listed = env.json("exports", "list")["items"]
    assert {i["id"]: i["status"] for i in listed}[export_id] == "expired"
    refused = env.run(
        "exports", "download", export_id, "-o", str(tmp_path / "late.jsonl"), check=False
    )
    assert refused.returncode == 1
    assert "expired" in refused.stderr
    assert not (tmp_path / "late.jsonl").exists()


def test_other_people_cannot_see_or_download_an_export(env: Env, tmp_path: Path) -> None:
    """Someone else's export looks like a missing one."""
    _add_orders(env)
    export_id = env.create("orders", "csv")
    _drain(env)
    env.extra["QEXPORT_USER"] = "mallory"
    for args in (
        ["exports", "get", export_id],
        ["exports", "download", export_id, "-o", str(tmp_path / "x")],
    ):
        proc = env.run(*args, check=False)
        assert proc.returncode == 1
        assert f"no export '{export_id}'" in proc.stderr
    assert env.json("exports", "list")["items"] == []


def test_wait_shows_the_settled_export(env: Env) -> None:
    """`exports create --wait` returns once settled and exits 1 for a failed export."""
    _add_orders(env)
    env.start_worker(QEXPORT_POLL_SECONDS="0.1")
    ok = env.run("exports", "create", "--query", "orders", "--format", "tsv", "--wait", "--json")
    assert '"status": "succeeded"' in ok.stdout
    env.add_query("typo", "SELEC 1")
    bad = env.run("exports", "create", "--query", "typo", "--format", "csv", "--wait", check=False)
    assert bad.returncode == 1


def test_storage_lifecycle_deletes_files_past_retention(env: Env) -> None:
    """`qexport storage lifecycle` removes a file older than retention + 1 day, keeps fresh ones."""
    _add_orders(env)
    old, fresh = env.create("orders", "csv"), env.create("orders", "csv")
    _drain(env)
    old_path = env.objects.local_path(env.record(old).storage_key)
    stamp = time.time() - 9 * 86400  # retention is 7 days
    os.utime(old_path, (stamp, stamp))
    proc = env.run("storage", "lifecycle")
    assert "deleted 1 file(s)" in proc.stdout
    assert not old_path.exists()
    assert env.objects.head(env.record(fresh).storage_key) is not None


def test_global_flags_win_over_their_environment_twins(env: Env) -> None:
    """`--retention` set on the worker's command line wins over QEXPORT_RETENTION; a bad
    flag value is refused with exit 2 and a message naming the setting."""
    env.extra["QEXPORT_RETENTION"] = "7d"
    _add_orders(env)
    export_id = env.create("orders", "csv", "n=5")
    env.run("--retention", "2h", "worker", "--drain")
    view = env.get(export_id)
    assert view["status"] == "succeeded"
    lifetime = datetime.fromisoformat(view["expires_at"]) - datetime.fromisoformat(
        view["completed_at"]
    )
    assert lifetime == timedelta(hours=2)
    for flag, value, message in [
        ("--retention", "soon", "invalid QEXPORT_RETENTION 'soon': invalid duration"),
        ("--max-attempts", "0", "QEXPORT_MAX_ATTEMPTS must be at least 1"),
        ("--lease-seconds", "long", "invalid QEXPORT_LEASE_SECONDS 'long'"),
    ]:
        refused = env.run(flag, value, "exports", "list", check=False)
        assert refused.returncode == 2, refused.stderr
        assert message in refused.stderr


def test_data_dir_flag_moves_the_default_database_and_files(env: Env, tmp_path: Path) -> None:
    """`--data-dir X` wins over QEXPORT_DATA_DIR, and the default database and object store
    move into X with it."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(env.data_dir / "demo.duckdb", other / "demo.duckdb")  # the data queried
    env.run(
        "--data-dir",
        str(other),
        "queries",
        "add",
        "orders",
        "--sql",
        ORDERS,
        "--param",
        "n:integer=5",
    )
    created = env.json("--data-dir", str(other), "exports", "create", "--query", "orders",
                       "--format", "csv")  # fmt: skip
    env.run("--data-dir", str(other), "worker", "--drain")
    assert (other / "qexport.db").is_file()
    assert created["filename"] == f"orders_{created['created_at'][:10]}.csv"  # {name}_{date}
    assert [p.name for p in (other / "objects").rglob("*.csv")] == [created["filename"]]
    assert env.json("exports", "list")["items"] == []  # QEXPORT_DATA_DIR's database


# ---------------------------------------------------------------- checked when saved

REFUSED_AT_SAVE = [
    ("SELECT order_id\n  FORM orders", 'syntax error at or near "orders" (line 2, column 8)'),
    ("SELECT * FROM no_such_table", "Table with name no_such_table does not exist"),
    ("DELETE FROM orders", "only a single SELECT statement is allowed; got DELETE"),
    (
        "SELECT * FROM orders WHERE order_id = $id",
        "the SQL uses $id, but the query declares no such parameter",
    ),
    ("SELECT 1; SELECT 2", "only a single SELECT statement is allowed; got 2 statements"),
    ("SELECT * FROM read_csv('/etc/passwd')", "table function read_csv() is not allowed"),
    # 100 kB: one argument of a command line may not be much longer (MAX_ARG_STRLEN).
    ("SELECT " + "1 + " * 25_000 + "1", "the SQL is longer than 50,000 characters"),
]


@pytest.mark.parametrize(("sql", "message"), REFUSED_AT_SAVE)
def test_queries_add_refuses_sql_its_source_refuses(env: Env, sql: str, message: str) -> None:
    """`queries add` with a syntax error, a missing table, a DELETE, an undeclared parameter,
    two statements, a file reader or a 1 MB statement exits 2 with the source's message (and
    where the mistake is), and saves nothing."""
    proc = env.run("queries", "add", "broken", "--sql", sql, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr
    assert env.store.find_query("demo", "broken") is None


def test_queries_add_shows_and_stores_the_described_columns(env: Env) -> None:
    """A good query is saved with the columns its source describes (typed by its
    parameters), printed by `queries add` and listed by `queries list --json`."""
    sql = "SELECT order_id, total, $since AS since FROM orders WHERE ordered_at >= $since"
    proc = env.run("queries", "add", "recent", "--sql", sql, "--param", "since:date")
    assert "columns: order_id BIGINT, total DECIMAL(12,2), since DATE" in proc.stdout
    (listed,) = env.json("queries", "list")
    assert listed["columns"] == [
        {"name": "order_id", "type": "BIGINT"},
        {"name": "total", "type": "DECIMAL(12,2)"},
        {"name": "since", "type": "DATE"},
    ]


def test_queries_update_is_checked_like_add(env: Env) -> None:
    """`queries update` with SQL the source refuses exits 2 and leaves the query as it was;
    a good change is saved with its new columns."""
    _add_orders(env)
    before = env.store.find_query("demo", "orders")
    assert before is not None
    refused = env.run("queries", "update", "orders", "--sql", "SELECT * FROM gone", check=False)
    assert refused.returncode == 2
    assert "Table with name gone does not exist" in refused.stderr
    assert env.store.find_query("demo", "orders") == before
    proc = env.run("queries", "update", "orders", "--sql", "SELECT note FROM orders")
    assert "columns: note VARCHAR" in proc.stdout
    after = env.store.find_query("demo", "orders")
    assert after is not None
    assert (after.sql, after.parameters) == ("SELECT note FROM orders", before.parameters)


def test_refused_saves_are_recorded_and_rationed(env: Env) -> None:
    """With two previews a minute: a refused `queries add` and `queries update` are failed
    `query.created`/`query.changed` events of the CLI acting for its user, each taking one;
    the next add is refused in one line saying when to try again (exit 1), unrecorded."""
    _add_orders(env)
    limited = Env(env.data_dir, {"QEXPORT_PREVIEW_PER_MINUTE": "2"})
    added = limited.run("queries", "add", "broken", "--sql", "SELECT * FROM gone", check=False)
    assert added.returncode == 2
    changed = limited.run("queries", "update", "orders", "--sql", "SELECT nope", check=False)
    assert changed.returncode == 2
    proc = limited.run("queries", "add", "broken", "--sql", "SELECT * FROM gone", check=False)
    assert proc.returncode == 1
    assert "(too_many_requests)" in proc.stderr
    assert "the query was not saved" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    events = [
        e
        for action in ("query.created", "query.changed")
        for e in env.json("audit", "list", "--action", action)["items"]
        if e["outcome"] == "failed"
    ]
    assert [(e["action"], e["actor"], e["details"]["name"]) for e in events] == [
        ("query.created", {"kind": "operator", "id": "alice"}, "broken"),
        ("query.changed", {"kind": "operator", "id": "alice"}, "orders"),
    ]
    assert events[0]["details"]["code"] == "query_invalid"
