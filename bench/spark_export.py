"""What the Spark Connect source costs: a Spark query exported to csv by qexport's worker path
(the source's Arrow batch stream into the csv writer), against the naive path in the same run
(the same Spark Connect client collecting the result with `toArrow()` and writing it with
`pyarrow.csv.write_csv`); and the worker's peak memory at 1M and 10M rows.

    python bench/spark_export.py [--rows 5000000] [--repeat 3] [--rss 1000000,10000000]

1. Starts a throwaway Spark Connect server of its own (pyspark's jars, as tests/support/spark.py
   starts it: local[2], bound to 127.0.0.1, with 3 GB: the server holds a partition's
   result until it is sent, and the naive path's whole result).
2. The query: `--rows` rows of a bigint, a double, a DECIMAL(12,2), a string and a
   timestamp, made by `range()` on the server in partitions of 250,000 rows.
3. In turns, best of `--repeat` each: the naive path, and qexport (SparkSource.execute into
   the csv writer, into a file). Prints both times and the throughput ratio (qexport /
   naive).
4. Peak RSS: for each row count of `--rss`, a child process exports the query through
   qexport's path and reports its peak RSS (psutil, sampled every 20 ms, and the kernel's
   ru_maxrss); prints the ratio of the largest to the smallest.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.spark, from the repo

from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.ports import WriterOptions
from qexport.sources.spark.source import from_url
from qexport.writers.registry import get_writer

REQUESTER = Requester("bench", "bench")


def query(rows: int) -> str:
    return (
        "SELECT id, id / 7.0D AS ratio, CAST((id * 104729) % 100000000 / 100.0 AS DECIMAL(12, 2))"
        " AS total, concat('note ', id % 1000) AS note,"
        " timestamp_seconds(1700000000 + id) AS at"
        f" FROM range(0, {int(rows)}, 1, {max(2, rows // 250_000)})"
    )


class FileSink:
    def __init__(self, path: Path) -> None:
        self.file = path.open("wb")

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        return self.file.write(data)


def qexport_csv(url: str, rows: int, path: Path) -> int:
    """The worker's path: the source's batches into qexport's csv writer."""
    source = from_url("bench", url, Settings())
    stream = source.execute(query(rows), {}, REQUESTER, timeout_seconds=0)
    sink = FileSink(path)
    try:
        return get_writer("csv").write(stream.schema, iter(stream), sink, WriterOptions())
    finally:
        stream.close()
        sink.file.close()


def naive_csv(url: str, rows: int, path: Path) -> int:
    """The same client collecting the result (`toArrow()`), written by pyarrow."""
    import pyarrow.csv
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(url).create()
    try:
        session.conf.set("spark.sql.session.timeZone", "UTC")
        table = session.sql(query(rows)).toArrow()
        pyarrow.csv.write_csv(table, str(path))
        return table.num_rows
    finally:
        session.stop()


def timed(run: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    rows = run()
    return time.perf_counter() - started, rows


def compare(url: str, rows: int, repeat: int, directory: Path) -> None:
    naive, ours = [], []
    for _ in range(repeat):  # in turns: the machine's drift hits both alike
        naive.append(timed(lambda: naive_csv(url, rows, directory / "naive.csv")))
        ours.append(timed(lambda: qexport_csv(url, rows, directory / "qexport.csv")))
        print(f"  naive {naive[-1][0]:6.2f} s | qexport {ours[-1][0]:6.2f} s", flush=True)
    (anchor, anchor_rows), (seconds, our_rows) = min(naive), min(ours)
    assert anchor_rows == our_rows == rows, (anchor_rows, our_rows)
    print(
        f"{rows:,} rows to csv: naive toArrow()+write_csv {anchor:6.2f} s"
        f" ({rows / anchor / 1e6:.2f}M rows/s) | qexport {seconds:6.2f} s"
        f" ({rows / seconds / 1e6:.2f}M rows/s) | qexport = {anchor / seconds:.2f}x naive",
        flush=True,
    )


def child(url: str, rows: int, path: str) -> None:
    """Run in a child process: export, and print the peak RSS as JSON."""
    import psutil

    process = psutil.Process()
    peak = [process.memory_info().rss]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    exported = qexport_csv(url, rows, Path(path))
    done.set()
    sampler.join()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rows": exported, "peak": peak[0], "maxrss": maxrss}))


def peak_rss(url: str, counts: list[int], directory: Path) -> None:
    found = {}
    for rows in counts:
        out = subprocess.run(
            [sys.executable, __file__, "--child", url, str(rows), str(directory / "rss.csv")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        assert figures["rows"] == rows
        found[rows] = figures
        print(
            f"  {rows:>11,} rows: peak RSS {figures['peak'] / 2**20:7.1f} MiB"
            f" (ru_maxrss {figures['maxrss'] / 2**20:7.1f} MiB)",
            flush=True,
        )
    low, high = found[min(counts)], found[max(counts)]
    print(
        f"peak RSS {max(counts):,} rows / {min(counts):,} rows ="
        f" {high['peak'] / low['peak']:.3f}x (ru_maxrss {high['maxrss'] / low['maxrss']:.3f}x)",
        flush=True,
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each side")
    parser.add_argument("--rss", default="1000000,10000000", help="row counts, comma separated")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    from tests.support.spark import start_server, stop_server

    with tempfile.TemporaryDirectory(prefix="qexport-bench-") as folder:
        directory = Path(folder)
        print("starting a Spark Connect server ...", flush=True)
        server, process = start_server(directory / "spark", memory="3g")
        try:
            if not args.skip_speed:
                compare(server.url, args.rows, args.repeat, directory)
            if args.rss:
                peak_rss(server.url, [int(n) for n in args.rss.split(",")], directory)
        finally:
            stop_server(process)


if __name__ == "__main__":
    main()
