"""`qexport demo` on a fresh data dir: every format exported, downloadable, checksummed."""

from __future__ import annotations

import csv
import hashlib
import io
import re
import zipfile
from pathlib import Path

from pypdf import PdfReader

from qexport.store.schedules import SqlScheduleStore
from tests.e2e.conftest import Env

SCHEDULE_LINE = re.compile(
    r"schedule 'revenue_by_month' -> webhook delivered, signature verified,"
    r" next run Mon \d{4}-\d\d-\d\d 08:00 Europe/Berlin"
)


CATEGORIES = ("Electronics", "Home", "Kitchen", "Office", "Outdoor", "Toys")
PANELS = ("revenue by category", "orders by category")


def _check_revenue_chart(fmt: str, data: bytes) -> None:
    """The sample report's "Revenue per month" draws a line per category (not one line
    zig-zagging through six categories a month), revenue and order counts on axes of
    their own."""
    if fmt == "pdf":
        text = "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)
        lines = [line.strip() for line in text.splitlines()]
        assert [lines.count(title) for title in PANELS] == [1, 1]
        assert [lines.count(name) for name in CATEGORIES] == [2] * 6  # each panel's legend
        assert lines.count("2024-01-01") == 2  # a month once per panel, not once per row
    elif fmt == "xlsx":
        with zipfile.ZipFile(io.BytesIO(data)) as book:
            charts = sorted(n for n in book.namelist() if n.startswith("xl/charts/chart"))
            xml = [book.read(n).decode() for n in charts]
        assert len(xml) == len(PANELS)
        for chart, title in zip(xml, PANELS, strict=True):
            assert f"Revenue per month: {title}" in chart
            assert chart.count("<c:ser>") == len(CATEGORIES)
    else:
        page = data.decode()
        for title in PANELS:
            assert f'aria-label="Revenue per month: {title}"' in page
        assert page.count("<polyline") == 2 * len(CATEGORIES)
        for name in CATEGORIES:
            assert page.count(f">{name}</text>") == 2


def test_the_demo_exports_every_format(tmp_path: Path) -> None:
    """The demo exits 0, every export (each file format, the sample report as PDF, XLSX and
    HTML, and one fired by the sample schedule) succeeded, each file matches its record, and
    the schedule's webhook was delivered with a signature the receiver verified; the report's
    chart shows one line per category."""
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
        _check_revenue_chart(item["format"], out.read_bytes())
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
