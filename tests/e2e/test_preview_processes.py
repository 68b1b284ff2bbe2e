"""Previews run where their memory is bounded, against a real `qexport serve`: the statement
that grew an API process from 218 to 2,126 MiB fails 422 `limit_exceeded` naming the limit,
the server's own memory stays put and its next preview works; and when the server stops, no
process it started for previews is left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx2

from tests.e2e.conftest import Env, wait_for
from tests.e2e.test_serve import SMALL_ORDERS, N, bearer, new_token, start_server

HUGE = "SELECT length(repeat('x', 1000000000)) AS n"
MIB = 1024**2


def _memory(pid: int) -> dict[str, int]:
    """A process's resident size now (VmRSS) and at its highest (VmHWM), in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


def _descendants(pid: int) -> set[int]:
    """Every living process below `pid`, through any chain of parents."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    """Running, or a zombie nobody reaped (either would be left behind)."""
    return Path(f"/proc/{pid}").exists()


def test_a_preview_past_its_memory_fails_clearly_and_the_server_does_not_grow(env: Env) -> None:
    """`repeat('x', 1e9)`: 422 limit_exceeded naming QEXPORT_PREVIEW_MAX_MEMORY; saving it
    (described by its source, which folds the constant as it plans) is done in a preview
    process too; meanwhile the server process's resident size (now, and at its highest)
    grows by less than 64 MiB. A normal preview right after answers its rows; the previews
    ran in processes below the server, none of which outlives it once it stops."""
    env.add_query("huge", HUGE)
    env.add_query("small_orders", SMALL_ORDERS, N)
    url, proc = start_server(env, "--workers", "1")
    token = new_token(env, "ann@example.com")
    with httpx2.Client(base_url=url, headers=bearer(token), timeout=60) as api:
        queries = {q["name"]: q["id"] for q in api.get("/api/v1/queries").json()["items"]}

        def preview(name: str) -> httpx2.Response:
            path = f"/api/v1/queries/{queries[name]}/preview"
            return api.post(path, json={"parameters": {"n": 3}} if name != "huge" else {})

        warm = preview("small_orders")  # the preview process is started, its source opened
        assert warm.status_code == 200, warm.text
        before = _memory(proc.pid)
        refused = preview("huge")
        saved = api.post("/api/v1/queries", json={"name": "huge2", "sql": HUGE, "source": "demo"})
        after = _memory(proc.pid)
        assert saved.status_code == 201, saved.text  # described in a preview process too
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["code"] == "limit_exceeded"
        assert "QEXPORT_PREVIEW_MAX_MEMORY" in problem["detail"]
        assert after["VmRSS"] - before["VmRSS"] < 64 * MIB
        assert after["VmHWM"] - before["VmHWM"] < 64 * MIB
        again = preview("small_orders")
        assert again.status_code == 200, again.text
        assert [row[0] for row in again.json()["rows"]] == [1, 2, 3]
    below = _descendants(proc.pid)
    assert below, "the previews ran in processes of the server's, not in the server"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    wait_for(lambda: not any(_alive(pid) for pid in below), timeout=30)


def test_a_killed_preview_process_is_replaced_and_reaped(env: Env) -> None:
    """A preview process killed outright (as the kernel's out-of-memory killer would) is
    neither left a zombie nor in the way: the next preview starts another and answers."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    url, proc = start_server(env, "--workers", "1")
    token = new_token(env, "ann@example.com")
    with httpx2.Client(base_url=url, headers=bearer(token), timeout=60) as api:
        query_id = next(
            q["id"]
            for q in api.get("/api/v1/queries").json()["items"]
            if q["name"] == "small_orders"
        )
        path = f"/api/v1/queries/{query_id}/preview"
        assert api.post(path, json={}).status_code == 200
        workers = _preview_processes(proc.pid)
        assert workers
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(_alive(pid) for pid in workers), timeout=30)
        again = api.post(path, json={"parameters": {"n": 2}})
        assert again.status_code == 200, again.text
        assert again.json()["row_count"] == 2
        assert _preview_processes(proc.pid) - workers


def _preview_processes(server: int) -> set[int]:
    """The server's preview processes: its descendants that are the forkserver's children."""
    below = _descendants(server)
    forkservers = {pid for pid in below if b"forkserver" in _cmdline(pid)}
    return {pid for pid in below if _parent(pid) in forkservers}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])
