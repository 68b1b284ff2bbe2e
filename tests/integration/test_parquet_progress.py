"""Rows read from a Parquet file as DuckDB writes it (sources/parquet_progress.py), and the
DuckDB source reporting them during a parquet export."""

from __future__ import annotations

from pathlib import Path

import duckdb

from qexport.sources.parquet_progress import ParquetRowCounter, leaf_count


def test_parquet_rows_are_read_from_the_pages_as_the_bytes_go_by(tmp_path: Path) -> None:
    """A file DuckDB wrote, fed in small uneven pieces, reports rows that grow and end at
    the file's row count; a struct counts its fields; a list column reports nothing."""
    con = duckdb.connect()
    target = tmp_path / "t.parquet"
    sql = "SELECT range AS i, 'x' || range AS s, {'a': range, 'b': 1.5} AS st FROM range(500000)"
    con.execute(f"COPY ({sql}) TO '{target}' (FORMAT parquet, COMPRESSION snappy)")
    data = memoryview(target.read_bytes())
    leaves = leaf_count(con.sql(sql).types)
    assert leaves == 4
    seen: list[int] = []
    counter = ParquetRowCounter(leaves, seen.append)
    for start in range(0, len(data), 12_345):
        counter.feed(data[start : start + 12_345])
    assert len(seen) >= 2
    assert seen == sorted(seen)
    assert seen[-1] == 500_000
    assert leaf_count(con.sql("SELECT [1, 2] AS l").types) is None
