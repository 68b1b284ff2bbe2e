"""`qexport schedules` as a user runs it: locally on the metadata database, and through a
server (QEXPORT_URL, QEXPORT_TOKEN). Bad input exits 2 with one line naming the option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qexport.store.deliveries import SqlDeliveryStore
from tests.e2e.conftest import Env
from tests.e2e.test_serve import SMALL_ORDERS, N, new_token, start_server


def _json(cli: Env, *args: str) -> Any:
    return json.loads(cli.run(*args, "--json").stdout)


def _delivered_to(env: Env, export_id: str) -> list[tuple[str, str, str]]:
    found = SqlDeliveryStore(env.store.engine).list_deliveries(export_id)
    return sorted((d.recipient.channel.value, d.recipient.target, d.status.value) for d in found)


def test_add_list_pause_resume_and_run_now_locally(env: Env) -> None:
    """A schedule added by query name lists with its next run in its time zone; paused it has
    none; resumed it has one again; run-now prints an export id whose export is the owner's,
    with one waiting delivery per recipient."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    created = _json(env, "schedules", "add", "small_orders", "--format", "csv",
                    "--cron", "0 8 * * 1", "--timezone", "Europe/Berlin",
                    "--email", "ops@example.com", "--webhook", "https://hooks.example.com/in",
                    "--param", "n=7", "--missed", "skip")  # fmt: skip
    assert created["cron"] == "0 8 * * 1"
    assert created["timezone"] == "Europe/Berlin"
    assert created["parameters"] == {"n": 7}
    assert created["missed"] == "skip"
    assert created["owner"] == "alice"
    assert created["next_run_at"].endswith(("T07:00:00Z", "T06:00:00Z"))  # 08:00 in Berlin
    schedule_id = created["id"]

    assert _json(env, "schedules", "list")["items"] == [created]
    table = env.run("schedules", "list").stdout
    assert "small_orders" in table
    assert schedule_id in table

    assert env.run("schedules", "pause", schedule_id).stdout.strip() == (
        f"schedule {schedule_id} paused"
    )
    assert _json(env, "schedules", "list")["items"][0]["next_run_at"] is None
    assert "paused" in env.run("schedules", "list").stdout
    resumed = env.run("schedules", "resume", schedule_id[:8]).stdout  # a start of the id will do
    assert f"schedule {schedule_id} resumed; next run at 20" in resumed
    short = env.run("schedules", "run-now", "ab", check=False)
    assert (short.returncode, short.stderr.strip()) == (
        2,
        "error: a schedule id prefix needs at least 4 characters, not 'ab'",
    )

    export_id = env.run("schedules", "run-now", schedule_id[:6]).stdout.strip()
    record = env.record(export_id)
    assert (record.requested_by, record.subject_name, record.parameters) == (
        "alice",
        "small_orders",
        {"n": 7},
    )
    assert _delivered_to(env, export_id) == [
        ("email", "ops@example.com", "waiting"),
        ("webhook", "https://hooks.example.com/in", "waiting"),
    ]
    by_prefix = json.loads(env.run("exports", "deliveries", export_id[:8], "--json").stdout)
    assert sorted(next(iter(d["recipient"])) for d in by_prefix["items"]) == ["email", "webhook"]
    assert len(env.run("schedules", "signing-key").stdout.strip()) == 64

    gone = env.run("schedules", "delete", schedule_id[:8]).stdout.strip()
    assert gone == f"deleted schedule {schedule_id}"
    assert _json(env, "schedules", "list")["items"] == []
    assert env.record(export_id).subject_name == "small_orders"  # its exports stay


