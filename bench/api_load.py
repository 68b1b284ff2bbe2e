"""The HTTP API under load: one client at a time, then 40 at once, while a large export runs.

    python bench/api_load.py [--backend sqlite --backend postgresql] [--workers 2]
                             [--clients 40] [--seconds 20] [--requests 200] [--orders 200000]
                             [--worker-nice 10] [--no-worker-idle]

Each backend gets a fresh installation: a data dir with the demo DuckDB database (`--orders`
orders), a fresh SQLite metadata database there or a throwaway PostgreSQL database on the
local server (QEXPORT_BENCH_PG_URL or postgresql://postgres@127.0.0.1:5432/postgres), and a
filesystem object store. Seeded in this process: workspace `demo`, an admin with a token, a
bulk requester with another, and 50 succeeded exports (a 5,000-row csv among them, for 64 KiB
ranges). Then real subprocesses: `qexport serve --workers W` (`--workers 1` leaves the flag
out, so that a build without it can be measured too) and `qexport worker --concurrency 2`.
Throughout both phases the bulk requester keeps one large export running (every order, as
xlsx, requested again as soon as the last one settles).

1. One client at a time (one kept-alive connection, see Connection): `--requests` of each of
   GET /healthz (the anchor: no database), /api/v1/exports?limit=1, /api/v1/queries,
   /api/v1/exports/{id}, /api/v1/exports/{id}/events and a 64 KiB range of /file; p50, p99.
2. `--clients` concurrent clients for `--seconds`: a mix of those reads (list 30%, get 25%,
   range 20%, events 15%, queries 5%) and creates (5%, tiny csv exports). Requests/s over all,
   p50/p99 of the reads and of the creates, and errors (any status >= 400, or a transport
   error). The unsettled cap is raised to 10,000 (QEXPORT_MAX_UNSETTLED_PER_USER) so that the
   creates measure the API, not the cap.

The client runs on the same machine and takes CPU from the servers; prints the load average
before and after, since the machine may be shared, and where the CPU of phase 2 went per
request (servers, worker, the database's own processes, this client), which other work on the
machine moves much less than it moves requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import psycopg
import sqlalchemy as sa

from qexport import bootstrap
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.accounts import Role, new_api_token
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.logs import configure_logging
from qexport.services.requests import record_request
from qexport.sources.demo_data import build_demo_database
from qexport.worker.loop import Worker

PG_URL = os.environ.get("QEXPORT_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
WORKSPACE = "demo"
RANGE = {"Range": "bytes=0-65535"}
MIX = (("list", 30), ("get", 25), ("range", 20), ("events", 15), ("queries", 5), ("create", 5))


@contextlib.contextmanager
def database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        yield ""
        return
    name = f"qexport_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield sa.make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Installation:
    admin_token: str
    bulk_token: str
    small_query: str
    large_query: str
    export_ids: list[str]
    range_export: str


def _member(container: Container, email: str) -> tuple[str, str]:
    now = container.clock.now()
    user = container.accounts.create_user(email, password_hash=None, now=now)
    container.accounts.set_role(WORKSPACE, user.id, Role.ADMIN)
    token_id, token, secret_hash = new_api_token()
    container.accounts.add_token(
        token_id=token_id, user_id=user.id, workspace_id=WORKSPACE, secret_hash=secret_hash, now=now
    )
    return user.id, token


def seed(settings: Settings) -> Installation:
    container = bootstrap.build(settings)
    try:
        container.accounts.ensure_workspace(WORKSPACE, now=container.clock.now())
        admin, admin_token = _member(container, "ann@demo.test")
        _bulk, bulk_token = _member(container, "bulk@demo.test")
        source = bootstrap.DEMO_SOURCE
        queries = {
            "small": "SELECT * FROM orders ORDER BY order_id LIMIT 100",
            "medium": "SELECT * FROM orders ORDER BY order_id LIMIT 5000",
            "large": "SELECT * FROM orders",
        }
        for name, sql in queries.items():
            container.catalog.add_query(Query(name, WORKSPACE, name, sql, source, owner=admin))
        ids = [
            record_request(
                container.exports,
                container.catalog,
                container.clock,
                Requester(admin, WORKSPACE),
                RequestExport(
                    SubjectRef("query", "medium" if i == 0 else "small", by_name=True), "csv"
                ),
            ).id
            for i in range(50)
        ]
        Worker(container, drain=True).run()
        return Installation(admin_token, bulk_token, "small", "large", ids, ids[0])
    finally:
        container.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Processes:
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def start(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.logs.append(log)
        with log.open("wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "qexport", *args],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_until_up(url: str, procs: Processes) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for proc, log in zip(procs.procs, procs.logs, strict=True):
            if proc.poll() is not None:
                raise SystemExit(f"{proc.args} exited: {log.read_text()[-3000:]}")
        with contextlib.suppress(httpx2.TransportError):
            if httpx2.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit("the server did not answer in 120 s")


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class LargeExports:
    """Keeps one large export of the bulk requester running until stopped."""

    def __init__(self, client: httpx2.AsyncClient, inst: Installation) -> None:
        self._client, self._inst = client, inst
        self.requested = 0
        self.seen_running = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        headers = _bearer(self._inst.bulk_token)
        body = {"query_id": self._inst.large_query, "format": "xlsx"}
        while not self._stop.is_set():
            created = await self._client.post("/api/v1/exports", json=body, headers=headers)
            created.raise_for_status()
            self.requested += 1
            location = created.headers["Location"]
            while not self._stop.is_set():
                status = (await self._client.get(location, headers=headers)).json()["status"]
                if status == "running":
                    self.seen_running += 1
                if status in ("succeeded", "failed"):
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 0.5)

    def stop(self) -> None:
        self._stop.set()


class Connection:
    """A minimal HTTP/1.1 client on one kept-alive asyncio connection.

    httpx2's AsyncClient cost about 1.6 ms of CPU a request here (GET /healthz: 2.3 ms
    against 0.7 ms with http.client): near a whole core at 600 requests/s on a 2-core machine,
    so the client would have measured itself. This one writes a request and reads a body of
    Content-Length or chunked, nothing more.
    """

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, bytes]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._streams
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host}:{self._port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body or method == "POST":
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        fields = {
            name.strip().lower(): value.strip()
            for name, value in (line.split(":", 1) for line in head[1:] if line)
        }
        if "content-length" in fields:
            content = await reader.readexactly(int(fields["content-length"]))
        else:
            content = await self._chunked(reader)
        if fields.get("connection", "").lower() == "close":
            await self.close()
        return status, content

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> bytes:
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
            pass
        return b"".join(parts)

    async def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


def _request(kind: str, inst: Installation, rng: random.Random) -> tuple[str, str, dict[str, str]]:
    """(method, path, extra headers) of one request of `kind`."""
    export_id = rng.choice(inst.export_ids)
    return {
        "healthz": ("GET", "/healthz", {}),
        "list": ("GET", "/api/v1/exports?limit=1", {}),
        "queries": ("GET", "/api/v1/queries", {}),
        "get": ("GET", f"/api/v1/exports/{export_id}", {}),
        "events": ("GET", f"/api/v1/exports/{export_id}/events", {}),
        "range": ("GET", f"/api/v1/exports/{inst.range_export}/file", RANGE),
        "create": ("POST", "/api/v1/exports", {}),
    }[kind]


async def _timed(
    conn: Connection, kind: str, inst: Installation, rng: random.Random
) -> tuple[float, bool]:
    """Milliseconds for one request, and whether it failed."""
    method, path, headers = _request(kind, inst, rng)
    headers = {**headers, **_bearer(inst.admin_token)}
    body = b'{"query_id": "%s", "format": "csv"}' % inst.small_query.encode()
    start = time.perf_counter()
    try:
        status, _ = await conn.request(method, path, headers, body if method == "POST" else b"")
        failed = status >= 400
    except (OSError, asyncio.IncompleteReadError, ValueError):
        await conn.close()
        failed = True
    return (time.perf_counter() - start) * 1000, failed


def _pct(values: list[float], at: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[at - 1]


async def one_at_a_time(port: int, inst: Installation, requests: int) -> list[str]:
    rng = random.Random(1)
    lines = []
    conn = Connection("127.0.0.1", port)
    for kind in ("healthz", "list", "queries", "get", "events", "range"):
        times, errors = [], 0
        for _ in range(20):  # warm the connection and the server
            await _timed(conn, kind, inst, rng)
        for _ in range(requests):
            ms, failed = await _timed(conn, kind, inst, rng)
            times.append(ms)
            errors += failed
        label = "(anchor)" if kind == "healthz" else "(target <= 2 ms)"
        lines.append(
            f"  one client  {kind:8} p50 {statistics.median(times):6.2f} ms,"
            f" p99 {_pct(times, 99):6.2f} ms, {errors} errors {label}"
        )
    await conn.close()
    return lines


_TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float, str]]:
    """Each process's parent, CPU seconds used so far and command line, read from /proc (a
    process that ends while it is read is left out)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except (FileNotFoundError, ProcessLookupError):
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(rest[11]) + int(rest[12])) / _TICK
        found[int(entry)] = (int(rest[1]), cpu, cmdline.decode(errors="replace"))
    return found


