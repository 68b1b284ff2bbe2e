"""Export throughput and worker memory, against the anchors measured in the same run.

    python bench/export_speed.py [--rows 10000000] [--xlsx-rows 1000000] [--dir bench/results]

1. Generates the demo dataset (orders) once, with `--rows` orders.
2. csv and parquet of `SELECT * FROM orders`: DuckDB's own `COPY (query) TO` vs qexport's whole
   export (request recorded -> succeeded, file complete in the object store), run by a
   `qexport worker` subprocess whose peak RSS is read from the kernel (VmHWM).
3. xlsx of the first `--xlsx-rows` orders: raw XlsxWriter (constant_memory) vs qexport.
4. Worker peak RSS for csv at 1/10 of the rows and at all of them.

Prints one line per measurement and the ratios (throughput: higher is better for qexport).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import xlsxwriter

from bench_store import metadata_store
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.demo_data import build_demo_database

ORDERS_SQL = "SELECT * FROM orders"
REQUESTER = Requester("bench", "bench")


@dataclass
class Run:
    seconds: float
    rows: int
    size: int
    peak_rss_mib: float


def duckdb_copy(db: Path, sql: str, target: Path, options: str) -> float:
    con = duckdb.connect(str(db), read_only=True)
    started = time.perf_counter()
    con.execute(f"COPY ({sql}) TO '{target}' ({options})")
    elapsed = time.perf_counter() - started
    con.close()
    target.unlink()
    return elapsed


def raw_xlsxwriter(db: Path, sql: str, target: Path) -> float:
    """The anchor: rows from DuckDB written cell by cell with XlsxWriter constant_memory."""
    con = duckdb.connect(str(db), read_only=True)
    started = time.perf_counter()
    cursor = con.execute(sql)
    workbook = xlsxwriter.Workbook(str(target), {"constant_memory": True})
    sheet = workbook.add_worksheet()
    sheet.write_row(0, 0, [d[0] for d in cursor.description])
    row_number = 1
    while batch := cursor.fetchmany(50_000):
        for row in batch:
            sheet.write_row(row_number, 0, row)
            row_number += 1
    workbook.close()
    elapsed = time.perf_counter() - started
    con.close()
    target.unlink()
    return elapsed


def qexport_export(data_dir: Path, query_name: str, fmt: str) -> Run:
    """Request one export and let a fresh worker process run it; time request -> succeeded."""
    settings = Settings(data_dir=data_dir)
    store = metadata_store(settings)
    env = {
        **os.environ,
        "QEXPORT_DATA_DIR": str(data_dir),
        "QEXPORT_POLL_SECONDS": "0.02",
        # The demo source is used by the workspaces it is granted to; the bench's is one.
        "QEXPORT_SOURCE_DEMO_WORKSPACES": REQUESTER.workspace_id,
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "qexport", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(3)  # let the worker import and start polling, so its start-up is not timed
    record = record_request(
        store,
        store,
        SystemClock(),
        REQUESTER,
        RequestExport(SubjectRef("query", query_name, by_name=True), fmt),
    )
    while (done := store.get_export(record.id)) is not None and not done.settled:
        time.sleep(0.2)
    peak_kib = _peak_rss_kib(worker.pid)
    worker.terminate()
    _, status, _usage = os.wait4(worker.pid, 0)
    stderr = worker.stderr.read().decode() if worker.stderr else ""
    if status != 0 or done is None or done.status.value != "succeeded":
        raise SystemExit(f"qexport {fmt} export did not succeed: {done}\n{stderr[-2000:]}")
    assert done.completed_at is not None
    seconds = (done.completed_at - done.created_at).total_seconds()
    return Run(seconds, done.row_count or 0, done.size_bytes or 0, peak_kib / 1024)


def _peak_rss_kib(pid: int) -> int:
    """The process's own peak RSS (VmHWM). Not ru_maxrss: that also counts the parent's
    memory at fork time, which is this benchmark's, not the worker's."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/<pid>/status")


