"""Dispatch latency and tiny-export throughput, on PostgreSQL and on SQLite.

    python bench/dispatch.py [--repeat 3] [--backend postgresql --backend sqlite]
                             [--latency-requests 200] [--spacing-ms 50] [--tiny-exports 1000]

Each measurement gets a fresh metadata database (a throwaway PostgreSQL database on the local
server, QEXPORT_BENCH_PG_URL or postgresql://postgres@127.0.0.1:5432/postgres, or a fresh
SQLite data dir), a small demo DuckDB database and a filesystem object store, and runs real
`python -m qexport worker` subprocesses.

1. Dispatch latency: one idle worker (concurrency 1, the default poll interval, so a wake-up,
   not the poll, is what should find the work); requests arrive `--spacing-ms` apart.
   Latency = `started_at - created_at` of each record. Both are `SystemClock` readings on this
   machine: `created_at` just before the request's INSERT (so the commit is inside the
   figure), `started_at` just before the claiming UPDATE (so the claim's own commit is not).
2. Throughput of tiny exports (10 rows, csv), `worker --processes 2`, requested in turn by
   four members of one workspace (the fair share caps each at one running export):
   a. queue filled first: `--tiny-exports` requests committed, then the workers start; the rate
      is exports / (last `completed_at` - first `started_at`), so process start-up is excluded;
   b. arriving: workers started and warmed, then one client requests exports back to back;
      the rate is exports / (last `completed_at` - first `created_at`).

Prints each figure with its target; `--repeat` runs give a range (the machine is shared).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import psycopg
import sqlalchemy as sa

from bench_store import SqlMetadataStore, metadata_store
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.demo_data import build_demo_database
from qexport.store.engine import migrate
from qexport.store.tables.exports import exports

PG_URL = os.environ.get("QEXPORT_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SECRET = "bench-" + "k" * 40  # QEXPORT_SECRET_KEY for the benchmark's throwaway databases
# The requests come from several people, as a real queue's do: the fair share (by default
# QEXPORT_MAX_RUNNING_PER_USER is half the slots, so 1 of 2) would run one person's tiny
# exports one at a time and measure that cap rather than the workers: 56-67 exports/s on
# PostgreSQL from one requester, against 99 from four, in runs on the same machine.
REQUESTERS = tuple(Requester(f"bench-{i}", "bench") for i in range(4))
WORKSPACE = "bench"
TINY_SQL = "SELECT * FROM customers ORDER BY customer_id LIMIT 10"
QUERY = "tiny"
TARGETS = {
    ("postgresql", "p50"): 20.0,
    ("postgresql", "p99"): 100.0,
    ("sqlite", "p50"): 250.0,
}
TARGET_RATE = 100.0  # exports/s on PostgreSQL with 2 worker processes
T = TypeVar("T")


@dataclass
class Site:
    """One fresh metadata database, data dir and store; the workers run against it."""

    backend: str
    data_dir: Path
    database_url: str
    store: SqlMetadataStore
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    requested: int = 0

    @property
    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
        env["QEXPORT_DATA_DIR"] = str(self.data_dir)
        env["QEXPORT_DATABASE_URL"] = self.database_url
        # Required on PostgreSQL (the worker refuses to start without it); any value will do,
        # the same as the one this process keys its requests' audit events with.
        env["QEXPORT_SECRET_KEY"] = SECRET
        env["QEXPORT_SOURCE_DEMO_WORKSPACES"] = WORKSPACE  # the demo source's users
        return env

    def start_worker(self, *args: str) -> subprocess.Popen[bytes]:
        with (self.data_dir / f"worker-{len(self.workers)}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "qexport", "worker", *args],
                env=self.environ,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        return proc

    def request(self) -> ExportRecord:
        self.requested += 1
        requester = REQUESTERS[self.requested % len(REQUESTERS)]
        return record_request(
            self.store,
            self.store,
            SystemClock(),
            requester,
            RequestExport(SubjectRef("query", QUERY, by_name=True), "csv"),
        )

    def settled(self) -> int:
        stmt = sa.select(sa.func.count()).where(exports.c.status.in_(["succeeded", "failed"]))
        with self.store.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def wait_settled(self, count: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.settled() < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.backend}: not all {count} exports settled in {timeout} s")
            for proc in self.workers:
                if proc.poll() is not None:
                    raise SystemExit(f"{self.backend}: a worker exited {proc.returncode}")
            time.sleep(0.05)

    def records(self) -> list[ExportRecord]:
        found = self.store.list_exports(workspace_id=WORKSPACE, limit=1_000_000)
        failed = [r for r in found if r.status.value != "succeeded"]
        if failed:
            raise SystemExit(f"{self.backend}: {len(failed)} exports did not succeed: {failed[0]}")
        return found

    def cpu_seconds(self) -> float:
        """CPU time used so far by the worker processes (a supervisor and its children)."""
        pids = [p.pid for p in self.workers if p.poll() is None]
        for pid in list(pids):
            with contextlib.suppress(FileNotFoundError):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                pids.extend(int(child) for child in children)
        return sum(_cpu_seconds(pid) for pid in pids)

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.workers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.workers.clear()


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@contextlib.contextmanager
def fresh_site(backend: str, demo_db: Path) -> Iterator[Site]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"qexport-bench-{backend}-"))
    (data_dir / "demo.duckdb").symlink_to(demo_db)
    database = f"qexport_bench_{uuid.uuid4().hex[:12]}"
    if backend == "postgresql":
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{database}"')
        url = sa.make_url(PG_URL).set(database=database).render_as_string(hide_password=False)
    else:
        url = f"sqlite:///{data_dir / 'qexport.db'}"
    store = metadata_store(Settings(data_dir=data_dir, database_url=url, secret_key=SECRET))
    engine = store.engine
    site = Site(backend, data_dir, url, store)
    try:
        migrate(engine)
        site.store.add_query(Query(str(uuid.uuid4()), WORKSPACE, QUERY, TINY_SQL, "demo"))
        yield site
    finally:
        site.stop_workers()
        engine.dispose()
        if backend == "postgresql":
            with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(data_dir, ignore_errors=True)


def warm_up(site: Site, count: int = 3) -> None:
    """Run a few exports so the workers have imported, connected and opened the source."""
    already = site.settled()
    for _ in range(count):
        site.request()
    site.wait_settled(already + count, timeout=120)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


# ---------------------------------------------------------------- measurements


def measure_latency(site: Site, requests: int, spacing_s: float) -> tuple[float, float]:
    """p50 and p99 of request -> claimed, in ms, for requests `spacing_s` apart."""
    site.start_worker()
    warm_up(site)
    time.sleep(1.0)  # idle: the worker is waiting for a wake-up or its next poll
    ids = set()
    next_at = time.monotonic()
    for _ in range(requests):
        next_at += spacing_s
        ids.add(site.request().id)
        time.sleep(max(0.0, next_at - time.monotonic()))
    site.wait_settled(requests + 3)
    site.stop_workers()
    latencies = [
        (r.started_at - r.created_at).total_seconds() * 1000
        for r in site.records()
        if r.id in ids and r.started_at is not None
    ]
    return percentile(latencies, 50), percentile(latencies, 99)


@dataclass(frozen=True)
class Throughput:
    exports_per_s: float
    worker_cpu_ms: float  # CPU of the worker processes per export (start-up left out)
    offered_per_s: float = 0.0  # requests/s the client managed (arriving only)

    def __str__(self) -> str:
        text = f"{self.exports_per_s:.1f} exports/s, {self.worker_cpu_ms:.1f} ms CPU/export"
        if self.offered_per_s:
            text += f", {self.offered_per_s:.0f} requests/s offered"
        return text


def measure_filled(site: Site, count: int) -> Throughput:
    """Draining a queue of `count` tiny exports with `--processes 2`."""
    for _ in range(count):
        site.request()
    site.start_worker("--processes", "2")
    site.wait_settled(1)  # CPU from the first export on: the processes' start-up left out
    cpu, settled = site.cpu_seconds(), site.settled()
    site.wait_settled(count)
    cpu_ms = 1000 * (site.cpu_seconds() - cpu) / (count - settled)
    site.stop_workers()
    records = site.records()
    first = min(r.started_at for r in records if r.started_at is not None)
    last = max(r.completed_at for r in records if r.completed_at is not None)
    return Throughput(count / (last - first).total_seconds(), cpu_ms)


def measure_arriving(site: Site, count: int) -> Throughput:
    """While one client requests `count` tiny exports back to back, `--processes 2`."""
    site.start_worker("--processes", "2")
    warm_up(site)
    time.sleep(1.0)
    cpu = site.cpu_seconds()
    started = datetime.now(UTC)
    ids = {site.request().id for _ in range(count)}
    offered = count / (datetime.now(UTC) - started).total_seconds()
    site.wait_settled(count + 3)
    cpu_ms = 1000 * (site.cpu_seconds() - cpu) / count
    site.stop_workers()
    records = [r for r in site.records() if r.id in ids]
    first = min(r.created_at for r in records)
    last = max(r.completed_at for r in records if r.completed_at is not None)
    return Throughput(count / (last - first).total_seconds(), cpu_ms, offered)


# ---------------------------------------------------------------- report


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    """Median, with the range of all runs."""
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def repeated(label: str, repeat: int, once: Callable[[], T]) -> list[T]:
    results = []
    for i in range(repeat):
        results.append(once())
        print(f"  {label} run {i + 1}/{repeat}: {results[-1]}", flush=True)
    return results


def bench_latency(backend: str, demo_db: Path, args: argparse.Namespace) -> str:
    def once() -> tuple[float, float]:
        with fresh_site(backend, demo_db) as site:
            p50, p99 = measure_latency(site, args.latency_requests, args.spacing_ms / 1000)
        return round(p50, 1), round(p99, 1)

    got = repeated(f"{backend} latency p50, p99 ms", args.repeat, once)
    return (
        f"{backend:10} dispatch latency p50 {spread([g[0] for g in got], '{:.1f}')} ms"
        f" (target <= {TARGETS.get((backend, 'p50'), '-')}),"
        f" p99 {spread([g[1] for g in got], '{:.1f}')} ms"
        f" (target <= {TARGETS.get((backend, 'p99'), '-')})"
    )


def bench_throughput(backend: str, demo_db: Path, args: argparse.Namespace) -> str:
    def filled() -> Throughput:
        with fresh_site(backend, demo_db) as site:
            return measure_filled(site, args.tiny_exports)

    def arriving() -> Throughput:
        with fresh_site(backend, demo_db) as site:
            return measure_arriving(site, args.tiny_exports)

    full = repeated(f"{backend} queue filled", args.repeat, filled)
    live = repeated(f"{backend} arriving", args.repeat, arriving)
    target = f"target >= {TARGET_RATE:.0f}" if backend == "postgresql" else "reported"
    return (
        f"{backend:10} tiny csv, 2 processes: queue filled"
        f" {spread([x.exports_per_s for x in full])} exports/s ({target}),"
        f" worker CPU {spread([x.worker_cpu_ms for x in full], '{:.1f}')} ms/export;"
        f" arriving {spread([x.exports_per_s for x in live])} exports/s"
        f" (requests offered at {spread([x.offered_per_s for x in live])}/s),"
        f" worker CPU {spread([x.worker_cpu_ms for x in live], '{:.1f}')} ms/export"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["postgresql", "sqlite"])
    parser.add_argument("--only", choices=["latency", "throughput"], help="run one benchmark")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument("--spacing-ms", type=float, default=50.0)
    parser.add_argument("--tiny-exports", type=int, default=1000)
    args = parser.parse_args()
    demo_dir = Path(tempfile.mkdtemp(prefix="qexport-bench-demo-"))
    demo_db = build_demo_database(demo_dir / "demo.duckdb", orders=1_000).path
    lines: list[str] = []
    try:
        for backend in args.backend or ["postgresql", "sqlite"]:
            if args.only != "throughput":
                lines.append(bench_latency(backend, demo_db, args))
            if args.only != "latency":
                lines.append(bench_throughput(backend, demo_db, args))
    finally:
        shutil.rmtree(demo_dir, ignore_errors=True)
    print(f"\nmedian (range) of {args.repeat} runs, each on a fresh database:")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
