"""`qexport demo` on a fresh data dir: every format exported, downloadable, checksummed."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

from tests.e2e.conftest import Env


def test_the_demo_exports_every_format(tmp_path: Path) -> None:
    """The demo exits 0, every export (each file format, and the sample report as PDF, XLSX
    and HTML) succeeded, and each file matches its record."""
    env = Env(tmp_path / "data")
    proc = env.run("demo", "--rows", "20000", timeout=300)
    for fmt in ("csv", "tsv", "jsonl", "parquet", "xlsx"):
        assert fmt in proc.stdout
    assert "Try next" in proc.stdout
    everything = env.json("exports", "list")["items"]
    for item in everything:
        assert item["status"] == "succeeded", item
    reports = [i for i in everything if i["subject"]["type"] == "report"]
    assert sorted(i["format"] for i in reports) == ["html", "pdf", "xlsx"]
    for item in reports:
        assert item["row_count"] > 0
        out = tmp_path / f"report.{item['format']}"
        env.run("exports", "download", item["id"], "-o", str(out))
        assert hashlib.sha256(out.read_bytes()).hexdigest() == item["sha256"]
    items = [i for i in everything if i["subject"]["type"] != "report"]
    assert sorted(i["format"] for i in items) == ["csv", "jsonl", "parquet", "tsv", "xlsx"]
    for item in items:
        assert item["row_count"] == 20_000
        out = tmp_path / item["filename"]
        env.run("exports", "download", item["id"], "-o", str(out))
        assert hashlib.sha256(out.read_bytes()).hexdigest() == item["sha256"]
    csv_item = next(i for i in items if i["format"] == "csv")
    with (tmp_path / csv_item["filename"]).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert len(rows) == 20_001
    # Running it again reuses the data and the saved queries.
    again = env.run("demo", "--rows", "20000", timeout=300)
    assert again.returncode == 0
    assert len(env.json("exports", "list")["items"]) == 16
