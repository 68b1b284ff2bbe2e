"""What the generic SQLAlchemy source costs: its rows read into Arrow batches, against the raw
driver's own fetch loop over the same query, in the same run, on SQLite and on MariaDB.

    python bench/generic_export.py [--rows 1000000] [--repeat 3] [--only sqlite|mariadb]

1. Makes a table of `--rows` orders (an integer, a DECIMAL(12,2), a double, a text, a
   datetime) in a SQLite file and in a throwaway MariaDB server of its own (Debian's
   mariadbd, as tests/support/mariadb.py starts it; skipped when it is not installed).
2. In turns, best of `--repeat` each: the driver alone (sqlite3, MySQLdb with an unbuffered
   cursor) executing `SELECT * FROM orders` and calling fetchmany(10000) until done, keeping
   nothing; and qexport's GenericSource streaming the same query into Arrow record batches
   (sqlalchemy+sqlite:///..., sqlalchemy+mysql+mysqldb://...).
3. Prints both times and the throughput ratio (generic / driver): the share of the driver's
   speed an export through the generic source keeps before any writer runs.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.mariadb, from the repo

from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.sources.generic.source import from_url

SQL = "SELECT * FROM orders"
FETCH = 10_000
REQUESTER = Requester("bench", "bench")


def best(repeat: int, run: Callable[[], int]) -> tuple[float, int]:
    """The fastest of `repeat` runs, and the rows it read."""
    times, rows = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = run()
        times.append(time.perf_counter() - started)
    return min(times), rows


def generic(url: str) -> Callable[[], int]:
    source = from_url("bench", url, Settings())

    def run() -> int:
        stream = source.execute(SQL, {}, REQUESTER, timeout_seconds=0)
        try:
            return sum(batch.num_rows for batch in stream)
        finally:
            stream.close()

    return run


def drain(cursor: Any) -> int:
    rows = 0
    while chunk := cursor.fetchmany(FETCH):
        rows += len(chunk)
    return rows


def sqlite_file(directory: Path, rows: int) -> Path:
    path = directory / "orders.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (id INTEGER, total NUMERIC, ratio REAL, note TEXT, at TEXT)")
    con.execute(
        "INSERT INTO orders WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
        f" WHERE i < {int(rows)}) SELECT i, (i * 104729 % 1000000) / 100.0, (i % 1000) / 7.0,"
        " 'note ' || (i % 1000), datetime(1700000000 + i, 'unixepoch') FROM n"
    )
    con.commit()
    con.close()
    return path


def sqlite_driver(path: Path) -> Callable[[], int]:
    def run() -> int:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return drain(con.execute(SQL))
        finally:
            con.close()

    return run


def compare(name: str, repeat: int, driver: Callable[[], int], ours: Callable[[], int]) -> None:
    anchors, runs = [], []
    for _ in range(repeat):  # in turns: the machine's drift hits both alike
        anchors.append(best(1, driver))
        runs.append(best(1, ours))
        print(
            f"  {name}: driver {anchors[-1][0]:6.2f} s | generic {runs[-1][0]:6.2f} s", flush=True
        )
    anchor, rows = min(anchors)
    seconds, ours_rows = min(runs)
    assert rows == ours_rows, (rows, ours_rows)
    print(
        f"{name:8} driver fetch loop {anchor:6.2f} s ({rows / anchor / 1e6:.2f}M rows/s)"
        f" | generic source to Arrow {seconds:6.2f} s ({rows / seconds / 1e6:.2f}M rows/s)"
        f" | generic = {anchor / seconds:.2f}x the driver",
        flush=True,
    )


def mariadb(directory: Path, rows: int, repeat: int) -> None:
    from tests.support.mariadb import MARIADBD, start_server, stop_server

    if not Path(MARIADBD).is_file():
        print(f"mariadb  skipped: {MARIADBD} is not installed")
        return
    import MySQLdb
    import MySQLdb.cursors

    (directory / "mariadb").mkdir()
    server, process = start_server(directory / "mariadb")
    try:
        server.execute(
            "CREATE DATABASE bench",
            "USE bench",
            "CREATE TABLE orders (id BIGINT, total DECIMAL(12, 2), ratio DOUBLE,"
            " note VARCHAR(40), at DATETIME)",
            "INSERT INTO orders SELECT seq, (seq * 104729 % 1000000) / 100, (seq % 1000) / 7,"
            " CONCAT('note ', seq % 1000), FROM_UNIXTIME(1700000000 + seq)"
            f" FROM seq_1_to_{int(rows)}",
            "CREATE USER 'bench'@'%' IDENTIFIED BY 'bench'",
            "GRANT SELECT ON bench.* TO 'bench'@'%'",
        )

        def driver() -> int:
            con = MySQLdb.connect(
                host=server.host,
                port=server.port,
                user="bench",
                password="bench",  # noqa: S106 - the throwaway server's own login
                database="bench",
                cursorclass=MySQLdb.cursors.SSCursor,
            )
            try:
                cursor = con.cursor()
                cursor.execute(SQL)
                return drain(cursor)
            finally:
                con.close()

        url = f"sqlalchemy+mysql+mysqldb://bench:bench@{server.host}:{server.port}/bench"
        compare("mariadb", repeat, driver, generic(url))
    finally:
        stop_server(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each side")
    parser.add_argument("--only", choices=["sqlite", "mariadb"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qexport-bench-") as folder:
        directory = Path(folder)
        if args.only in (None, "sqlite"):
            print(f"creating {args.rows:,} orders in SQLite ...", flush=True)
            path = sqlite_file(directory, args.rows)
            compare(
                "sqlite", args.repeat, sqlite_driver(path), generic(f"sqlalchemy+sqlite:///{path}")
            )
        if args.only in (None, "mariadb"):
            print(f"creating {args.rows:,} orders in MariaDB ...", flush=True)
            mariadb(directory, args.rows, args.repeat)


if __name__ == "__main__":
    main()
