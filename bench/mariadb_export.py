"""MariaDB to csv: qexport's whole export (the native mysql:// source, a worker writing csv)
against the MariaDB client's own dump of the same query, in the same run.

    python bench/mariadb_export.py [--rows 5000000] [--small 1000000] [--repeat 2]
                                   [--no-generic]

1. Starts a throwaway MariaDB server of its own (Debian's mariadbd, as tests/support/mariadb.py
   starts it) and fills `orders` with `--rows` rows: BIGINT, DECIMAL(12,2), DOUBLE,
   VARCHAR(40), DATETIME.
2. For the first `--small` rows and for all of them, in turns, best of `--repeat` each:
   the anchor `mariadb --batch --quick -e '<query>' > file`, and qexport's export of the
   same query to csv (claimed -> succeeded: connect, query, csv, the file complete in the
   store), run by
   a `qexport worker` subprocess (after a one-row warm-up export, so that a running worker's
   export is timed, not a fresh process's first) whose peak RSS is read from the kernel
   (VmHWM).
3. Prints both times, the throughput ratio (anchor seconds / qexport seconds; target
   >= 0.8x), qexport's peak RSS at both sizes (target: the larger within 1.1x of the
   smaller), and, unless --no-generic, the generic SQLAlchemy source
   (sqlalchemy+mysql+mysqldb://) on the small query against the native one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench_store import metadata_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.mariadb, from the repo

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.services.requests import record_request

REQUESTER = Requester("bench", "bench")
LOGIN = "bench"  # the throwaway server's read-only login; its password is the same word


@dataclass
class Run:
    seconds: float
    rows: int
    size: int
    peak_rss_mib: float


def anchor(port: int, sql: str, target: Path) -> float:
    """`mariadb --batch --quick -e sql > target`: the server's rows as the client dumps them."""
    started = time.perf_counter()
    with target.open("wb") as out:
        subprocess.run(
            [
                shutil.which("mariadb") or "mariadb",
                "--no-defaults",
                "--protocol=tcp",
                "-h127.0.0.1",
                f"-P{port}",
                f"-u{LOGIN}",
                "bench",
                "--batch",
                "--quick",
                "-e",
                sql,
            ],
            stdout=out,
            check=True,
            env={**os.environ, "MYSQL_PWD": LOGIN},  # not on the command line
        )
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def qexport_export(
    data_dir: Path, query_name: str, sources: dict[str, str], *, warm_up: str = "warm_up"
) -> Run:
    """Request one csv export and let a fresh worker process run it; time claimed ->
    succeeded, and read the worker's peak RSS."""
    store = metadata_store(Settings(data_dir=data_dir))
    env = {**os.environ, "QEXPORT_DATA_DIR": str(data_dir), "QEXPORT_POLL_SECONDS": "0.02"}
    for name, url in sources.items():
        env[f"QEXPORT_SOURCE_{name.upper()}"] = url
        env[f"QEXPORT_SOURCE_{name.upper()}_WORKSPACES"] = REQUESTER.workspace_id
    worker = subprocess.Popen(
        [sys.executable, "-m", "qexport", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # A warm-up export of one row first: what is timed is a running worker's export, not the
    # first one of a fresh process (its lazy imports, its first look at the source's grants).
    for name in (warm_up, query_name):
        record = record_request(
            store,
            store,
            SystemClock(),
            REQUESTER,
            RequestExport(SubjectRef("query", name, by_name=True), "csv"),
        )
        while (done := store.get_export(record.id)) is not None and not done.settled:
            time.sleep(0.05)
    peak_kib = _peak_rss_kib(worker.pid)
    worker.terminate()
    _, status, _usage = os.wait4(worker.pid, 0)
    stderr = worker.stderr.read().decode() if worker.stderr else ""
    if status != 0 or done is None or done.status.value != "succeeded":
        raise SystemExit(f"qexport export did not succeed: {done}\n{stderr[-2000:]}")
    assert done.completed_at is not None
    assert done.started_at is not None
    # From the claim: a worker slow to start (imports on a busy machine) is not the export.
    seconds = (done.completed_at - done.started_at).total_seconds()
    return Run(seconds, done.row_count or 0, done.size_bytes or 0, peak_kib / 1024)


def _peak_rss_kib(pid: int) -> int:
    """The process's own peak RSS (VmHWM), not ru_maxrss (which counts the parent's too)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/<pid>/status")


def fill(server: object, rows: int) -> None:
    server.execute(  # type: ignore[attr-defined]
        "CREATE DATABASE bench",
        "USE bench",
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, total DECIMAL(12, 2), ratio DOUBLE,"
        " note VARCHAR(40), at DATETIME)",
        "INSERT INTO orders SELECT seq, (seq * 104729 % 1000000) / 100, (seq % 1000) / 7,"
        " CONCAT('note ', seq % 1000), FROM_UNIXTIME(1700000000 + seq)"
        f" FROM seq_1_to_{int(rows)}",
        f"CREATE USER '{LOGIN}'@'%' IDENTIFIED BY '{LOGIN}'",
        f"GRANT SELECT ON bench.* TO '{LOGIN}'@'%'",
    )


def prepare(data_dir: Path, queries: dict[str, tuple[str, str]]) -> None:
    store = metadata_store(Settings(data_dir=data_dir), upgrade=True)
    for name, (sql, source) in queries.items():
        store.add_query(Query(str(uuid.uuid4()), REQUESTER.workspace_id, name, sql, source))


def compare(
    label: str, repeat: int, port: int, sql: str, query: str, data_dir: Path, urls: dict[str, str]
) -> tuple[float, Run]:
    anchors, runs = [], []
    for _ in range(repeat):  # in turns: the machine's drift hits both alike
        anchors.append(anchor(port, sql, data_dir / "anchor.tsv"))
        runs.append(qexport_export(data_dir, query, urls))
        print(
            f"  {label}: mariadb --batch --quick {anchors[-1]:6.2f} s"
            f" | qexport {runs[-1].seconds:6.2f} s (peak RSS {runs[-1].peak_rss_mib:,.0f} MiB)",
            flush=True,
        )
    best_anchor = min(anchors)
    ours = min(runs, key=lambda run: run.seconds)
    print(
        f"{label:16} mariadb --batch --quick {best_anchor:6.2f} s | qexport csv"
        f" {ours.seconds:6.2f} s ({ours.rows:,} rows, {ours.size / 2**20:,.0f} MiB, peak RSS"
        f" {ours.peak_rss_mib:,.0f} MiB) | qexport = {best_anchor / ours.seconds:.2f}x the"
        " client (target >= 0.8x)",
        flush=True,
    )
    return best_anchor, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of N for each side")
    parser.add_argument("--no-generic", action="store_true")
    args = parser.parse_args()
    from tests.support.mariadb import MARIADBD, start_server, stop_server

    if not Path(MARIADBD).is_file():
        raise SystemExit(f"{MARIADBD} is not installed")
    with tempfile.TemporaryDirectory(prefix="qexport-bench-") as folder:
        directory = Path(folder)
        (directory / "mariadb").mkdir()
        data_dir = directory / "qexport"
        server, process = start_server(directory / "mariadb")
        try:
            print(f"creating {args.rows:,} orders in MariaDB ...", flush=True)
            fill(server, args.rows)
            base = f"{LOGIN}:{LOGIN}@{server.host}:{server.port}/bench"
            urls = {"maria": f"mysql://{base}", "generic": f"sqlalchemy+mysql+mysqldb://{base}"}
            small_sql = f"SELECT * FROM orders WHERE id <= {int(args.small)}"
            all_sql = "SELECT * FROM orders"
            prepare(
                data_dir,
                {
                    "small": (small_sql, "maria"),
                    "all": (all_sql, "maria"),
                    "small_generic": (small_sql, "generic"),
                    "warm_up": ("SELECT * FROM orders LIMIT 1", "maria"),
                    "warm_up_generic": ("SELECT * FROM orders LIMIT 1", "generic"),
                },
            )
            _, small = compare(
                f"{args.small:,} rows",
                args.repeat,
                server.port,
                small_sql,
                "small",
                data_dir,
                urls,
            )
            _, big = compare(
                f"{args.rows:,} rows",
                args.repeat,
                server.port,
                all_sql,
                "all",
                data_dir,
                urls,
            )
            print(
                f"memory     qexport peak RSS {small.peak_rss_mib:,.0f} MiB at {small.rows:,}"
                f" rows, {big.peak_rss_mib:,.0f} MiB at {big.rows:,} rows:"
                f" {big.peak_rss_mib / small.peak_rss_mib:.2f}x (target <= 1.1x)",
                flush=True,
            )
            if not args.no_generic:
                generic = min(
                    (
                        qexport_export(data_dir, "small_generic", urls, warm_up="warm_up_generic")
                        for _ in range(args.repeat)
                    ),
                    key=lambda run: run.seconds,
                )
                print(
                    f"generic    sqlalchemy+mysql+mysqldb:// csv {generic.seconds:6.2f} s"
                    f" | native mysql:// {small.seconds:6.2f} s at {small.rows:,} rows"
                    f" | generic = {small.seconds / generic.seconds:.2f}x the native source",
                    flush=True,
                )
        finally:
            stop_server(process)


if __name__ == "__main__":
    main()
