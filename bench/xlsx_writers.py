"""CPU time of qexport's two XLSX writers on the same table (time.process_time, best of N).

    python bench/xlsx_writers.py [--rows 200000] [--repeat 5]

One table of `--rows` rows and 6 columns (BIGINT, DOUBLE, VARCHAR, DATE, DECIMAL(12,2),
TIMESTAMP), written into a sink that counts and drops the bytes:
1. the export writer (writers/xlsx.py: SpreadsheetML generated column-wise with
   pyarrow.compute, deflated as it goes), from the table's record batches;
2. the report writer (reports/xlsx.py: XlsxWriter in constant-memory mode), from the same
   rows as a report section holds them (Python tuples; reading them is not timed), once as a
   table and once as a bar chart of the DOUBLE column (one native chart).

CPU time counts every thread of the process (the export writer encodes on a pool), so a busy
machine changes the figures less than it changes wall-clock time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa

from qexport.domain.reports import Display
from qexport.ports import WriterOptions
from qexport.reports.model import DocumentInfo, SectionData
from qexport.reports.xlsx import XlsxDocument
from qexport.writers.xlsx import XlsxFileWriter

BATCH_ROWS = 2_048  # what a DuckDB source hands the writer


class NullSink:
    """Counts the bytes it is given."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.size += len(data)
        return len(data)


def table(rows: int) -> pa.Table:
    start = dt.datetime(2024, 1, 1)
    return pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "amount": pa.array([i * 1.37 for i in range(rows)], pa.float64()),
            "customer": pa.array([f"customer {i % 5000}" for i in range(rows)], pa.string()),
            "day": pa.array([start.date() + dt.timedelta(days=i % 3650) for i in range(rows)]),
            "price": pa.array(
                [Decimal(i % 100_000) / 100 for i in range(rows)], pa.decimal128(12, 2)
            ),
            "paid_at": pa.array(
                [start + dt.timedelta(seconds=i * 37) for i in range(rows)], pa.timestamp("us")
            ),
        }
    )


def export_writer(data: pa.Table) -> int:
    sink = NullSink()
    batches = iter(data.to_batches(max_chunksize=BATCH_ROWS))
    XlsxFileWriter().write(data.schema, batches, sink, WriterOptions())
    return sink.size


def report_writer(data: pa.Table, rows: list[tuple[Any, ...]], display: Display) -> int:
    sink = NullSink()
    info = DocumentInfo("Bench", "", "bench", dt.datetime.now(dt.UTC))
    section = SectionData(
        heading="Orders",
        display=display,
        columns=tuple(data.column_names),
        types=tuple(data.schema.types),
        rows=rows,
        truncated=False,
        values=("amount",) if display is Display.BAR else (),
    )
    document = XlsxDocument(info, sink)
    try:
        document.add(section)
        document.finish()
    finally:
        document.close()
    return sink.size


def best_cpu(work: Callable[[], int], repeat: int) -> tuple[float, int]:
    """The least CPU time of `repeat` runs, and the bytes written."""
    best, size = float("inf"), 0
    for _ in range(repeat):
        started = time.process_time()
        size = work()
        best = min(best, time.process_time() - started)
    return best, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = table(args.rows)
    rows = list(zip(*(column.to_pylist() for column in data.columns), strict=True))
    runs: list[tuple[str, Callable[[], int]]] = [
        ("export writer (streaming)", lambda: export_writer(data)),
        ("report writer, table", lambda: report_writer(data, rows, Display.TABLE)),
        ("report writer, bar chart", lambda: report_writer(data, rows, Display.BAR)),
    ]
    first = None
    for name, work in runs:
        seconds, size = best_cpu(work, args.repeat)
        first = first or seconds
        print(
            f"{name:28} {seconds:6.2f} s CPU  {args.rows / seconds:>10,.0f} rows/s"
            f"  {size / 2**20:6.1f} MiB  {seconds / first:5.1f}x"
        )


if __name__ == "__main__":
    main()
