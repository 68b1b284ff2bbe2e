"""PostgreSQL source to csv, end to end, against `psql \\copy` of the same query in the same run.

    python bench/pg_copy_speed.py [--rows 5000000] [--repeat 3] [--dir bench/results/pg]

1. Creates a throwaway database on the PostgreSQL server of QEXPORT_TEST_DATABASE_URL (default
   postgresql://postgres@127.0.0.1:5432/postgres) with a table of `--rows` orders: integers,
   numeric(12,2), numeric(10,4), float8, text (some with commas, quotes, formula-looking or
   NULL), a date, a timestamptz and a boolean.
2. In turns, best of `--repeat` each: `psql -c "\\copy (SELECT ...) TO 'file' CSV HEADER"`, and
   qexport's whole export of the same query to csv (request recorded -> succeeded, the file
   complete in the filesystem object store, formula neutralisation on, as exports run by
   default), run by a `qexport worker` subprocess.
3. Prints both times and the throughput ratio (target >= 0.9x psql), then drops the database.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import sqlalchemy as sa

from bench_store import SqlMetadataStore, metadata_store
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.services.requests import record_request

SERVER_URL = os.environ.get("QEXPORT_TEST_DATABASE_URL") or (
    "postgresql://postgres@127.0.0.1:5432/postgres"
)
SOURCE = "bench"
QUERY_NAME = "all_orders"
ORDERS_SQL = "SELECT * FROM orders"
REQUESTER = Requester("bench", "bench")

_CREATE = """
CREATE TABLE orders AS
SELECT
    i AS order_id,
    (1 + (i * 7919) % 50000)::int AS customer_id,
    ((i * 104729) % 1000000 / 100.0)::numeric(12, 2) AS total,
    ((i * 31) % 100000 / 10000.0)::numeric(10, 4) AS unit_price,
    ((i % 1000) / 7.0)::float8 AS ratio,
    'customer ' || (1 + (i * 7919) % 50000) AS customer_name,
    CASE
        WHEN i % 5 = 0 THEN NULL
        WHEN i % 97 = 0 THEN '=HYPERLINK("http://example.com")'
        WHEN i % 11 = 0 THEN 'leave at the door, "please"'
        ELSE 'note ' || (i % 1000)
    END AS note,
    DATE '2024-01-01' + (i % 700)::int AS order_day,
    TIMESTAMPTZ '2024-01-01 00:00:00+00' + i * INTERVAL '1 second' AS ordered_at,
    i % 3 = 0 AS paid
FROM generate_series(1::bigint, {rows}) AS s(i)
"""


def database_url(name: str) -> str:
    return sa.make_url(SERVER_URL).set(database=name).render_as_string(hide_password=False)


def create_database(name: str, rows: int) -> None:
    with psycopg.connect(SERVER_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(database_url(name), autocommit=True) as conn:
        conn.execute(_CREATE.format(rows=int(rows)))
        # Hint bits set and statistics fresh, so that no run pays for the table's first read.
        conn.execute("VACUUM ANALYZE orders")


def drop_database(name: str) -> None:
    with psycopg.connect(SERVER_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def psql_copy(url: str, target: Path) -> float:
    command = f"\\copy ({ORDERS_SQL}) TO '{target}' CSV HEADER"
    started = time.perf_counter()
    subprocess.run(["psql", url, "-X", "-q", "-c", command], check=True)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def prepare(data_dir: Path) -> SqlMetadataStore:
    store = metadata_store(Settings(data_dir=data_dir), upgrade=True)
    if store.find_query(REQUESTER.workspace_id, QUERY_NAME) is None:
        store.add_query(
            Query(str(uuid.uuid4()), REQUESTER.workspace_id, QUERY_NAME, ORDERS_SQL, SOURCE)
        )
    return store


def qexport_export(data_dir: Path, store: SqlMetadataStore, url: str) -> tuple[float, int, int]:
    """Request one csv export and let a fresh worker run it; time request -> succeeded."""
    env = {
        **os.environ,
        "QEXPORT_DATA_DIR": str(data_dir),
        "QEXPORT_POLL_SECONDS": "0.02",
        f"QEXPORT_SOURCE_{SOURCE.upper()}": url,
        f"QEXPORT_SOURCE_{SOURCE.upper()}_WORKSPACES": "*",
        # The benchmark reads as the server's superuser, like the psql it is compared with.
        f"QEXPORT_SOURCE_{SOURCE.upper()}_ALLOW_PRIVILEGED_ROLE": "true",
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
        RequestExport(SubjectRef("query", QUERY_NAME, by_name=True), "csv"),
    )
    while (done := store.get_export(record.id)) is not None and not done.settled:
        time.sleep(0.1)
    worker.terminate()
    _, stderr = worker.communicate()
    if done is None or done.status.value != "succeeded" or done.completed_at is None:
        raise SystemExit(f"qexport export did not succeed: {done}\n{stderr.decode()[-2000:]}")
    seconds = (done.completed_at - done.created_at).total_seconds()
    # The file is not needed, and 5M rows of csv would fill the disk over the runs.
    Path(data_dir / "objects" / done.storage_key).unlink(missing_ok=True)
    return seconds, done.row_count or 0, done.size_bytes or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each side")
    parser.add_argument("--dir", type=Path, default=Path("bench/results/pg"))
    args = parser.parse_args()
    data_dir = args.dir.absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"creating {args.rows:,} orders in a throwaway database ...", flush=True)
    database = f"qexport_bench_{uuid.uuid4().hex[:8]}"
    try:
        create_database(database, args.rows)
        url = database_url(database)
        store = prepare(data_dir)
        anchors, runs = [], []
        # In turns, so that the machine's drift (other load, disk write-back) hits both alike.
        for _ in range(args.repeat):
            anchors.append(psql_copy(url, data_dir / "anchor.csv"))
            runs.append(qexport_export(data_dir, store, url))
            print(f"  psql \\copy {anchors[-1]:6.2f} s | qexport {runs[-1][0]:6.2f} s", flush=True)
        anchor = min(anchors)
        seconds, rows, size = min(runs)
        ratio = anchor / seconds
        print(
            f"csv      psql \\copy {anchor:6.2f} s ({args.rows / anchor / 1e6:.2f}M rows/s)"
            f" | qexport {seconds:6.2f} s ({rows:,} rows, {size / 2**20:,.0f} MiB)"
            f" | qexport throughput = {ratio:.2f}x psql \\copy (target >= 0.9x)",
            flush=True,
        )
        result = {"rows": rows, "psql_s": anchor, "qexport_s": seconds, "ratio": ratio}
        (data_dir / "pg_copy_speed.json").write_text(json.dumps(result, indent=2))
    finally:
        drop_database(database)


if __name__ == "__main__":
    main()
