"""Report exports end to end on a worker: row-level rules, query failures, bounded memory."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import openpyxl
import pypdf
import pytest

from qexport.config import Settings
from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode
from qexport.domain.reports import Display
from qexport.reports.html import HtmlDocument
from qexport.reports.pdf import PdfDocument
from qexport.reports.xlsx import XlsxDocument
from tests.integration.report_env import ALICE, BOB, ReportEnv, make_env, section
from tests.support.stores import SqlMetadataStore

MINE_SQL = "SELECT id, owner, amount FROM orders WHERE owner = $user_id ORDER BY id"


@pytest.fixture
def large_shop_reports(sqlite_store: SqlMetadataStore, tmp_path: Path) -> ReportEnv:
    return make_env(sqlite_store, tmp_path, rows=1000)


@pytest.mark.parametrize("fmt", ["pdf", "xlsx", "html"])
def test_each_requester_sees_only_their_rows(large_shop_reports: ReportEnv, fmt: str) -> None:
    """The same report requested by alice and by bob, over a query filtered by the
    requester ($user_id): each document holds only that person's rows."""
    mine = large_shop_reports.add_query("mine", MINE_SQL)
    report = large_shop_reports.add_report("My orders", section("Orders", mine, row_cap=5))
    docs = {}
    for requester in (ALICE, BOB):
        record = large_shop_reports.run(large_shop_reports.request(report, fmt, requester))
        assert record.status is Status.SUCCEEDED, record.failure_detail
        assert record.row_count == 5
        docs[requester.user_id] = large_shop_reports.file(record)
    if fmt == "xlsx":
        owners = {
            user: {
                row[1]
                for row in openpyxl.load_workbook(io.BytesIO(doc))["Orders"].iter_rows(
                    min_row=2, values_only=True
                )
            }
            for user, doc in docs.items()
        }
        assert owners == {"alice": {"alice"}, "bob": {"bob"}}
        return
    texts = {
        user: (
            "".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(doc)).pages)
            if fmt == "pdf"
            else doc.decode()
        )
        for user, doc in docs.items()
    }
    assert texts["alice"].count("<td>alice</td>" if fmt == "html" else "alice\n") == 5
    assert "bob" not in texts["alice"].replace("bob@example.com", "")
    assert "alice" not in texts["bob"].replace("alice@example.com", "")


@pytest.mark.parametrize(
    ("sql", "timeout", "code"),
    [
        ("SELECT count(*) AS n FROM range(100000000000) a", 0.5, FailureCode.QUERY_TIMEOUT),
        ("SELECT no_such_column FROM orders", 30, FailureCode.QUERY_INVALID),
    ],
)
def test_a_failing_section_settles_with_its_query_code(
    large_shop_reports: ReportEnv, sql: str, timeout: float, code: FailureCode
) -> None:
    """The second section's query times out (or is invalid): the export fails with that
    query's code, the detail names the section, and nothing is stored at the key."""
    large_shop_reports.deps = dataclasses.replace(
        large_shop_reports.deps,
        settings=Settings(
            data_dir=large_shop_reports.deps.settings.data_dir, statement_timeout_seconds=timeout
        ),
    )
    good = large_shop_reports.add_query("good", "SELECT id FROM orders LIMIT 3")
    bad = large_shop_reports.add_query("bad", sql)
    report = large_shop_reports.add_report(
        "Broken", section("Fine", good), section("Slow or wrong", bad)
    )
    for fmt in ("pdf", "xlsx", "html"):
        record = large_shop_reports.run(large_shop_reports.request(report, fmt))
        assert (record.status, record.failure_code) == (Status.FAILED, code)
        assert "Slow or wrong" in (record.failure_detail or "")
        assert large_shop_reports.deps.objects.head(record.storage_key) is None
        assert large_shop_reports.deps.objects.incomplete_uploads(record.storage_key) == []