BAD_OPTIONS = [
    (("--cron", "0 8 * *"), "--cron: cron '0 8 * *' must have 5 fields"),
    (("--timezone", "Mars/Olympus"), "--timezone: unknown time zone 'Mars/Olympus'"),
    (("--email", "ops at example.com"), "--email: 'ops at example.com' is not an email"),
    (("--webhook", "ftp://example.com/in"), "--webhook: 'ftp://example.com/in' is not an"),
    (("--slack", "http://hooks.slack.com/T/x"), "--slack: 'http://hooks.slack.com/***' is not"),
    (("--teams", "https://u:p@a.webhook.office.com/x"), "--teams: a Teams URL may not carry"),
    (("--missed", "all"), "--missed: unknown choice 'all' for missed runs"),
    (("--param", "m=1"), "--param m: unknown parameter 'm'"),
    (("--param", "n=many"), "--param n:"),
    (("--format", "pdf"), "--format: unknown format 'pdf'"),
    (("--report",), "--format: unknown report format 'csv'"),
]


def test_bad_input_exits_2_with_one_line(env: Env) -> None:
    """Each bad option exits 2 with one line on stderr naming it, and nothing is saved."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    base = {"--format": "csv", "--cron": "0 8 * * 1"}
    for args, message in BAD_OPTIONS:
        options = [item for key, value in base.items() if key not in args for item in (key, value)]
        proc = env.run("schedules", "add", "small_orders", *options, *args, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert message in proc.stderr
    assert _json(env, "schedules", "list")["items"] == []


SEVERAL_MISTAKES = ("--cron", "0 8", "--timezone", "Mars/Olympus", "--email", "ops at example.com")


def test_several_mistakes_are_refused_at_once_locally_and_through_a_server(
    env: Env, tmp_path: Path
) -> None:
    """A schedule with three mistakes is refused with all three, one line each in the order
    of the options, the same locally and through a server (exit 2); nothing is saved."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    local = env.run("schedules", "add", "small_orders", "--format", "csv", *SEVERAL_MISTAKES,
                    check=False)  # fmt: skip
    assert local.returncode == 2, local.stderr
    lines = local.stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["--cron", "--timezone", "--email"]
    assert all(line.startswith("error: ") for line in lines)
    assert _json(env, "schedules", "list")["items"] == []

    url, _ = start_server(env)
    editor = Env(
        tmp_path / "ed", {"QEXPORT_URL": url, "QEXPORT_TOKEN": new_token(env, "ed@example.com")}
    )
    remote = editor.run("schedules", "add", "small_orders", "--format", "csv", *SEVERAL_MISTAKES,
                        check=False)  # fmt: skip
    assert remote.returncode == 2, remote.stderr
    lines = remote.stderr.strip().splitlines()
    assert len(lines) == 3, remote.stderr
    assert "must have 5 fields" in lines[0]
    assert "Mars/Olympus" in lines[1]
    assert "ops at example.com" in lines[2]
    assert lines[2].endswith("(invalid_request)")
    assert _json(editor, "schedules", "list")["items"] == []


def test_unknown_schedules_and_subjects_are_refused(env: Env) -> None:
    """An unknown subject is bad input (2); pausing or running an unknown schedule fails (1);
    each with one line; `exports create --email` with a bad address is 2 as well."""
    proc = env.run("schedules", "add", "nope", "--format", "csv", "--cron", "0 8 * * 1",
                   check=False)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: no query 'nope' that you can read (not_found)"
    for command in ("pause", "resume", "run-now"):
        proc = env.run("schedules", command, "0000", check=False)
        assert proc.returncode == 1
        assert proc.stderr.strip() == "error: no schedule with this id that you can see"
    env.add_query("small_orders", SMALL_ORDERS, N)
    proc = env.run("exports", "create", "--query", "small_orders", "--format", "csv",
                   "--email", "nobody", check=False)  # fmt: skip
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "error: --email: 'nobody' is not an email address",
    )


