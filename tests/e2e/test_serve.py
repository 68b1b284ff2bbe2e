"""`qexport serve` and `qexport demo --serve` as subprocesses, used over HTTP like curl would."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx2

from qexport.domain.queries import Parameter, ParamType
from tests.e2e.conftest import Env, wait_for
from tests.support import procfs

SMALL_ORDERS = "SELECT order_id, total FROM orders WHERE order_id <= $n ORDER BY order_id"
N = Parameter("n", ParamType.INTEGER, required=False, default="100")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=2).status_code == 200
    except httpx2.TransportError:
        return False


def start_server(env: Env, *args: str) -> tuple[str, subprocess.Popen[bytes]]:
    """`qexport serve` (with `args`) on a free port of this machine, on the env's data dir,
    answering."""
    port = free_port()
    log_path = env.data_dir / f"serve-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qexport", "serve", "--port", str(port), *args],
            env=env.environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    env.procs.append(proc)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"qexport serve exited {proc.returncode}: {log_path.read_text()}")
        return _answers(f"{url}/healthz")

    wait_for(up, timeout=60, interval=0.1)
    return url, proc


def new_token(env: Env, email: str, role: str = "editor") -> str:
    """An account in workspace `demo` (the e2e requester's) and a token for it, by the CLI."""
    env.run("users", "create", email, "--workspace", "demo", "--role", role)
    return env.run("tokens", "create", email).stdout.strip()


def settled(api: httpx2.Client, location: str) -> dict[str, Any]:
    """Poll an export (as a client would) until it succeeded or failed."""

    def poll() -> dict[str, Any] | None:
        export: dict[str, Any] = api.get(location).json()
        return export if export["status"] in ("succeeded", "failed") else None

    found: dict[str, Any] = wait_for(poll, timeout=120, interval=0.1)
    return found


def test_serve_answers_health_readiness_and_openapi(env: Env) -> None:
    """The server answers the operations endpoints without a token, publishes its OpenAPI
    schema, logs one line with its URL, and exits 0 on SIGTERM."""
    url, proc = start_server(env)
    assert httpx2.get(f"{url}/healthz").json() == {"status": "ok"}
    ready = httpx2.get(f"{url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "schema": "ok", "storage": "ok"}
    schema = httpx2.get(f"{url}/openapi.json").json()
    assert "/api/v1/exports" in schema["paths"]
    metrics = httpx2.get(f"{url}/metrics")
    assert 'qexport_exports{status="queued"} 0.0' in metrics.text
    assert httpx2.get(f"{url}/api/v1/exports").status_code == 401
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    log = next(env.data_dir.glob("serve-*.log")).read_text()
    assert url in log


def test_a_curl_session_with_a_worker(env: Env) -> None:
    """Create a token, request an export, poll until it succeeded, download it and check its
    sha256, share it through a public link fetched without a token."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    env.start_worker()
    url, _ = start_server(env)
    token = new_token(env, "ann@example.com")
    with httpx2.Client(base_url=url, headers=bearer(token), timeout=30) as api:
        _session(api, url)


def _session(api: httpx2.Client, url: str) -> None:
    queries = api.get("/api/v1/queries").json()["items"]
    query_id = next(q["id"] for q in queries if q["name"] == "small_orders")
    created = api.post(
        "/api/v1/exports",
        json={"query_id": query_id, "format": "csv", "parameters": {"n": 500}},
    )
    assert created.status_code == 202, created.text
    location = created.headers["Location"]
    export = settled(api, location)
    assert export["status"] == "succeeded", export
    assert export["row_count"] == 500

    file = api.get(f"{location}/file")
    assert file.status_code == 200
    assert hashlib.sha256(file.content).hexdigest() == export["sha256"]
    assert re.search(
        r"filename=\"small_orders_\d{4}-\d{2}-\d{2}\.csv\"", file.headers["Content-Disposition"]
    )

    link = api.post(f"{location}/links")
    assert link.status_code == 201, link.text
    assert link.json()["url"].startswith(f"{url}/p/")
    public = httpx2.get(link.json()["url"], timeout=30)  # no token
    assert public.status_code == 200
    assert public.content == file.content
    assert 'qexport_exports{status="succeeded"} 1.0' in httpx2.get(f"{url}/metrics").text


def test_serve_with_two_workers_shares_tokens_sessions_and_links(env: Env) -> None:
    """`serve --workers 2` runs two server processes on one port; a client that opens a new
    connection for every request (so either process may answer any of them) uses a token,
    downloads and shares an export, signs in to the pages and signs out with the form's
    CSRF token; SIGTERM stops both servers and the command exits 0."""
    env.add_query("small_orders", SMALL_ORDERS, N)
    env.start_worker()
    password = subprocess.run(
        [sys.executable, "-m", "qexport", "users", "create", "ada@example.com",
         "--workspace", "demo", "--role", "admin", "--password-stdin"],
        env=env.environ, input="a long enough password\n", capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert password.returncode == 0, password.stderr
    url, proc = start_server(env, "--workers", "2")
    assert len(procfs.children(proc.pid)) == 2
    token = new_token(env, "ann@example.com")
    fresh = httpx2.Limits(max_keepalive_connections=0)
    with httpx2.Client(base_url=url, headers=bearer(token), timeout=30, limits=fresh) as api:
        _session(api, url)
    with httpx2.Client(base_url=url, timeout=30, limits=fresh) as browser:
        form = browser.get("/sign-in", headers={"Accept": "text/html"}).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf
        data = {"email": "ada@example.com", "password": "a long enough password"}
        signed_in = browser.post("/sign-in", data={**data, "csrf": csrf.group(1), "next": "/"})
        assert signed_in.status_code == 303, signed_in.text
        for _ in range(6):
            page = browser.get("/")
            assert page.status_code == 200
            assert "ada@example.com · demo (admin)" in page.text
        page_csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page_csrf
        out = browser.post("/sign-out", data={"csrf": page_csrf.group(1)})
        assert out.status_code == 303
        assert browser.get("/").status_code == 303
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_the_servers_end_when_serve_is_killed_outright(env: Env) -> None:
    """SIGKILL to `serve --workers 2` (the OOM killer, a process manager's last resort) ends
    its two server processes too: none is left holding the port."""
    url, proc = start_server(env, "--workers", "2")
    children = procfs.children(proc.pid)
    assert len(children) == 2
    proc.kill()
    proc.wait(timeout=30)

    def gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() for pid in children)

    wait_for(gone, timeout=30, interval=0.1)
    assert not _answers(f"{url}/healthz")


def test_a_second_serve_on_the_same_port_is_refused(env: Env) -> None:
    """A second `serve --workers 2` on a port that one already serves exits at once with the
    reason, instead of joining the port (SO_REUSEPORT) and taking half of its clients; the
    first serves on alone."""
    url, first = start_server(env, "--workers", "2")
    port = url.rsplit(":", 1)[1]
    second = env.run("serve", "--port", port, "--workers", "2", check=False, timeout=60)
    assert second.returncode == 3, second.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
    assert "in use" in second.stderr
    assert "Traceback" not in second.stderr
    fresh = httpx2.Limits(max_keepalive_connections=0)
    with httpx2.Client(base_url=url, timeout=30, limits=fresh) as client:
        assert all(client.get("/healthz").status_code == 200 for _ in range(10))
    assert first.poll() is None


def test_serve_refuses_more_processes_than_the_machine_can_use(env: Env) -> None:
    """`--workers` far beyond the cores (a slip: 1000 for 10) is refused before anything is
    forked, with the bound; zero is refused by the option itself."""
    too_many = env.run("serve", "--port", str(free_port()), "--workers", "100000", check=False)
    assert too_many.returncode == 2
    most = 4 * len(os.sched_getaffinity(0))
    assert f"--workers 100000: at most {most} on this machine" in too_many.stderr
    zero = env.run("serve", "--port", str(free_port()), "--workers", "0", check=False)
    assert zero.returncode == 2
    assert "Traceback" not in too_many.stderr + zero.stderr


class _Output:
    """A subprocess's stdout, read line by line on a thread (so that reads never block)."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            self.lines.append(raw.decode(errors="replace"))

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def join(self) -> None:
        self._thread.join(timeout=30)


def _sign_in_to_the_pages(url: str, email: str, password: str) -> None:
    """Sign in through the sign-in page, as a person would, and land on the exports page."""
    with httpx2.Client(base_url=url, timeout=30, follow_redirects=True) as browser:
        form = browser.get("/sign-in", headers={"Accept": "text/html"}).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf
        data = {"email": email, "password": password, "csrf": csrf.group(1), "next": "/"}
        landed = browser.post("/sign-in", data=data)
        assert landed.status_code == 200
        assert str(landed.url) == f"{url}/"
        assert "<h1>Exports</h1>" in landed.text
        assert f"{email} · demo (admin)" in landed.text


def test_demo_serve_prints_a_url_and_a_token_that_work(tmp_path: Path) -> None:
    """`demo --serve` runs the demo exports, then serves them: the printed password signs in to
    the pages, the printed URL and token list the demo's exports, a new request is produced by
    its in-process worker, the sample schedule fired through the API is delivered by its
    in-process scheduler to the demo's webhook receiver, and SIGINT stops it cleanly (exit 0)."""
    data_dir = tmp_path / "data"
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qexport", "demo", "--serve", "--rows", "2000", "--port", str(port)],
        env={**environ, "QEXPORT_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output = _Output(proc.stdout)
    try:
        found = wait_for(
            lambda: re.search(r"(http://127\.0\.0\.1:\d+).*?\s(qx_\S+)", output.text, re.S),
            timeout=240,
            interval=0.2,
        )
        url, token = found.group(1), found.group(2)
        assert url == f"http://127.0.0.1:{port}"
        password = re.search(r"as demo@example\.com with password (\S+)", output.text)
        assert password, output.text
        wait_for(lambda: _answers(f"{url}/healthz"), timeout=60, interval=0.1)
        _sign_in_to_the_pages(url, "demo@example.com", password.group(1))
        with httpx2.Client(base_url=url, headers=bearer(token), timeout=30) as api:
            items = api.get("/api/v1/exports").json()["items"]
            formats = sorted(i["format"] for i in items)
            # orders in every format, the sample report as pdf, xlsx and html, and the sample
            # schedule's csv
            assert formats == [
                "csv",
                "csv",
                "html",
                "jsonl",
                "parquet",
                "pdf",
                "tsv",
                "xlsx",
                "xlsx",
            ]
            assert {i["status"] for i in items} == {"succeeded"}
            orders = next(i for i in items if i["subject"]["name"] == "orders")
            body = {"query_id": orders["subject"]["id"], "format": "jsonl"}
            created = api.post("/api/v1/exports", json=body)
            assert created.status_code == 202, created.text
            location = created.headers["Location"]
            assert settled(api, location)["status"] == "succeeded"
            file = api.get(f"{location}/file")
            assert len(file.content.splitlines()) == 2000

            (schedule,) = api.get("/api/v1/schedules").json()["items"]
            fired = api.post(f"/api/v1/schedules/{schedule['id']}/run")
            assert fired.status_code == 202, fired.text
            location = fired.headers["Location"]
            assert settled(api, location)["status"] == "succeeded"
            sent = wait_for(
                lambda: [
                    d
                    for d in api.get(f"{location}/deliveries").json()["items"]
                    if d["status"] == "sent"
                ],
                timeout=60,
                interval=0.2,
            )
            assert f"webhook received: delivery {sent[0]['id']}, signature verified" in (
                output.text
            )

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        output.join()
        assert "Stopped." in output.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output.join()
        assert proc.stdout is not None
        proc.stdout.close()


def _connections_held(pid: int, port: int, state: str = "01") -> int:
    """How many TCP sockets on `port` in `state` (01: established, 0A: listening) process
    `pid` has open."""
    inodes = procfs.socket_inodes(pid)
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, inode = int(fields[1].rsplit(":", 1)[1], 16), fields[9]
        held += local_port == port and fields[3] == state and inode in inodes
    return held


def test_clients_connecting_at_once_are_dealt_to_both_servers(env: Env) -> None:
    """40 clients that connect in one burst (a load balancer's pool, a benchmark) and keep
    their connections: each of `serve --workers 2`'s processes holds a fair share of them,
    rather than the first to wake taking nearly all."""
    url, proc = start_server(env, "--workers", "2")
    children = procfs.children(proc.pid)
    port = int(url.rsplit(":", 1)[1])
    wait_for(lambda: all(_connections_held(pid, port, "0A") for pid in children), timeout=60)
    clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(40)]
    try:
        for client in clients:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: qexport\r\n\r\n")
        for client in clients:
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
        held = {pid: _connections_held(pid, port) for pid in children}
    finally:
        for client in clients:
            client.close()
    assert sum(held.values()) == 40, held
    assert min(held.values()) >= 8, held  # an even deal falls below 8 once in 100,000 runs


def _events(log: str) -> list[dict[str, Any]]:
    """The JSON log lines of a log (a process's other output left out)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_the_worker_runs_its_exports_at_a_lower_priority(env: Env) -> None:
    """`qexport worker` runs at niceness 10 above its parent's (QEXPORT_WORKER_NICE) and, on
    Linux, every thread of it in the idle scheduling class (QEXPORT_WORKER_IDLE), so that a
    server on the same machine goes first; all but its heartbeat thread, which runs as the
    worker was started so that its leases are kept whatever else runs; 0 and false leave
    every thread as started."""
    base = os.nice(0)

    def started(proc: subprocess.Popen[bytes]) -> tuple[list[int], int]:
        """The worker's threads once it runs, and its heartbeat thread."""
        log = next(env.data_dir.glob(f"worker-{env.procs.index(proc)}.log"))
        wait_for(lambda: "worker_started" in log.read_text(), timeout=60, interval=0.1)
        line = next(e for e in _events(log.read_text()) if e["event"] == "worker_priority_set")
        return procfs.threads(proc.pid), int(line["heartbeat_thread"])

    def priorities(tids: list[int]) -> set[tuple[int, int]]:
        """Each thread's (niceness, scheduling policy); threads that end meanwhile left out."""
        found = set()
        for tid in tids:
            stat = procfs.stat_fields(tid)
            try:
                policy = os.sched_getscheduler(tid)
            except ProcessLookupError:
                continue
            if stat is not None:
                found.add((int(stat[16]), policy))  # field 19 of proc(5): nice
        return found

    as_started = {(base, os.sched_getscheduler(0))}
    lowered, beating = started(env.start_worker())
    assert beating in lowered
    assert len(lowered) > 2  # the threads it started (the listener, the slots) too
    others = [tid for tid in lowered if tid != beating]
    assert priorities(others) == {(min(base + 10, 19), os.SCHED_IDLE)}
    assert priorities([beating]) == as_started
    unchanged, _ = started(env.start_worker(QEXPORT_WORKER_NICE="0", QEXPORT_WORKER_IDLE="false"))
    assert priorities(unchanged) == as_started