@pytest.mark.parametrize("fmt", ["pdf", "xlsx", "html"])
@pytest.mark.parametrize("rows", [5, 0])
def test_a_chart_without_numbers_fails_render_failed(
    large_shop_reports: ReportEnv, fmt: str, rows: int
) -> None:
    """A bar chart over a query with no numeric column after the label column settles
    render_failed in every format, with or without rows, naming the section; nothing stored."""
    names = large_shop_reports.add_query(
        f"names{rows}", f"SELECT amount, owner, customer FROM orders LIMIT {rows}"
    )
    table = large_shop_reports.add_query("ids", "SELECT id FROM orders LIMIT 3")
    report = large_shop_reports.add_report(
        "Chart", section("Fine", table), section("Owners by name", names, Display.BAR)
    )
    record = large_shop_reports.run(large_shop_reports.request(report, fmt))
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.RENDER_FAILED)
    detail = record.failure_detail or ""
    assert "'Owners by name'" in detail
    assert "no numeric column" in detail
    assert "Traceback" not in detail
    assert large_shop_reports.deps.objects.head(record.storage_key) is None
    assert large_shop_reports.deps.objects.incomplete_uploads(record.storage_key) == []


_WRITERS = {"pdf": PdfDocument, "xlsx": XlsxDocument, "html": HtmlDocument}


@pytest.mark.parametrize("fmt", ["pdf", "xlsx", "html"])
@pytest.mark.parametrize("step", ["add", "finish"])
def test_an_unexpected_renderer_error_is_render_failed(
    large_shop_reports: ReportEnv, monkeypatch: pytest.MonkeyPatch, fmt: str, step: str
) -> None:
    """A renderer that raises something unexpected (here ValueError, while adding a section
    or finishing the document) settles render_failed: the detail names the format, the part
    and the error's type, never its message (it may quote row data) nor a traceback; the
    upload is aborted and nothing is stored."""

    def broken(*args: object) -> None:
        raise ValueError("row value alice-secret-42")

    monkeypatch.setattr(_WRITERS[fmt], step, broken)
    query = large_shop_reports.add_query("ids", "SELECT id, amount FROM orders LIMIT 3")
    report = large_shop_reports.add_report("Broken renderer", section("Ids", query))
    record = large_shop_reports.run(large_shop_reports.request(report, fmt))
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.RENDER_FAILED)
    detail = record.failure_detail or ""
    part = "section 'Ids'" if step == "add" else "the end of the document"
    assert f"the {fmt.upper()} renderer could not render {part} (ValueError)" in detail
    assert "alice-secret-42" not in detail
    assert "Traceback" not in detail
    assert large_shop_reports.deps.objects.head(record.storage_key) is None
    assert large_shop_reports.deps.objects.incomplete_uploads(record.storage_key) == []


def test_a_pdf_over_its_row_limit_fails_limit_exceeded(large_shop_reports: ReportEnv) -> None:
    """With QEXPORT_REPORT_PDF_MAX_ROWS at 50, a PDF of 30 + 30 rows fails limit_exceeded at
    the second section, with a message naming the limit and what to do instead; nothing is
    stored. 25 + 25 rows (exactly the limit) renders, and XLSX and HTML are not limited."""
    large_shop_reports.deps = dataclasses.replace(
        large_shop_reports.deps,
        settings=dataclasses.replace(large_shop_reports.deps.settings, report_pdf_max_rows=50),
    )
    query = large_shop_reports.add_query("ids", "SELECT id, amount FROM orders ORDER BY id")
    over = large_shop_reports.add_report(
        "Too long", section("First", query, row_cap=30), section("Second", query, row_cap=30)
    )
    record = large_shop_reports.run(large_shop_reports.request(over, "pdf"))
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.LIMIT_EXCEEDED)
    detail = record.failure_detail or ""
    assert "'Second'" in detail
    assert "at most 50 (QEXPORT_REPORT_PDF_MAX_ROWS)" in detail
    assert "xlsx or html" in detail
    assert "row_cap" in detail
    assert large_shop_reports.deps.objects.head(record.storage_key) is None
    assert large_shop_reports.deps.objects.incomplete_uploads(record.storage_key) == []
    for fmt in ("xlsx", "html"):
        other = large_shop_reports.run(large_shop_reports.request(over, fmt))
        assert (other.status, other.row_count) == (Status.SUCCEEDED, 60), other.failure_detail
    at_limit = large_shop_reports.add_report(
        "Just fits", section("First", query, row_cap=25), section("Second", query, row_cap=25)
    )
    fits = large_shop_reports.run(large_shop_reports.request(at_limit, "pdf"))
    assert (fits.status, fits.row_count) == (Status.SUCCEEDED, 50), fits.failure_detail