def test_exports_create_with_email_and_webhook_notifies(env: Env) -> None:
    """`exports create --email --webhook` records a waiting delivery per recipient."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    created = _json(env, "exports", "create", "--query", "small_orders", "--format", "csv",
                    "--email", "me@example.com",
                    "--webhook", "https://hooks.test/hook")  # fmt: skip
    assert _delivered_to(env, created["id"]) == [
        ("email", "me@example.com", "waiting"),
        ("webhook", "https://hooks.test/hook", "waiting"),
    ]


def test_slack_and_teams_recipients_from_the_command_line(env: Env) -> None:
    """`schedules add --slack --teams` saves both; `exports create --slack` records a waiting
    Slack delivery."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    slack, teams = "https://hooks.slack.com/services/T/B/x", "https://a.webhook.office.com/w/y"
    created = _json(env, "schedules", "add", "small_orders", "--format", "csv",
                    "--cron", "0 8 * * 1", "--slack", slack, "--teams", teams)  # fmt: skip
    assert created["recipients"] == [{"slack": slack}, {"teams": teams}]
    export = _json(env, "exports", "create", "--query", "small_orders", "--format", "csv",
                   "--slack", slack)  # fmt: skip
    assert _delivered_to(env, export["id"]) == [("slack", slack, "waiting")]


def test_update_changes_only_what_it_is_given_locally(env: Env) -> None:
    """`schedules update` sets a file name template, a cron, parameters and recipients and
    keeps the rest; '' puts the template back to the query's; the next run-now export is
    named by the template; bad values exit 2 naming the option, an unknown schedule 1, and
    no option at all is refused."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    created = _json(env, "schedules", "add", "small_orders", "--format", "csv",
                    "--cron", "0 8 * * 1", "--timezone", "Europe/Berlin",
                    "--email", "ops@example.com")  # fmt: skip
    schedule_id = created["id"]
    changed = _json(env, "schedules", "update", schedule_id, "--filename", "weekly_{n}_{date}",
                    "--cron", "30 6 * * *", "--param", "n=3",
                    "--webhook", "https://hooks.example.com/in")  # fmt: skip
    assert changed["filename_template"] == "weekly_{n}_{date}"
    assert (changed["cron"], changed["parameters"]) == ("30 6 * * *", {"n": 3})
    assert changed["recipients"] == [{"webhook": "https://hooks.example.com/in"}]
    assert (changed["timezone"], changed["format"]) == ("Europe/Berlin", "csv")  # kept
    assert changed["next_run_at"] != created["next_run_at"]
    export_id = env.run("schedules", "run-now", schedule_id).stdout.strip()
    assert env.record(export_id).filename.startswith("weekly_3_20")
    said = env.run("schedules", "update", schedule_id, "--missed", "skip").stdout
    assert said.startswith(f"schedule {schedule_id} updated; next run at 20")
    reset = _json(env, "schedules", "update", schedule_id, "--filename", "", "--no-recipients")
    assert (reset["filename_template"], reset["recipients"], reset["missed"]) == (None, [], "skip")

    for args, message in (
        (("--filename", "{name}_{sinse}"), "--filename: unknown placeholder {sinse}"),
        (("--cron", "0 8"), "--cron: cron '0 8' must have 5 fields"),
        (("--format", "pdf"), "--format: unknown format 'pdf'"),
        (("--param", "m=1"), "--param m: unknown parameter 'm'"),
        ((), "nothing to change"),
    ):
        proc = env.run("schedules", "update", schedule_id, *args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert message in proc.stderr
    assert _json(env, "schedules", "list")["items"] == [reset]
    unknown = env.run("schedules", "update", "0000", "--cron", "0 9 * * *", check=False)
    assert (unknown.returncode, unknown.stderr.strip()) == (
        1,
        "error: no schedule with this id that you can see",
    )


def test_schedules_through_a_server(env: Env, tmp_path: Path) -> None:
    """Through QEXPORT_URL and QEXPORT_TOKEN: add (by query name), list, pause, resume and
    run-now as an editor; the signing key is refused to an editor (exit 1, one line) and
    given to an admin; a bad cron exits 2 with the server's reason."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    url, _ = start_server(env)
    editor = Env(
        tmp_path / "ed", {"QEXPORT_URL": url, "QEXPORT_TOKEN": new_token(env, "ed@example.com")}
    )
    created = _json(editor, "schedules", "add", "small_orders", "--format", "jsonl",
                    "--cron", "30 7 * * 1-5", "--timezone", "America/New_York",
                    "--webhook", "https://hooks.example.com/q")  # fmt: skip
    schedule_id = created["id"]
    query = env.store.find_query("demo", "small_orders")
    assert query is not None
    assert created["query_id"] == query.id
    assert [s["id"] for s in _json(editor, "schedules", "list")["items"]] == [schedule_id]
    listed = editor.run("schedules", "list").stdout
    assert "small_orders jsonl" in listed  # its name, as the local list shows it
    assert query.id not in listed
    editor.run("schedules", "pause", schedule_id[:8])
    assert _json(editor, "schedules", "list")["items"][0]["next_run_at"] is None
    editor.run("schedules", "resume", schedule_id)
    export_id = editor.run("schedules", "run-now", schedule_id).stdout.strip()
    assert _delivered_to(env, export_id) == [("webhook", "https://hooks.example.com/q", "waiting")]
    editor.run("schedules", "delete", schedule_id[:8])
    assert _json(editor, "schedules", "list")["items"] == []

    refused = editor.run("schedules", "signing-key", check=False)
    assert refused.returncode == 1
    assert "(forbidden)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    admin_token = new_token(env, "ad@example.com", "admin")
    admin = Env(tmp_path / "ad", {"QEXPORT_URL": url, "QEXPORT_TOKEN": admin_token})
    assert len(admin.run("schedules", "signing-key").stdout.strip()) == 64

    bad = editor.run("schedules", "add", "small_orders", "--format", "csv", "--cron", "0 8",
                     check=False)  # fmt: skip
    assert bad.returncode == 2
    assert "must have 5 fields" in bad.stderr
    assert "(invalid_request)" in bad.stderr