@dataclass
class CpuWatch:
    """Where the CPU of a phase goes: qexport's servers and worker (each with its children),
    the metadata database's server processes for this benchmark's database (PostgreSQL's
    backends name it in their command line) and this client. On a machine shared with other
    work, CPU per request says more than requests/s, which the other work also moves."""

    roots: dict[str, int]
    database: str

    def sample(self) -> dict[str, float]:
        procs = _processes()
        seconds = dict.fromkeys([*self.roots, "database"], 0.0)
        for pid, (_ppid, cpu, cmdline) in procs.items():
            if self.database and self.database in cmdline and cmdline.startswith("postgres"):
                seconds["database"] += cpu
                continue
            ancestor = pid
            while ancestor in procs:
                names = [name for name, root in self.roots.items() if root == ancestor]
                if names:
                    seconds[names[0]] += cpu
                    break
                ancestor = procs[ancestor][0]
        mine = os.times()
        seconds["client"] = mine.user + mine.system
        return seconds


def _cpu_line(before: dict[str, float], after: dict[str, float], requests: int) -> str:
    parts = ", ".join(
        f"{name} {(after[name] - before[name]) * 1000 / max(requests, 1):.2f}" for name in after
    )
    total = sum(after.values()) - sum(before.values())
    return f"  CPU per request (ms): {parts}; all {total * 1000 / max(requests, 1):.2f}"