def _peak(env: ReportEnv, sections: int, fmt: str) -> tuple[int, int]:
    """(peak traced bytes, file size) of a report of `sections` x 1,000-row tables."""
    query = env.add_query(
        f"wide{sections}{fmt}",
        "SELECT id, customer, amount, day, paid, owner FROM orders ORDER BY id",
    )
    report = env.add_report(
        "Big", *(section(f"Part {i}", query, row_cap=1000) for i in range(sections))
    )
    record = env.request(report, fmt)
    tracemalloc.start()
    try:
        final = env.run(record)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert final.status is Status.SUCCEEDED, final.failure_detail
    assert final.row_count == sections * 1000
    assert final.size_bytes is not None
    return peak, final.size_bytes


@pytest.mark.parametrize("fmt", ["xlsx", "html"])
def test_memory_does_not_grow_with_the_number_of_sections(
    large_shop_reports: ReportEnv, fmt: str
) -> None:
    """20 sections x 1,000 rows peak far below 4x what 5 sections do (measured: 1.3-1.5x;
    XlsxWriter keeps a little state per sheet), while the file itself grows 4x: one section's
    rows are held at a time (a 1,000-row section is ~1 MiB as Python values; 8 MiB leaves room
    for the upload's part buffers, 256 KiB each here, and the source's batches)."""
    large_shop_reports.deps = dataclasses.replace(
        large_shop_reports.deps,
        settings=dataclasses.replace(large_shop_reports.deps.settings, part_size=256 * 1024),
    )
    small, small_size = _peak(large_shop_reports, 5, fmt)
    large, large_size = _peak(large_shop_reports, 20, fmt)
    assert large_size > 3 * small_size
    assert large < 8 * 1024 * 1024, f"peak {large / 2**20:.1f} MiB"
    assert large < small * 2, (small, large)


def test_pdf_memory_grows_by_the_page_not_by_the_section(
    sqlite_store: SqlMetadataStore, tmp_path: Path
) -> None:
    """On a worker, a PDF of one 4,000-row table peaks about as high as one of 4 x 1,000 rows
    (measured: 3.4 and 2.7 MiB; a table laid out as one splitting flowable peaked at 13 MiB):
    tables are laid out a page at a time, and the laid-out pages cost ~0.5 KiB a row."""
    env = make_env(sqlite_store, tmp_path, rows=4000)
    env.deps = dataclasses.replace(
        env.deps, settings=dataclasses.replace(env.deps.settings, part_size=256 * 1024)
    )
    query = env.add_query("wide", "SELECT id, customer, amount, day, paid, owner FROM orders")
    warm = env.run(env.request(env.add_report("Warm", section("One", query, row_cap=10)), "pdf"))
    assert warm.status is Status.SUCCEEDED, warm.failure_detail  # ReportLab imported, untraced
    peaks = {}
    for sections, rows in ((4, 1000), (1, 4000)):
        report = env.add_report(
            "Big", *(section(f"Part {i}", query, row_cap=rows) for i in range(sections))
        )
        record = env.request(report, "pdf")
        tracemalloc.start()
        try:
            final = env.run(record)
            _, peaks[sections] = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (final.status, final.row_count) == (Status.SUCCEEDED, 4000), final.failure_detail
    assert peaks[1] < 8 * 1024 * 1024, f"peak {peaks[1] / 2**20:.1f} MiB"
    assert peaks[1] < peaks[4] * 1.6, peaks


