"""The CLI's exports commands as people use them: id prefixes, downloads to a file name or a
directory, `--wait`'s summary, the list at 80 columns and its filters, kinds in `--help`,
suggestions for a mistyped name; locally and through a server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from qexport.cli.downloads import plain_file_name
from qexport.store.tables.exports import exports
from tests.e2e.conftest import Env, wait_for
from tests.e2e.test_serve import SMALL_ORDERS, N, new_token, start_server
from tests.support.factories import new_export

ORDERS = "SELECT order_id, total FROM orders WHERE order_id <= $n ORDER BY order_id"


def _add_orders(env: Env) -> None:
    env.run("queries", "add", "orders", "--sql", ORDERS, "--param", "n:integer=100")


def _drain(env: Env) -> None:
    assert env.start_worker("--drain").wait(timeout=120) == 0


def _insert(env: Env, export_id: str, name: str = "orders") -> None:
    """An export of alice's with a chosen id (to make two ids share a start)."""
    new = replace(
        new_export(datetime.now(UTC), "demo"),
        id=export_id,
        requested_by="alice",
        subject_name=name,
        storage_key=f"exports/demo/{export_id}/orders.csv",
    )
    env.store.insert_export(new)


def _in(env: Env, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI run from `cwd` (where a download without -o lands)."""
    return subprocess.run(
        [sys.executable, "-m", "qexport", *args],
        env=env.environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_id_prefix_names_one_export_or_is_refused_like_git(env: Env) -> None:
    """A unique start works wherever an id is taken; an ambiguous one lists the candidates
    (exit 2); an unknown one says so (exit 1); fewer than 4 characters are refused."""
    _insert(env, "abcd1111-0000-4000-8000-000000000001")
    _insert(env, "abcd2222-0000-4000-8000-000000000002", name="refunds")
    shown = json.loads(env.run("exports", "get", "abcd1", "--json").stdout)
    assert shown["id"] == "abcd1111-0000-4000-8000-000000000001"
    ambiguous = env.run("exports", "get", "abcd", check=False)
    assert ambiguous.returncode == 2
    assert "export id 'abcd' is ambiguous" in ambiguous.stderr
    assert "abcd1111-0000-4000-8000-000000000001 (orders)" in ambiguous.stderr
    assert "abcd2222-0000-4000-8000-000000000002 (refunds)" in ambiguous.stderr
    unknown = env.run("exports", "cancel", "ffff0", check=False)
    assert unknown.returncode == 1
    assert "no export 'ffff0'" in unknown.stderr
    short = env.run("exports", "wait", "abc", check=False)
    assert short.returncode == 2
    assert "at least 4 characters" in short.stderr
    cancelled = env.run("exports", "cancel", "abcd2")
    assert "abcd2222-0000-4000-8000-000000000002 cancelled" in cancelled.stdout


def test_a_cancelled_export_reads_cancelled_as_in_the_pages(env: Env) -> None:
    """The list, `get` and `wait` say `cancelled` for an export its requester cancelled (the
    API's failed/cancelled, the pages' Cancelled badge), not `failed`."""
    _insert(env, "abcd3333-0000-4000-8000-000000000003")
    _insert(env, "abcd4444-0000-4000-8000-000000000004")
    env.run("exports", "cancel", "abcd3")
    listed = env.run("exports", "list").stdout.splitlines()
    statuses = {line.split()[0]: line.split()[1] for line in listed if line.startswith("abcd")}
    assert sorted(statuses.values()) == ["cancelled", "queued"]
    assert next(s for i, s in statuses.items() if i.startswith("abcd3")) == "cancelled"
    only = env.run("exports", "list", "--status", "cancelled").stdout
    assert "abcd3333" in only
    assert "abcd4444" not in only  # still queued
    shown = env.run("exports", "get", "abcd3").stdout
    assert re.search(r"^\s*status\s+cancelled\s*$", shown, re.M), shown
    assert "failure cancelled: " in " ".join(shown.split())
    waited = env.run("exports", "wait", "abcd3", check=False)
    assert waited.returncode == 1  # no file came of it
    assert "export abcd3333 cancelled" in waited.stdout
    assert "error:" not in waited.stderr


def test_download_goes_to_the_file_name_a_directory_and_never_over_a_file(
    env: Env, tmp_path: Path
) -> None:
    """Without -o the file lands under its own name here; `-o DIR` and `-o DIR/` put it in
    that directory; an existing file is refused without --force and replaced with it; a
    missing directory is one line, never a traceback."""
    _add_orders(env)
    created = json.loads(env.run("exports", "create", "--query", "orders", "--format", "csv",
                                 "--param", "n=7", "--json").stdout)  # fmt: skip
    _drain(env)
    name = created["filename"]
    assert name == f"orders_{datetime.now(UTC):%Y-%m-%d}.csv"
    here = tmp_path / "here"
    here.mkdir()
    first = _in(env, here, "exports", "download", created["id"][:8])
    assert first.returncode == 0, first.stderr
    assert len((here / name).read_text().splitlines()) == 8
    again = _in(env, here, "exports", "download", created["id"][:8])
    assert again.returncode == 2
    assert "already exists; pass --force to replace it" in again.stderr
    (here / name).write_text("old")
    forced = _in(env, here, "exports", "download", created["id"][:8], "--force")
    assert forced.returncode == 0
    assert (here / name).read_text() != "old"
    into = tmp_path / "into"
    into.mkdir()
    for target in (str(into), f"{into}/"):
        (into / name).unlink(missing_ok=True)
        env.run("exports", "download", created["id"], "-o", target)
        assert (into / name).exists()
    missing = env.run("exports", "download", created["id"], "-o", f"{tmp_path}/nowhere/",
                      check=False)  # fmt: skip
    assert missing.returncode == 2
    assert "no directory" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_create_wait_ends_with_rows_size_time_and_the_next_command(env: Env) -> None:
    """A waited-for export ends with its rows, size, time taken and the download command
    (with an id prefix that command takes); a failed one with its code and reason, exit 1."""
    _add_orders(env)
    env.start_worker(QEXPORT_POLL_SECONDS="0.1")
    done = env.run("exports", "create", "--query", "orders", "--format", "csv", "--param",
                   "n=42", "--wait")  # fmt: skip
    summary, hint = done.stdout.strip().splitlines()[-2:]
    assert " succeeded: 42 rows, " in summary
    assert " bytes in " in summary
    assert summary.split(" in ")[-1].split()[1] == "s"
    assert hint.startswith("download it: qexport exports download ")
    short = hint.rsplit(" ", 1)[1]
    assert json.loads(env.run("exports", "get", short, "--json").stdout)["row_count"] == 42
    env.add_query("typo", "SELEC 1")
    bad = env.run("exports", "create", "--query", "typo", "--format", "csv", "--wait",
                  check=False)  # fmt: skip
    assert bad.returncode == 1
    assert "failed (query_invalid)" in bad.stderr
    waited = env.run("exports", "wait", short)
    assert " succeeded: 42 rows, " in waited.stdout


def test_the_list_fits_80_columns_and_its_ids_are_accepted(env: Env) -> None:
    """At 80 columns every export is one line, long names cut rather than wrapped; the
    short ids shown are accepted by `exports get`; filters narrow the list."""
    env.add_query("a_query_with_a_rather_long_name_that_would_wrap_the_table", "SELECT 1 AS x")
    _add_orders(env)
    for fmt in ("csv", "jsonl", "parquet"):
        env.run("exports", "create", "--query", "orders", "--format", fmt)
    long_name = "a_query_with_a_rather_long_name_that_would_wrap_the_table"
    env.run("exports", "create", "--query", long_name, "--format", "csv")
    listed = env.run("exports", "list", check=True)
    narrow = subprocess.run(
        [sys.executable, "-m", "qexport", "exports", "list"],
        env={**env.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in narrow.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), narrow
    rows = [line for line in lines if " queued " in line]
    assert len(rows) == 4, narrow
    assert listed.returncode == 0
    short = rows[0].split()[0]
    assert 8 <= len(short) < 36
    assert json.loads(env.run("exports", "get", short, "--json").stdout)["status"] == "queued"
    parquet = env.json("exports", "list", "--format", "parquet")["items"]
    assert [i["format"] for i in parquet] == ["parquet"]
    by_name = env.json("exports", "list", "--search", "RATHER")["items"]
    assert len(by_name) == 1
    of_orders = env.json("exports", "list", "--subject", "orders", "--limit", "2")
    assert len(of_orders["items"]) == 2
    assert of_orders["next_cursor"]
    rest = env.json("exports", "list", "--subject", "orders", "--cursor", of_orders["next_cursor"])
    assert len(rest["items"]) == 1
    assert len(env.json("exports", "list", "--all")["items"]) == 4
    bad = env.run("exports", "list", "--status", "done", "--since", "soon", check=False)
    assert bad.returncode == 2
    assert "--status:" in bad.stderr
    assert "--since:" in bad.stderr


def test_help_shows_the_kind_of_every_value_and_no_kind_for_flags(env: Env) -> None:
    """Options that take a value show its kind (the global twins theirs: seconds, int);
    flags show none; --report no longer claims to be local only."""
    wide = {**env.environ, "COLUMNS": "120"}
    top = subprocess.run(
        [sys.executable, "-m", "qexport", "--help"], env=wide, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    assert "--lease-seconds          <seconds>" in top
    assert "--max-attempts           <int>" in top
    create = subprocess.run([sys.executable, "-m", "qexport", "exports", "create", "--help"],
                            env={**env.environ, "COLUMNS": "120"}, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    assert "<bool>" not in create
    assert "list[" not in create
    assert "--param" in create
    assert "<str>" in create
    assert "(local only)" not in create


def test_a_mistyped_query_name_gets_a_suggestion(env: Env) -> None:
    """`no query 'ordrs' ...; did you mean 'orders'?` for queries; a report title too."""
    _add_orders(env)
    proc = env.run("exports", "create", "--query", "ordrs", "--format", "csv", check=False)
    assert proc.returncode == 2
    assert "no query 'ordrs'" in proc.stderr
    assert "did you mean 'orders'?" in proc.stderr
    nothing = env.run("exports", "create", "--query", "zzzzzz", "--format", "csv", check=False)
    assert "did you mean" not in nothing.stderr


def test_prefixes_suggestions_and_downloads_through_a_server(
    env: Env, remote_cli: Env, tmp_path: Path
) -> None:
    """Through QEXPORT_URL: a prefix finds the caller's export, a typo gets a suggestion from
    the server's queries, and a download lands under the export's file name."""
    env.start_worker()
    created = json.loads(remote_cli.run("exports", "create", "--query", "small_orders", "--format",
                                    "csv", "--param", "n=5", "--json").stdout)  # fmt: skip
    done = remote_cli.run("exports", "wait", created["id"][:8])
    assert " succeeded: 5 rows, " in done.stdout
    typo = remote_cli.run("exports", "create", "--query", "smal_orders", "--format", "csv",
                      check=False)  # fmt: skip
    assert typo.returncode == 2
    assert "did you mean 'small_orders'?" in typo.stderr
    unknown = remote_cli.run("exports", "get", "ffff0", check=False)
    assert unknown.returncode == 1
    assert "no export 'ffff0'" in unknown.stderr
    here = tmp_path / "dl"
    here.mkdir()
    got = _in(remote_cli, here, "exports", "download", created["id"][:8])
    assert got.returncode == 0, got.stderr
    assert (here / created["filename"]).exists()
    refused = _in(remote_cli, here, "exports", "download", created["id"][:8])
    assert refused.returncode == 2
    assert "already exists" in refused.stderr


def test_a_prefix_of_someone_elses_export_is_no_export_through_a_server(
    env: Env, remote_cli: Env
) -> None:
    """Through a server, a prefix resolves among the caller's own exports only: one that
    starts only others' exports (even several) is "no export", naming none of their ids; a
    prefix shared with someone else's export is not ambiguous; their full id is not found."""
    mine = remote_cli.json("exports", "create", "--query", "small_orders", "--format", "csv")
    _insert(env, "beef0001-0000-4000-8000-000000000001")  # alice's, not the client's
    _insert(env, "beef0002-0000-4000-8000-000000000002")
    _insert(env, "cafe0001-0000-4000-8000-000000000001")
    own = replace(
        new_export(datetime.now(UTC), "demo"),
        id="cafe0002-0000-4000-8000-000000000002",
        requested_by=mine["requested_by"],
        storage_key="exports/demo/cafe0002-0000-4000-8000-000000000002/orders.csv",
    )
    env.store.insert_export(own)
    for command in ("get", "wait", "download", "cancel"):
        theirs = remote_cli.run("exports", command, "beef", check=False)
        assert theirs.returncode == 1, (command, theirs.stderr)
        assert theirs.stderr.strip() == "error: no export 'beef'"
    shown = remote_cli.json("exports", "get", "cafe")
    assert shown["id"] == own.id
    full = remote_cli.run("exports", "get", "beef0001-0000-4000-8000-000000000001", check=False)
    assert full.returncode == 1
    assert full.stderr.strip().endswith("(not_found)")
    listed = {i["id"] for i in remote_cli.json("exports", "list", "--all")["items"]}
    assert listed == {mine["id"], own.id}


def _rename(env: Env, export_id: str, filename: str) -> None:
    """Give a record a file name qexport would never make (a hostile or broken server's)."""
    with env.store.engine.begin() as conn:
        conn.execute(sa.update(exports).where(exports.c.id == export_id).values(filename=filename))


@pytest.mark.parametrize("where", ["local", "server"])
def test_an_exports_own_file_name_never_leaves_the_target_directory(
    env: Env, tmp_path: Path, where: str
) -> None:
    """A record whose file name has `../` or `/` in it (qexport never makes one; a server
    could send one) is written inside the directory asked for, or the current one, under
    that name made safe; nothing is written anywhere else. `-o` naming a file elsewhere is
    the user's own choice and is honoured."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    cli = env
    if where == "server":
        url, _ = start_server(env)
        token = new_token(env, "ann@example.com")
        cli = Env(tmp_path / "client", {"QEXPORT_URL": url, "QEXPORT_TOKEN": token})
    outside = tmp_path / "abs" / "x.csv"  # an absolute path as the name
    absolute = plain_file_name(str(outside))
    assert absolute.endswith("-abs-x.csv")
    assert "/" not in absolute
    named = {}
    for hostile, safe in (("../../escaped.csv", "escaped.csv"), (str(outside), absolute)):
        created = cli.json("exports", "create", "--query", "small_orders", "--format", "csv")
        _rename(env, created["id"], hostile)  # while queued: a settled record never changes
        named[created["id"]] = safe
    _drain(env)
    into = tmp_path / "a" / "b" / "into"
    into.mkdir(parents=True)
    for export_id, safe in named.items():
        got = cli.run("exports", "download", export_id, "-o", str(into))
        assert (into / safe).exists(), got.stderr
        here = _in(cli, into, "exports", "download", export_id, "--force")
        assert here.returncode == 0, here.stderr
    assert sorted(p.name for p in into.iterdir()) == sorted(["escaped.csv", absolute])
    assert not (tmp_path / "a" / "escaped.csv").exists()
    assert not (tmp_path / "escaped.csv").exists()
    assert not outside.exists()
    chosen = tmp_path / "elsewhere.csv"
    cli.run("exports", "download", next(iter(named)), "-o", str(chosen))
    assert chosen.exists()


def test_a_newcomer_is_told_where_to_start(env: Env, tmp_path: Path) -> None:
    """In a data dir with nothing in it: the empty list says how to request an export, an
    unknown query says there are none yet and how to add one, a command without an id says
    where ids are (exit 2); a list that nothing matches says so; `--wait` with no worker
    running says that a worker must take the export, and ends once one does."""
    empty = env.run("exports", "list").stdout
    assert "no exports yet; request one: qexport exports create --query NAME" in empty
    none = env.run("exports", "create", "--query", "orders", "--format", "csv", check=False)
    assert none.returncode == 2
    assert "there are no queries you can read yet: add one with qexport queries add" in (
        none.stderr
    )
    for command in ("get", "wait", "download", "cancel"):
        bare = env.run("exports", command, check=False)
        assert bare.returncode == 2, command
        assert "which export? give its id or the start of it; `qexport exports list`" in (
            bare.stderr
        )
    _add_orders(env)
    assert (
        "no exports match these filters" in env.run("exports", "list", "--status", "failed").stdout
    )
    errors = tmp_path / "wait.err"
    with errors.open("w") as stderr:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "qexport", "exports", "create", "--query", "orders",
             "--format", "csv", "--wait"],
            env=env.environ, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    env.procs.append(waiting)  # type: ignore[arg-type]
    wait_for(lambda: "is still queued: it starts when a worker takes it" in errors.read_text())
    env.start_worker(QEXPORT_POLL_SECONDS="0.1")
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0
    assert " succeeded: 100 rows, " in out


def test_links_are_made_listed_and_revoked_locally(env: Env) -> None:
    """The local command line makes, lists and revokes public links in its database as a
    server does, recorded in the trail as the operator acting for the requester. It makes
    them for QEXPORT_PUBLIC_BASE_URL, and none without it (no URL anyone could open)."""
    _add_orders(env)
    created = json.loads(env.run("exports", "create", "--query", "orders", "--format", "csv",
                                 "--param", "n=5", "--json").stdout)  # fmt: skip
    _drain(env)
    nowhere = env.run("links", "create", created["id"][:8], check=False)
    assert nowhere.returncode == 2
    assert "set QEXPORT_PUBLIC_BASE_URL" in nowhere.stderr
    env.extra["QEXPORT_PUBLIC_BASE_URL"] = "http://127.0.0.1:9"  # never opened here
    later = json.loads(env.run("exports", "create", "--query", "orders", "--format", "csv",
                               "--param", "n=5", "--json").stdout)  # fmt: skip
    early = env.run("links", "create", later["id"][:8], check=False)
    assert early.returncode == 1  # not ready: no file to link to yet
    made = json.loads(env.run("links", "create", created["id"][:8], "--days", "1", "--json").stdout)
    assert made["url"].startswith("http://127.0.0.1:9/p/")
    listed = json.loads(env.run("links", "list", created["id"], "--json").stdout)["items"]
    assert [i["id"] for i in listed] == [made["id"]]
    assert made["url"] not in json.dumps(listed)
    assert env.run("links", "revoke", made["id"]).stdout.strip() == f"link {made['id']} revoked"
    assert json.loads(env.run("links", "list", created["id"], "--json").stdout)["items"] == []
    missing = env.run("links", "revoke", "no-such-link", check=False)
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        "error: no link 'no-such-link' (not_found)",
    )
    trail = json.loads(env.run("audit", "list", "--json").stdout)["items"]
    kinds = {(e["action"], e["actor"]["kind"]) for e in trail}
    assert {("link.created", "operator"), ("link.revoked", "operator")} <= kinds