def test_update_through_a_server(env: Env, tmp_path: Path) -> None:
    """Through a server, `schedules update` PATCHes only the options given (a file name
    template the run-now export is named by, a cron, no formula neutralising); '' gives the
    template back to the query; a bad template is 2 with the server's reason; another
    editor is refused with 1, as pause is (their change is not saved)."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    url, _ = start_server(env)
    editor = Env(
        tmp_path / "ed", {"QEXPORT_URL": url, "QEXPORT_TOKEN": new_token(env, "ed@example.com")}
    )
    other = Env(
        tmp_path / "ot", {"QEXPORT_URL": url, "QEXPORT_TOKEN": new_token(env, "ot@example.com")}
    )
    created = _json(editor, "schedules", "add", "small_orders", "--format", "csv",
                    "--cron", "0 8 * * 1")  # fmt: skip
    schedule_id = created["id"]
    changed = _json(editor, "schedules", "update", schedule_id, "--filename", "orders_{n}",
                    "--cron", "0 9 * * 1", "--no-neutralize")  # fmt: skip
    assert (changed["filename_template"], changed["cron"]) == ("orders_{n}", "0 9 * * 1")
    assert changed["options"] == {"neutralize_formulas": False}
    assert (changed["format"], changed["timezone"]) == (created["format"], created["timezone"])
    export_id = editor.run("schedules", "run-now", schedule_id).stdout.strip()
    assert env.record(export_id).filename == "orders_100.csv"
    reset = _json(editor, "schedules", "update", schedule_id, "--filename", "")
    assert reset["filename_template"] is None

    bad = editor.run("schedules", "update", schedule_id, "--filename", "{nn}", check=False)
    assert bad.returncode == 2
    assert "unknown placeholder {nn}" in bad.stderr
    assert "(invalid_request)" in bad.stderr
    refused = other.run("schedules", "update", schedule_id, "--cron", "* * * * *", check=False)
    assert refused.returncode == 1
    assert "(forbidden)" in refused.stderr
    assert _json(editor, "schedules", "list")["items"][0]["cron"] == "0 9 * * 1"