_PDF_SCRIPT = """
import datetime as dt, resource, sys
import pyarrow as pa
from qexport.config import Settings
from qexport.domain.reports import Display
from qexport.reports.model import DocumentInfo, SectionData
from qexport.reports.pdf import PdfDocument

class Null:
    size = 0
    def write(self, data):
        self.size += len(data)
        return len(data)

rows = Settings().report_pdf_max_rows
types = (pa.int64(), pa.string(), pa.float64(), pa.date32(), pa.bool_())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sink = Null()
doc = PdfDocument(DocumentInfo("Big", "", "me", dt.datetime.now(dt.UTC)), sink, max_rows=rows)
data = [(i, f"customer {i}", i * 2.5, dt.date(2025, 1, 1), i % 2 == 0) for i in range(rows)]
doc.add(SectionData("Part", Display.TABLE, ("id", "c", "a", "d", "p"), types, data, False))
del data
doc.finish()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, sink.size, rows)
"""


def test_a_pdf_at_the_default_row_limit_stays_far_below_a_worker_budget() -> None:
    """A PDF of QEXPORT_REPORT_PDF_MAX_ROWS' default (100,000 rows in one table, ~1,650 pages)
    grows the process by under 128 MiB (measured: ~56 MiB, rows included): ReportLab keeps
    the laid-out pages until it saves, ~0.5 KiB a row; one splitting table took 320 MiB."""
    result = subprocess.run(
        [sys.executable, "-c", _PDF_SCRIPT],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    grown_kib, size, rows = map(int, result.stdout.split())
    assert rows == 100_000
    assert size > 4_000_000
    assert grown_kib < 128 * 1024, (
        f"grew {grown_kib / 1024:.1f} MiB for a {size / 2**20:.1f} MiB file"
    )


def test_a_report_past_its_cell_budget_fails_limit_exceeded(large_shop_reports: ReportEnv) -> None:
    """With QEXPORT_REPORT_MAX_BYTES at 30,000, two sections of 100 rows x ~200-byte text
    (~22 KB each, counted as read) fail limit_exceeded at the second section in every format,
    naming it and the setting; nothing is stored. One such section renders."""
    large_shop_reports.deps = dataclasses.replace(
        large_shop_reports.deps,
        settings=dataclasses.replace(large_shop_reports.deps.settings, report_max_bytes=30_000),
    )
    wide = large_shop_reports.add_query(
        "wide", "SELECT id, repeat(owner, 40) AS note FROM orders ORDER BY id"
    )
    report = large_shop_reports.add_report(
        "Wide", section("First", wide, row_cap=100), section("Second", wide, row_cap=100)
    )
    for fmt in ("pdf", "xlsx", "html"):
        record = large_shop_reports.run(large_shop_reports.request(report, fmt))
        assert (record.status, record.failure_code) == (
            Status.FAILED,
            FailureCode.LIMIT_EXCEEDED,
        ), record.failure_detail
        detail = record.failure_detail or ""
        assert "section 'Second'" in detail
        assert "30,000 bytes" in detail
        assert "QEXPORT_REPORT_MAX_BYTES" in detail
        assert large_shop_reports.deps.objects.head(record.storage_key) is None
        assert large_shop_reports.deps.objects.incomplete_uploads(record.storage_key) == []
    one = large_shop_reports.run(
        large_shop_reports.request(
            large_shop_reports.add_report("One", section("First", wide, row_cap=100)), "html"
        )
    )
    assert (one.status, one.row_count) == (Status.SUCCEEDED, 100), one.failure_detail


def test_long_values_are_cut_for_display_in_html_and_kept_in_xlsx(
    large_shop_reports: ReportEnv,
) -> None:
    """A 5,000-character cell shows its first 999 characters and an ellipsis in an HTML
    table, a chart label its first 15 and an ellipsis; the XLSX cell keeps every character."""
    long = large_shop_reports.add_query(
        "long", "SELECT repeat('a', 4999) || 'Z' AS label, id FROM orders ORDER BY id LIMIT 2"
    )
    report = large_shop_reports.add_report(
        "Long", section("Table", long), section("Chart", long, Display.BAR)
    )
    html = large_shop_reports.run(large_shop_reports.request(report, "html"))
    assert html.status is Status.SUCCEEDED, html.failure_detail
    text = large_shop_reports.file(html).decode()
    assert f"<td>{'a' * 999}…</td>" in text
    assert f">{'a' * 15}…</text>" in text
    assert "a" * 1000 not in text
    assert "aZ" not in text
    xlsx = large_shop_reports.run(large_shop_reports.request(report, "xlsx"))
    assert xlsx.status is Status.SUCCEEDED, xlsx.failure_detail
    sheet = openpyxl.load_workbook(io.BytesIO(large_shop_reports.file(xlsx)))["Table"]
    assert sheet.cell(2, 1).value == "a" * 4999 + "Z"


_WIDE_LABELS_SCRIPT = """
import resource, sys, tempfile
from pathlib import Path
from qexport.domain.reports import Display
from qexport.store.engine import create_engine, migrate
from tests.support.stores import SqlMetadataStore
from tests.integration.report_env import make_env, section

tmp = Path(tempfile.mkdtemp(dir=sys.argv[1]))
engine = create_engine(f"sqlite:///{tmp / 'qexport.db'}")
migrate(engine)
env = make_env(SqlMetadataStore(engine), tmp, rows=10)
labels = env.add_query(
    "labels", "SELECT lpad(i::VARCHAR, 100000, 'x') AS label, i AS n FROM range(10000) t(i)"
)
report = env.add_report("Labels", section("Wide labels", labels, Display.BAR, row_cap=10000))
final = env.run(env.request(report, "html"))
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("RESULT", final.status.value, final.failure_code, peak_kib, sep="\\t")
print("DETAIL", final.failure_detail, sep="\\t")
"""


def test_a_chart_of_huge_labels_fails_limit_exceeded_without_exhausting_the_worker(
    tmp_path: Path,
) -> None:
    """A bar chart of 10,000 rows of 100 KB labels (1 GB of text; it took a worker from
    209 MB to 2.3 GB and on) fails limit_exceeded at the default 64 MiB, naming the section, in
    a worker process that peaks under 1.25 GiB. Measured: ~590 MiB on a quiet machine, up to
    950 MiB with both cores busy; ~420 MiB of it is DuckDB computing 2,048-row vectors of
    100 KB strings (a bare DuckDB process peaks at ~490 MiB reading 256 rows of them), more
    when its thread runs ahead of a starved reader, and ~160 MiB the worker at rest; qexport's
    part is the 256-row batches counted before they become Python values."""
    result = subprocess.run(
        [sys.executable, "-c", _WIDE_LABELS_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = dict(line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line)
    status, code, peak_kib = lines["RESULT"].split("\t")
    detail = lines["DETAIL"]
    assert (status, code) == ("failed", "limit_exceeded"), result.stdout
    assert "section 'Wide labels'" in detail
    assert "QEXPORT_REPORT_MAX_BYTES" in detail
    assert int(peak_kib) < 1280 * 1024, f"peak {int(peak_kib) / 1024:.0f} MiB"


@pytest.mark.parametrize("fmt", ["pdf", "xlsx", "html"])
@pytest.mark.parametrize(
    ("chart", "reason"),
    [
        ({"series": "colour"}, "its series column 'colour' is not in the query's result"),
        ({"values": ("customer",)}, "its value column 'customer' is not numeric"),
        ({"series": "day"}, "its series column 'day' is the first column"),
    ],
)
def test_chart_columns_the_result_lacks_fail_render_failed(
    large_shop_reports: ReportEnv, fmt: str, chart: dict[str, Any], reason: str
) -> None:
    """A series column the query does not return, a value column that is not numeric, or a
    series column that is the label column: the export settles render_failed before any row
    is read, saying which section and column, and listing the columns there are."""
    daily = large_shop_reports.add_query(
        "daily", "SELECT day, customer, owner, amount FROM orders LIMIT 5"
    )
    report = large_shop_reports.add_report(
        "Chart", section("Per day", daily, Display.LINE, **chart)
    )
    record = large_shop_reports.run(large_shop_reports.request(report, fmt))
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.RENDER_FAILED)
    detail = record.failure_detail or ""
    assert "section 'Per day' is a line chart" in detail
    assert reason in detail
    assert large_shop_reports.deps.objects.head(record.storage_key) is None