async def concurrent(
    port: int, inst: Installation, clients: int, seconds: float, watch: CpuWatch
) -> list[str]:
    kinds = [kind for kind, weight in MIX for _ in range(weight)]
    times: dict[str, list[float]] = {kind: [] for kind, _ in MIX}
    errors = 0
    deadline = time.perf_counter() + seconds

    async def one_client(index: int) -> None:
        nonlocal errors
        rng = random.Random(index)
        conn = Connection("127.0.0.1", port)
        while time.perf_counter() < deadline:
            kind = rng.choice(kinds)
            ms, failed = await _timed(conn, kind, inst, rng)
            times[kind].append(ms)
            errors += failed
        await conn.close()

    cpu_before = watch.sample()
    started = time.perf_counter()
    await asyncio.gather(*(one_client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    cpu_after = watch.sample()
    reads = [ms for kind, values in times.items() if kind != "create" for ms in values]
    creates = times["create"]
    total = len(reads) + len(creates)
    by_kind = ", ".join(
        f"{kind} {_pct(values, 50):.0f}/{_pct(values, 99):.0f}" for kind, values in times.items()
    )
    return [
        f"  {clients} clients  {total / elapsed:6.0f} requests/s (target >= 600), {errors} errors;"
        f" reads p50 {statistics.median(reads):.1f} ms, p99 {_pct(reads, 99):.1f} ms"
        f" (target <= 100 ms); creates p50 {_pct(creates, 50):.1f} ms,"
        f" p99 {_pct(creates, 99):.1f} ms ({len(creates)})",
        f"  {clients} clients  p50/p99 ms by kind: {by_kind}",
        _cpu_line(cpu_before, cpu_after, total),
    ]


async def measure_load(
    port: int, inst: Installation, args: argparse.Namespace, watch: CpuWatch
) -> list[str]:
    url = f"http://127.0.0.1:{port}"
    async with httpx2.AsyncClient(base_url=url, timeout=60) as bulk_client:
        large = LargeExports(bulk_client, inst)
        bulk = asyncio.create_task(large.run())
        await asyncio.sleep(2)  # the first large export claimed and under way
        lines = await one_at_a_time(port, inst, args.requests)
        lines += await concurrent(port, inst, args.clients, args.seconds, watch)
        large.stop()
        await bulk
    lines.append(
        f"  large exports requested meanwhile: {large.requested},"
        f" seen running by {large.seen_running} polls"
    )
    return lines


def measure(backend: str, args: argparse.Namespace) -> list[str]:
    root = Path(tempfile.mkdtemp(prefix="qexport-bench-load-"))
    procs = Processes()
    try:
        data_dir = root / "data"
        build_demo_database(data_dir / "demo.duckdb", orders=args.orders)
        with database(backend) as db_url:
            # PostgreSQL: the installation secret must be given (as in production), the same
            # here, where the chains of the seeded events are keyed, as in the processes.
            secret = secrets.token_hex(32) if db_url else ""
            inst = seed(Settings(data_dir=data_dir, database_url=db_url, secret_key=secret))
            env = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
            env |= {
                "QEXPORT_DATA_DIR": str(data_dir),
                "QEXPORT_DATABASE_URL": db_url,
                "QEXPORT_MAX_UNSETTLED_PER_USER": "10000",
                "QEXPORT_WORKER_NICE": str(args.worker_nice),
                "QEXPORT_WORKER_IDLE": str(args.worker_idle).lower(),
            }
            if secret:
                env["QEXPORT_SECRET_KEY"] = secret
            port = _free_port()
            workers = ["--workers", str(args.workers)] if args.workers > 1 else []
            procs.start(env, root / "serve.log", "serve", "--port", str(port), *workers)
            procs.start(env, root / "worker.log", "worker", "--concurrency", "2")
            url = f"http://127.0.0.1:{port}"
            _wait_until_up(url, procs)
            try:
                server, worker = (proc.pid for proc in procs.procs)
                watch = CpuWatch(
                    {"servers": server, "worker": worker},
                    sa.make_url(db_url).database or "" if db_url else "",
                )
                return [f"{backend}:", *asyncio.run(measure_load(port, inst, args, watch))]
            finally:
                procs.stop()
    finally:
        procs.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--orders", type=int, default=200_000)
    parser.add_argument("--worker-nice", type=int, default=10, help="QEXPORT_WORKER_NICE")
    parser.add_argument(
        "--worker-idle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="QEXPORT_WORKER_IDLE",
    )
    args = parser.parse_args()
    configure_logging(level=logging.WARNING)  # the seeding's worker: its exports, not news
    print(
        f"load average before: {os.getloadavg()}; --workers {args.workers},"
        f" QEXPORT_WORKER_NICE={args.worker_nice}, QEXPORT_WORKER_IDLE={args.worker_idle}"
    )
    for backend in args.backend or ["sqlite", "postgresql"]:
        for line in measure(backend, args):
            print(line, flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
