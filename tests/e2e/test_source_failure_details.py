"""A source that cannot be opened or reached, as a viewer meets it through a real `qexport
serve` and `qexport worker`: the preview's problem and the export's failure (its detail, its
events, the stored record) say what is wrong and what to do, without the file's path, the
server's address and port, or the process holding the file; the operator's log (the server's
and the worker's) has those, with the source's name.

The three ways in: a DuckDB file another process holds open for writing, and a PostgreSQL
and a MariaDB source whose port on 127.0.0.1 nobody listens on.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx2
import pytest

from tests.e2e.conftest import Env
from tests.e2e.test_serve import bearer, free_port, new_token, start_server

PASSWORD = "Pa55-w0rd-never-shown"  # noqa: S105 - a made-up password, to show it never leaks

TEMP = tempfile.gettempdir() + "/"  # where the tests' files (and the DuckDB file) are

# Holds the file open for writing until its stdin closes, as a program updating it would.
_HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
"""


@dataclass(frozen=True)
class Broken:
    """A source that fails to open, what members must not read, and what the log must say."""

    name: str
    url: str
    port: int | None  # a server's (a DuckDB file has none)
    hidden: tuple[str, ...]  # in no member's text; every one in the log
    told: str  # what members read instead


@pytest.fixture
def locked_duckdb(tmp_path: Path) -> Iterator[Broken]:
    """A DuckDB file a writer process holds (its PID is in DuckDB's own message)."""
    path = tmp_path / "held" / "shop.duckdb"
    path.parent.mkdir()
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE orders AS SELECT 1 AS id")
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        hidden = (str(path), f"PID {holder.pid}", "Conflicting lock")
        yield Broken("shop", f"duckdb://{path}", None, hidden, "another process holds its file")
        holder.stdin.close()  # the holder lets go and exits; leaving the block waits for it


@pytest.fixture
def closed_postgresql() -> Broken:
    port = free_port()  # bound, then let go: nobody listens there
    url = f"postgresql://reader:{PASSWORD}@127.0.0.1:{port}/sales"
    return Broken(
        "pg", url, port, ("127.0.0.1", f"port {port}"), "cannot be reached: connection refused"
    )


@pytest.fixture
def closed_mariadb() -> Broken:
    pytest.importorskip("MySQLdb")
    port = free_port()
    url = f"mysql://reader:{PASSWORD}@127.0.0.1:{port}/sales"
    return Broken("maria", url, port, ("127.0.0.1",), "cannot be reached: connection refused")


@pytest.fixture(params=["locked_duckdb", "closed_postgresql", "closed_mariadb"])
def broken(request: pytest.FixtureRequest) -> Broken:
    found: Broken = request.getfixturevalue(request.param)
    return found


def _assert_withheld(text: str, broken: Broken) -> None:
    """Nothing of where the source is in `text` (a response's body, a stored detail)."""
    for secret in (*broken.hidden, PASSWORD, TEMP, "python", "127.0.0.1", "PID"):
        assert secret not in text, f"{secret!r} in {text!r}"
    if broken.port is not None:
        for form in (f":{broken.port}", f"port {broken.port}", f"({broken.port})"):
            assert form not in text, f"{form!r} in {text!r}"


def _logged(log_file: Path, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of `event` in a process's log (lines that are not JSON skipped)."""
    found = []
    for line in log_file.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                found.append(record)
    return found


def test_members_read_what_is_wrong_and_the_log_says_where(env: Env, broken: Broken) -> None:
    """A viewer's preview answers 503 source_unavailable, and their export fails
    source_unavailable, each saying what is wrong and to ask the operator, with no path,
    address, port or PID (nor in the export's events and stored record); the server's log and
    the worker's name the source and give the library's full reason, which has them."""
    env.extra.update(
        {
            f"QEXPORT_SOURCE_{broken.name.upper()}": broken.url,
            f"QEXPORT_SOURCE_{broken.name.upper()}_WORKSPACES": "demo",
            "QEXPORT_MAX_ATTEMPTS": "1",
        }
    )
    env.add_query("broken", "SELECT 1 AS one", source=broken.name)
    url, _server = start_server(env)
    token = new_token(env, "vic@example.com", role="viewer")
    with httpx2.Client(base_url=url, headers=bearer(token), timeout=60) as api:
        query_id = api.get("/api/v1/queries").json()["items"][0]["id"]
        preview = api.post(f"/api/v1/queries/{query_id}/preview", json={})
        assert preview.status_code == 503, preview.text
        problem = preview.json()
        assert problem["code"] == "source_unavailable"
        assert broken.told in problem["detail"]
        assert "ask the operator" in problem["detail"]
        _assert_withheld(preview.text, broken)

        created = api.post(
            "/api/v1/exports", json={"query_id": query_id, "format": "csv", "parameters": {}}
        )
        assert created.status_code == 202, created.text
        export_id = created.json()["id"]
        assert env.start_worker("--drain").wait(timeout=120) == 0
        export = api.get(f"/api/v1/exports/{export_id}")
        failure = export.json()["failure"]
        assert (export.json()["status"], failure["code"]) == ("failed", "source_unavailable")
        assert broken.told in failure["detail"]
        _assert_withheld(export.text, broken)
        events = api.get(f"/api/v1/exports/{export_id}/events")
        assert events.status_code == 200, events.text
        _assert_withheld(events.text, broken)
    stored = env.record(export_id)
    _assert_withheld(f"{stored.failure_detail} {stored.last_error_detail}", broken)

    for log_file in (*env.data_dir.glob("serve-*.log"), *env.data_dir.glob("worker-*.log")):
        lines = _logged(log_file, "source_connect_failed")
        assert lines, log_file.read_text()
        assert {line["source"] for line in lines} == {broken.name}
        for hidden in broken.hidden:
            assert all(hidden in line["reason"] for line in lines), (hidden, lines)
        assert PASSWORD not in log_file.read_text()
