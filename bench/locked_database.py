"""The API while another session locks the metadata database: how fast /healthz and /readyz
answer, and how the reads that wait end.

    python bench/locked_database.py [--backend sqlite --backend postgresql] [--hold 8]
                                    [--readers 6] [--probes 20]

Each backend gets a fresh installation seeded as bench/api_load.py seeds it, served by
`qexport serve --workers 1` (one process: nothing else answers for it). Then another session
takes a lock for `--hold` seconds: on PostgreSQL `LOCK TABLE exports IN ACCESS EXCLUSIVE
MODE`; on SQLite another process holds every read lock of the WAL index, so that no reader
can begin. Meanwhile `--readers` clients each read an export (they wait for the lock),
`--probes` GET /healthz are timed one after another, then one GET /readyz. Prints the
latencies, what the reads answered and after how long, and the load average (the machine may
be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import sqlalchemy as sa

import api_load
from api_load import Connection, Installation, Processes, seed
from qexport.config import Settings
from qexport.logs import configure_logging
from qexport.sources.demo_data import build_demo_database

# SQLite's WAL index: its locks start at byte 120; the five read locks are bytes 123-127.
_HOLD_READ_LOCKS = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 5, 123)
print("locked", flush=True)
sys.stdin.read()
"""


@contextlib.asynccontextmanager
async def locked(backend: str, db_url: str, data_dir: Path) -> AsyncIterator[None]:
    if backend == "postgresql":
        url = sa.make_url(db_url).set(drivername="postgresql")
        locker = await psycopg.AsyncConnection.connect(url.render_as_string(hide_password=False))
        await locker.execute("LOCK TABLE exports IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            await locker.rollback()
            await locker.close()
        return
    shm = f"{data_dir / 'qexport.db'}-shm"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_READ_LOCKS, shm],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdin is not None
    assert holder.stdout.readline().strip() == "locked"
    try:
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


async def _timed(conn: Connection, path: str, headers: dict[str, str]) -> tuple[int, float, str]:
    start = time.perf_counter()
    status, body = await conn.request("GET", path, headers)
    return status, (time.perf_counter() - start) * 1000, body.decode(errors="replace")


async def measure_locked(
    backend: str,
    db_url: str,
    data_dir: Path,
    port: int,
    inst: Installation,
    args: argparse.Namespace,
) -> list[str]:
    reading = f"/api/v1/exports/{inst.export_ids[0]}"
    probe = Connection("127.0.0.1", port)
    readers = [Connection("127.0.0.1", port) for _ in range(args.readers)]
    for conn in [probe, *readers]:  # connected, and the token's last use written
        await _timed(conn, reading, api_load._bearer(inst.admin_token))

    async def probing() -> tuple[list[float], tuple[int, float, str], int]:
        await asyncio.sleep(0.5)  # the reads are waiting
        health = []
        for _ in range(args.probes):
            status, ms, _ = await _timed(probe, "/healthz", {})
            assert status == 200
            health.append(ms)
        ready = await _timed(probe, "/readyz", {})
        return health, ready, sum(not read.done() for read in reads)

    async with locked(backend, db_url, data_dir):
        reads = [
            asyncio.create_task(_timed(conn, reading, api_load._bearer(inst.admin_token)))
            for conn in readers
        ]
        probes = asyncio.create_task(probing())
        await asyncio.sleep(args.hold)  # however long the probes take
    health, (ready_status, ready_ms, ready_body), pending = await probes
    answers = await asyncio.gather(*reads)
    for conn in [probe, *readers]:
        await conn.close()
    return [
        f"{backend}:",
        f"  /healthz while locked: p50 {statistics.median(health):.2f} ms,"
        f" max {max(health):.2f} ms ({args.probes}, {pending} of {args.readers} reads"
        " still waiting after them)",
        f"  /readyz while locked: {ready_status} in {ready_ms:.0f} ms: {ready_body[:160]}",
        "  the reads: "
        + ", ".join(f"{status} after {ms / 1000:.1f} s" for status, ms, _ in answers),
    ]


def measure(backend: str, args: argparse.Namespace) -> list[str]:
    root = Path(tempfile.mkdtemp(prefix="qexport-bench-locked-"))
    procs = Processes()
    try:
        data_dir = root / "data"
        build_demo_database(data_dir / "demo.duckdb", orders=1000)
        with api_load.database(backend) as db_url:
            # PostgreSQL: the installation secret must be given (as in production), the same
            # here, where the chains of the seeded events are keyed, as in the processes.
            secret = secrets.token_hex(32) if db_url else ""
            inst = seed(Settings(data_dir=data_dir, database_url=db_url, secret_key=secret))
            env = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
            env |= {"QEXPORT_DATA_DIR": str(data_dir), "QEXPORT_DATABASE_URL": db_url}
            if secret:
                env["QEXPORT_SECRET_KEY"] = secret
            port = api_load._free_port()
            procs.start(env, root / "serve.log", "serve", "--port", str(port), "--workers", "1")
            api_load._wait_until_up(f"http://127.0.0.1:{port}", procs)
            try:
                return asyncio.run(measure_locked(backend, db_url, data_dir, port, inst, args))
            finally:
                procs.stop()
    finally:
        procs.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--hold", type=float, default=8.0, help="seconds the lock is held")
    parser.add_argument("--readers", type=int, default=6)
    parser.add_argument("--probes", type=int, default=20)
    args = parser.parse_args()
    configure_logging(level=logging.WARNING)
    print(f"load average before: {os.getloadavg()}")
    for backend in args.backend or ["sqlite", "postgresql"]:
        for line in measure(backend, args):
            print(line, flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
