"""`qexport demo` on a fresh data dir: every format exported, downloadable, checksummed."""

from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path

from qexport.store.schedules import SqlScheduleStore
from tests.e2e.conftest import Env

SCHEDULE_LINE = re.compile(
    r"schedule 'revenue_by_month' -> webhook delivered, signature verified,"
    r" next run Mon \d{4}-\d\d-\d\d 08:00 Europe/Berlin"
)


def test_the_demo_exports_every_format(tmp_path: Path) -> None:
    """The demo exits 0, every export (each file format, the sample report as PDF, XLSX and
    HTML, and one fired by the sample schedule) succeeded, each file matches its record, and
    the schedule's webhook was delivered with a signature the receiver verified."""
    env = Env(tmp_path / "data")
    proc = env.run("demo", "--rows", "20000", timeout=300)
    for fmt in ("csv", "tsv", "jsonl", "parquet", "xlsx"):
        assert fmt in proc.stdout
    assert "Try next" in proc.stdout
    assert SCHEDULE_LINE.search(proc.stdout), proc.stdout
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
    scheduled = [i for i in everything if i["subject"]["name"] == "revenue_by_month"]
    assert [i["format"] for i in scheduled] == ["csv"]
    items = [i for i in everything if i["subject"]["name"] == "orders"]
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
    # Running it again reuses the data, the saved queries and the schedule (its webhook now
    # pointing at the new run's receiver).
    again = env.run("demo", "--rows", "20000", timeout=300)
    assert again.returncode == 0
    assert SCHEDULE_LINE.search(again.stdout), again.stdout
    assert len(env.json("exports", "list")["items"]) == 18
    assert len(SqlScheduleStore(env.store.engine).list_schedules("demo")) == 1