def prepare(data_dir: Path, rows: int, xlsx_rows: int) -> Path:
    settings = Settings(data_dir=data_dir)
    build_demo_database(settings.demo_database, orders=rows)
    store = metadata_store(settings, upgrade=True)
    queries = {
        "all_orders": ORDERS_SQL,
        "first_orders": f"SELECT * FROM orders ORDER BY order_id LIMIT {xlsx_rows}",
        "tenth_orders": f"SELECT * FROM orders LIMIT {rows // 10}",
    }
    for name, sql in queries.items():
        if store.find_query(REQUESTER.workspace_id, name) is None:
            store.add_query(Query(str(uuid.uuid4()), REQUESTER.workspace_id, name, sql, "demo"))
    return settings.demo_database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--xlsx-rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("bench/results"))
    parser.add_argument("--repeat", type=int, default=5, help="best of N for csv and parquet")
    parser.add_argument(
        "--only", choices=["csv", "parquet", "xlsx", "memory"], help="run one measurement"
    )
    args = parser.parse_args()
    data_dir = args.dir.absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"preparing {args.rows:,} orders in {data_dir} ...", flush=True)
    db = prepare(data_dir, args.rows, args.xlsx_rows)
    results: dict[str, object] = {"rows": args.rows, "xlsx_rows": args.xlsx_rows}

    for fmt, options in (("csv", "FORMAT csv, HEADER"), ("parquet", "FORMAT parquet")):
        if args.only not in (None, fmt):
            continue
        # Best of `--repeat` for both sides, taken in turns so that the machine's drift (disk
        # write-back, other load; +-10% here) falls on both alike.
        anchors, runs = [], []
        for _ in range(args.repeat):
            anchors.append(duckdb_copy(db, ORDERS_SQL, data_dir / f"anchor.{fmt}", options))
            runs.append(qexport_export(data_dir, "all_orders", fmt))
        anchor = min(anchors)
        ours = min(runs, key=lambda run: run.seconds)
        ratio = anchor / ours.seconds
        print(
            f"{fmt:8} duckdb COPY {anchor:6.2f} s | qexport {ours.seconds:6.2f} s "
            f"({ours.size / 2**20:,.0f} MiB, peak RSS {ours.peak_rss_mib:,.0f} MiB) "
            f"| qexport throughput = {ratio:.2f}x COPY (target >= 0.8x)",
            flush=True,
        )
        results[fmt] = {
            "duckdb_s": anchor,
            "qexport_s": ours.seconds,
            "ratio": ratio,
            "peak_rss_mib": ours.peak_rss_mib,
        }

    if args.only not in (None, "xlsx", "memory"):
        return
    first_sql = f"SELECT * FROM orders ORDER BY order_id LIMIT {args.xlsx_rows}"
    if args.only != "memory":
        anchor = raw_xlsxwriter(db, first_sql, data_dir / "anchor.xlsx")
        ours = qexport_export(data_dir, "first_orders", "xlsx")
        ratio = anchor / ours.seconds
        print(
            f"xlsx     XlsxWriter  {anchor:6.2f} s | qexport {ours.seconds:6.2f} s (peak RSS"
            f" {ours.peak_rss_mib:,.0f} MiB) | qexport = {ratio:.2f}x faster (target >= 3x)",
            flush=True,
        )
        results["xlsx"] = {"xlsxwriter_s": anchor, "qexport_s": ours.seconds, "ratio": ratio}
        if args.only == "xlsx":
            return

    small = qexport_export(data_dir, "tenth_orders", "csv")
    big = qexport_export(data_dir, "all_orders", "csv")
    growth = big.peak_rss_mib / small.peak_rss_mib
    print(
        f"memory   worker peak RSS {small.peak_rss_mib:,.0f} MiB at {small.rows:,} rows, "
        f"{big.peak_rss_mib:,.0f} MiB at {big.rows:,} rows: {growth:.2f}x "
        f"(target <= 1.1x and <= 512 MiB)",
        flush=True,
    )
    results["memory"] = {
        "small_rows": small.rows,
        "small_mib": small.peak_rss_mib,
        "big_rows": big.rows,
        "big_mib": big.peak_rss_mib,
        "growth": growth,
    }
    (data_dir / "export_speed.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
