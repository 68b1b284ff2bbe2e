"""The CLI's `exports` commands against a running `qexport serve`, through QEXPORT_URL and
QEXPORT_TOKEN (or --url and --token): same output as locally, errors as one line with the
problem's code."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

from qexport.domain.reports import Report, Section
from tests.e2e.conftest import Env
from tests.e2e.test_serve import free_port


def _json(cli: Env, *args: str) -> Any:
    return json.loads(cli.run(*args, "--json").stdout)


def test_request_wait_list_get_and_download_through_the_server(
    env: Env, remote_cli: Env, tmp_path: Path
) -> None:
    """A query named on the command line is found on the server; the export is waited for,
    listed, shown and downloaded (checked against its sha256), and the client's own data dir
    is never created."""
    env.start_worker()
    created = _json(remote_cli, "exports", "create", "--query", "small_orders", "--format", "csv",
                    "--param", "n=250")  # fmt: skip
    assert created["status"] == "queued"
    assert created["subject"]["name"] == "small_orders"
    done = _json(remote_cli, "exports", "wait", created["id"])
    assert done["status"] == "succeeded"
    assert done["row_count"] == 250
    assert [i["id"] for i in _json(remote_cli, "exports", "list")["items"]] == [created["id"]]
    assert _json(remote_cli, "exports", "get", created["id"]) == done
    table = remote_cli.run("exports", "get", created["id"]).stdout
    assert "succeeded" in table
    assert "query small_orders" in table

    out = tmp_path / "orders.csv"
    proc = remote_cli.run("exports", "download", created["id"], "-o", str(out))
    assert hashlib.sha256(out.read_bytes()).hexdigest() == done["sha256"]
    assert f"sha256 {done['sha256']}" in proc.stderr
    piped = remote_cli.run("exports", "download", created["id"], "-o", "-").stdout
    assert len(piped.splitlines()) == 251
    assert not remote_cli.data_dir.exists()


def test_create_by_query_id_and_wait_in_one_command(env: Env, remote_cli: Env) -> None:
    """`--query` also takes the query's id; `--wait` prints the settled export."""
    env.start_worker()
    query = env.store.find_query("demo", "small_orders")
    assert query is not None
    done = _json(
        remote_cli, "exports", "create", "--query", query.id, "--format", "jsonl", "--wait"
    )
    assert done["status"] == "succeeded"
    assert done["row_count"] == 100


def test_cancel_through_the_server(remote_cli: Env) -> None:
    """A queued export (no worker runs) is cancelled; cancelling it again is refused with the
    conflict code."""
    created = _json(remote_cli, "exports", "create", "--query", "small_orders", "--format", "csv")
    proc = remote_cli.run("exports", "cancel", created["id"])
    assert proc.stdout.strip() == f"export {created['id']} cancelled"
    assert _json(remote_cli, "exports", "get", created["id"])["failure"]["code"] == "cancelled"
    shown = remote_cli.run("exports", "get", created["id"]).stdout
    assert "status cancelled" in " ".join(shown.split())  # as the local CLI and the pages say
    again = remote_cli.run("exports", "cancel", created["id"], check=False)
    assert again.returncode == 1
    assert "(conflict)" in again.stderr


MISSING = "00000000-0000-0000-0000-000000000000"
REFUSALS = [
    (["create", "--query", "small_orders", "--format", "docx"], 2, "invalid_request"),
    (["create", "--query", "small_orders", "--format", "csv", "--param", "n=ten"], 2,
     "invalid_request"),
    (["create", "--query", "nope", "--format", "csv"], 2, "not_found"),
    (["get", MISSING], 1, "not_found"),
    (["get", "../../queries"], 1, "not_found"),
    (["wait", MISSING], 1, "not_found"),
    (["download", MISSING, "-o", "x.csv"], 1, "not_found"),
]  # fmt: skip


def test_refusals_are_one_line_with_the_code(remote_cli: Env) -> None:
    """The server's problem document is printed as one line ending with its code, and the
    exit code says whether the request itself was at fault (2) or not (1)."""
    for args, exit_code, code in REFUSALS:
        proc = remote_cli.run("exports", *args, check=False)
        assert proc.returncode == exit_code, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, (args, proc.stderr)
        assert lines[0].startswith("error: "), args
        assert lines[0].endswith(f"({code})"), (args, lines[0])


def test_a_download_that_is_not_ready_is_refused(remote_cli: Env, tmp_path: Path) -> None:
    """A queued export's file: 409 not_ready, and no file is left behind."""
    created = _json(remote_cli, "exports", "create", "--query", "small_orders", "--format", "csv")
    out = tmp_path / "early.csv"
    proc = remote_cli.run("exports", "download", created["id"], "-o", str(out), check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith("(not_ready)")
    assert not out.exists()
    assert list(tmp_path.glob(".early.csv*")) == []


def test_a_bad_token_or_a_missing_server(remote_cli: Env) -> None:
    """A malformed token gets unauthorized; a server that is not there is named as
    unreachable; a URL without a token is a usage error."""
    url = remote_cli.extra["QEXPORT_URL"]
    bad = Env(remote_cli.data_dir, {"QEXPORT_URL": url, "QEXPORT_TOKEN": "qx_" + "0" * 16 + "_x"})
    proc = bad.run("exports", "list", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith("(unauthorized)")
    proc = bad.run("exports", "create", "--query", "small_orders", "--format", "csv", check=False)
    assert proc.returncode == 1  # a bad token is not a mistake in the request's values
    assert proc.stderr.strip().endswith("(unauthorized)")

    gone = f"http://127.0.0.1:{free_port()}"
    down = Env(remote_cli.data_dir, {**remote_cli.extra, "QEXPORT_URL": gone})
    proc = down.run("exports", "list", check=False)
    assert proc.returncode == 1
    assert f"cannot reach {gone}" in proc.stderr
    assert proc.stderr.strip().endswith("(unreachable)")

    half = Env(remote_cli.data_dir, {"QEXPORT_URL": url})
    proc = half.run("exports", "list", check=False)
    assert proc.returncode == 2
    assert "QEXPORT_TOKEN" in proc.stderr


def test_url_and_token_options(remote_cli: Env) -> None:
    """--url and --token on the command line do what the variables do."""
    url, token = remote_cli.extra["QEXPORT_URL"], remote_cli.extra["QEXPORT_TOKEN"]
    plain = Env(remote_cli.data_dir)
    proc = plain.run("--url", url, "--token", token, "exports", "list", "--json")
    assert json.loads(proc.stdout) == {"items": [], "next_cursor": None}


def test_a_report_by_title_through_the_server(env: Env, remote_cli: Env, tmp_path: Path) -> None:
    """`exports create --report TITLE` finds the report on the server and requests it; the
    document is waited for and downloaded like any export."""
    query = env.store.find_query("demo", "small_orders")
    assert query is not None
    env.store.add_report(
        Report(
            id=str(uuid.uuid4()),
            workspace_id="demo",
            title="Small report",
            sections=(Section("First orders", query.id, {"n": "7"}),),
        )
    )
    env.start_worker()
    done = _json(remote_cli, "exports", "create", "--report", "Small report", "--format", "html",
                 "--wait")  # fmt: skip
    assert done["status"] == "succeeded"
    assert done["subject"] == {
        "type": "report",
        "id": done["subject"]["id"],
        "name": "Small report",
    }
    assert done["row_count"] == 7
    out = tmp_path / "report.html"
    remote_cli.run("exports", "download", done["id"], "-o", str(out))
    assert "First orders" in out.read_text()


def _fetch(url: str) -> tuple[int, bytes]:
    import httpx2

    response = httpx2.get(url, timeout=30)
    return response.status_code, response.content


def test_links_through_the_server(env: Env, remote_cli: Env) -> None:
    """`links create` prints a public URL that serves the file without a token; `links list`
    shows it without its URL; after `links revoke` the URL serves nothing."""
    env.start_worker()
    created = _json(remote_cli, "exports", "create", "--query", "small_orders", "--format", "csv",
                    "--param", "n=5", "--wait")  # fmt: skip
    made = remote_cli.run("links", "create", created["id"][:8]).stdout.splitlines()
    url = made[0]
    assert url.startswith(("http://127.0.0.1:", "http://localhost:"))
    assert "/p/" in url
    status, body = _fetch(url)
    assert status == 200
    assert body.startswith(b"order_id")  # the file's header row
    listed = _json(remote_cli, "links", "list", created["id"][:8])["items"]
    assert len(listed) == 1
    assert url not in json.dumps(listed)  # the token is shown only once
    link_id = listed[0]["id"]
    assert made[1].startswith(f"link {link_id}, until ")
    assert remote_cli.run("links", "revoke", link_id).stdout.strip() == f"link {link_id} revoked"
    assert _fetch(url)[0] != 200
    assert _json(remote_cli, "links", "list", created["id"])["items"] == []
