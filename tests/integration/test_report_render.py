"""Report documents read back: PDF text and pages, XLSX cells and types, HTML safety."""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import shutil
import subprocess
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import openpyxl
import pypdf
import pytest
import sqlalchemy as sa
from openpyxl.utils.escape import unescape

from qexport.domain.exports import Status
from qexport.domain.queries import Parameter, ParamType
from qexport.domain.reports import Display, Report
from qexport.store.tables.accounts import workspaces
from tests.integration.report_env import ALICE, WORKSPACE, ReportEnv, make_env, section
from tests.support.stores import SqlMetadataStore

ORDERS_SQL = "SELECT id, customer, amount, day, paid FROM orders ORDER BY id"
DAILY_SQL = "SELECT day, amount, id FROM orders ORDER BY id LIMIT 20"


@pytest.fixture
def shop_reports(sqlite_store: SqlMetadataStore, tmp_path: Path) -> ReportEnv:
    return make_env(sqlite_store, tmp_path)


def _pdf_pages(data: bytes) -> list[str]:
    return [page.extract_text() for page in pypdf.PdfReader(io.BytesIO(data)).pages]


def test_pdf_has_title_block_headings_cells_page_numbers_and_repeated_header(
    shop_reports: ReportEnv,
) -> None:
    """The PDF shows the title, the requester's email and the time in the workspace's zone,
    every heading and cell value, "page N of M" on each page, and a table that spans pages
    starts each page with its header row."""
    with shop_reports.store.engine.begin() as conn:
        conn.execute(sa.update(workspaces).values(timezone="Asia/Tokyo"))
    orders = shop_reports.add_query("orders", ORDERS_SQL)
    daily = shop_reports.add_query("daily", DAILY_SQL)
    report = shop_reports.add_report(
        "Sales <review> & more",
        section("Every order", orders),
        section("Amount per day", daily, Display.BAR),
        section("Trend", daily, Display.LINE),
        description="Numbers for the board",
    )
    record = shop_reports.run(shop_reports.request(report, "pdf"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    assert record.row_count == 120 + 20 + 20
    pages = _pdf_pages(shop_reports.file(record))
    text = "\n".join(pages)
    assert "Sales <review> & more" in text
    assert "Numbers for the board" in text
    assert "alice@example.com" in text
    assert re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d JST", text)
    for heading in ("Every order", "Amount per day", "Trend"):
        assert heading in text
    # Cell values: ids, amounts with two decimals, dates, booleans; a name Helvetica cannot
    # draw in full shows '?' for the missing character.
    for value in ("120", "300.00", "2025-05-01", "true", "false", "Zoë & Co ?"):
        assert value in text, value
    assert len(pages) >= 3
    for n, page in enumerate(pages, start=1):
        assert re.search(rf"page {n} of\s*{len(pages)}", page), page[:80]
    assert "Every order" not in pages[1]  # the table continues on page 2...
    assert re.search(r"id\s+customer\s+amount\s+day\s+paid", pages[1])  # ...under its header
    # Every order's row exactly once, in order, across the page breaks.
    table_text = text[: text.index("Amount per day")]
    # pypdf gives one line per cell: id, customer, amount, day, paid.
    row = r"^(\d+)\n[^\n]+\n\d+\.\d\d\n\d{4}-\d\d-\d\d\n(?:true|false)$"
    ids = [int(m) for m in re.findall(row, table_text, re.MULTILINE)]
    assert ids == list(range(1, 121))


CHART_SQL = (
    "SELECT 'Week ' || id AS week, amount * 1000 AS \"Gross takings\","
    ' id * 7 AS "Parcel count" FROM orders ORDER BY id LIMIT 6'
)


def test_pdf_charts_are_drawn_from_the_data(shop_reports: ReportEnv) -> None:
    """A bar and a line chart each draw the query's categories on the x axis, its numeric
    columns' names and the value axis up to the largest value (15,000): text that only the
    charts can have put in the document, since no table shows these rows. Takings (up to
    15,000) and parcel counts (up to 42) differ too much to share an axis: each chart draws
    them in two panels, titled with the column's name."""
    weekly = shop_reports.add_query("weekly", CHART_SQL)
    report = shop_reports.add_report(
        "Charts", section("Takings", weekly, Display.BAR), section("Trend", weekly, Display.LINE)
    )
    record = shop_reports.run(shop_reports.request(report, "pdf"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    pages = _pdf_pages(shop_reports.file(record))
    lines = [line.strip() for page in pages for line in page.splitlines()]
    for label in (f"Week {i}" for i in range(1, 7)):
        assert lines.count(label) == 4, (label, lines)  # once in each panel of each chart
    for label in ("Gross takings", "Parcel count"):
        assert lines.count(label) == 2, (label, lines)  # a panel's title, in each chart
    assert lines.count("15000") == 2  # the takings axis's top tick (6 x 2.5 x 1,000)
    assert lines.count("50") == 2  # the parcel count's own axis (6 x 7 = 42)
    assert lines.count("0") == 4


def test_request_parameters_reach_the_sections_that_leave_them_open(
    shop_reports: ReportEnv,
) -> None:
    """A section that leaves the query's parameter open runs with the value in the export
    request (7, then 2 rows); a section that fixes it (3) keeps its own value whatever the
    request says; the row count and the document's rows follow."""
    upto = shop_reports.add_query(
        "upto",
        "SELECT id, amount FROM orders WHERE id <= $upto ORDER BY id",
        [Parameter("upto", ParamType.INTEGER)],
    )
    report = shop_reports.add_report(
        "Parameters",
        section("Open", upto),
        section("Fixed", upto, parameters={"upto": 3}),
    )
    for requested in (7, 2):
        record = shop_reports.run(shop_reports.request(report, "xlsx", upto=requested))
        assert record.status is Status.SUCCEEDED, record.failure_detail
        assert record.row_count == requested + 3
        book = openpyxl.load_workbook(io.BytesIO(shop_reports.file(record)))
        ids = {
            name: [row[0] for row in book[name].iter_rows(min_row=2, values_only=True)]
            for name in ("Open", "Fixed")
        }
        assert ids == {"Open": list(range(1, requested + 1)), "Fixed": [1, 2, 3]}


def test_pdf_pages_render_to_png(shop_reports: ReportEnv, tmp_path: Path) -> None:
    """Every page of the PDF renders with poppler's pdftoppm (required when CI is set)."""
    if shutil.which("pdftoppm") is None:
        if os.environ.get("CI"):
            pytest.fail("pdftoppm (poppler-utils) is required in CI")
        pytest.skip("pdftoppm (poppler-utils) is not installed: PDF pages not rasterised")
    orders = shop_reports.add_query("orders", ORDERS_SQL)
    daily = shop_reports.add_query("daily", DAILY_SQL)
    report = shop_reports.add_report(
        "Render", section("Orders", orders), section("Bars", daily, Display.BAR)
    )
    record = shop_reports.run(shop_reports.request(report, "pdf"))
    path = tmp_path / "report.pdf"
    path.write_bytes(shop_reports.file(record))
    result = subprocess.run(
        ["pdftoppm", "-r", "40", "-png", str(path), str(tmp_path / "page")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no syntax errors reported while rendering
    pngs = sorted(tmp_path.glob("page-*.png"))
    assert len(pngs) == len(pypdf.PdfReader(path).pages)
    assert all(p.read_bytes().startswith(b"\x89PNG") and p.stat().st_size > 1000 for p in pngs)


EXACT_SQL = (
    "SELECT * FROM (VALUES (1, 'a' || chr(27) || '[31mred', 'nan'::DOUBLE),"
    " (2, '_x0041_x0042_', 'inf'), (3, '<r><t>rich</t></r>', '-inf'),"
    " (4, chr(1) || chr(31) || chr(13) || '_x0041' || chr(7), 2.5)) t(id, s, x) ORDER BY id"
)


def test_xlsx_keeps_strings_and_non_finite_numbers_exact(shop_reports: ReportEnv) -> None:
    """Report cells keep every string exactly (control characters, `_xHHHH_` lookalikes, text
    shaped like rich-text markup; openpyxl leaves the `_xHHHH_` decoding to `unescape`), and
    NaN and infinities are the text "NaN", "Infinity" and "-Infinity", as in an exported xlsx."""
    query = shop_reports.add_query("exact", EXACT_SQL)
    report = shop_reports.add_report("Exact", section("Exact values", query))
    record = shop_reports.run(shop_reports.request(report, "xlsx"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    sheet = openpyxl.load_workbook(io.BytesIO(shop_reports.file(record)))["Exact values"]
    rows = [(unescape(s.value), x.value, x.data_type) for _, s, x in sheet.iter_rows(min_row=2)]
    assert rows == [
        ("a\x1b[31mred", "NaN", "s"),
        ("_x0041_x0042_", "Infinity", "s"),
        ("<r><t>rich</t></r>", "-Infinity", "s"),
        ("\x01\x1f\r_x0041\x07", 2.5, "n"),
    ]


def test_xlsx_cells_match_the_query_results(shop_reports: ReportEnv, tmp_path: Path) -> None:
    """One sheet per section and nothing else; the title, requester and generation time are
    the workbook's document properties; every cell, in table and chart sections alike, equals
    the query's value with its type (numbers, dates, booleans, text never turned into a
    formula); the header row is frozen; headings become valid unique sheet names."""
    orders = shop_reports.add_query("orders", ORDERS_SQL)
    daily = shop_reports.add_query("daily", DAILY_SQL)
    report = shop_reports.add_report(
        "Workbook",
        section("Orders: all/every [1]", orders),
        section("Orders: all/every [1]", daily, Display.BAR, row_cap=7),
        description="For the board",
    )
    with duckdb.connect(str(tmp_path / "shop.duckdb"), read_only=True) as con:
        expected = con.execute(ORDERS_SQL).fetchall()
        expected_daily = con.execute(DAILY_SQL).fetchall()[:7]
    before = dt.datetime.now(dt.UTC).replace(microsecond=0, tzinfo=None)
    record = shop_reports.run(shop_reports.request(report, "xlsx"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    book = openpyxl.load_workbook(io.BytesIO(shop_reports.file(record)))
    assert book.sheetnames == ["Orders- all-every -1-", "Orders- all-every -1- (2)"]
    props = book.properties
    assert props.title == "Workbook"
    assert props.creator == "alice@example.com"
    assert props.description is not None
    assert props.description.startswith("For the board\nRequested by alice@example.com")
    assert re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC$", props.description)
    assert props.created is not None
    assert before <= props.created <= dt.datetime.now(dt.UTC).replace(tzinfo=None)
    sheet = book["Orders- all-every -1-"]
    assert sheet.freeze_panes == "A2"
    rows = list(sheet.iter_rows(values_only=True))
    assert rows[0] == ("id", "customer", "amount", "day", "paid")
    assert len(rows) == 1 + len(expected)
    for got, want in zip(rows[1:], expected, strict=True):
        assert got[0] == want[0]
        assert isinstance(got[0], int)
        assert got[1] == want[1]
        assert isinstance(got[1], str)
        assert got[2] == want[2]
        assert isinstance(got[2], int | float)
        assert got[3] == dt.datetime.combine(want[3], dt.time())  # an Excel date
        assert got[4] is want[4]
    for row in sheet.iter_rows(min_row=2):
        assert row[1].data_type == "s"  # '=HYPERLINK(...)' stays text, never a formula
        assert row[3].number_format == "yyyy-mm-dd"
    chart_sheet = book["Orders- all-every -1- (2)"]
    assert chart_sheet.freeze_panes == "A2"
    capped = list(chart_sheet.iter_rows(values_only=True))
    assert capped[0] == ("day", "amount", "id")
    assert len(capped) == 1 + 7  # the section's row cap
    for got, want in zip(capped[1:], expected_daily, strict=True):
        assert got == (dt.datetime.combine(want[0], dt.time()), want[1], want[2])
        assert isinstance(got[1], int | float)  # a number cell (5.0 reads back as 5)
        assert isinstance(got[2], int)
    for row in chart_sheet.iter_rows(min_row=2):
        assert row[0].number_format == "yyyy-mm-dd"


# Every element the HTML renderer writes; anything else (script, link, img, iframe, object,
# embed, image, use, foreignObject...) could load or run something.
_ALLOWED_TAGS = frozenset(
    {
        "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "p",
        "section", "table", "thead", "tbody", "tr", "th", "td",
        "svg", "line", "text", "rect", "polyline",
    }
)  # fmt: skip
# Attributes that make a browser fetch or navigate somewhere.
_LOADING_ATTRIBUTES = frozenset(
    {
        "src", "href", "xlink:href", "srcset", "data", "action", "poster", "formaction",
        "background",
    }
)  # fmt: skip


class _Collector(HTMLParser):
    """Every tag with its attributes, the text inside <td> cells and inside <style>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cells: list[str] = []
        self.styles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("td", "style") else None

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "td":
            self.cells.append(data)
        elif self._in == "style":
            self.styles.append(data)


def test_html_is_self_contained_and_escapes_values(shop_reports: ReportEnv) -> None:
    """The HTML holds only elements from a known set, no attribute that loads or links
    anything (src, href, srcset, data...) nor an event handler, and no url() or @import in
    its styles; tables have a <thead>, charts are inline SVG, and a value like
    <script>alert(1)</script> is text in a cell, not markup."""
    orders = shop_reports.add_query("orders", ORDERS_SQL)
    daily = shop_reports.add_query("daily", DAILY_SQL)
    report = shop_reports.add_report(
        "<img src=x onerror=alert(1)>",
        section("Orders", orders),
        section("Per day", daily, Display.BAR),
        section("Trend", daily, Display.LINE),
    )
    record = shop_reports.run(shop_reports.request(report, "html"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    page = shop_reports.file(record).decode("utf-8")
    parser = _Collector()
    parser.feed(page)
    parser.close()
    tags = [tag for tag, _ in parser.tags]
    assert set(tags) <= _ALLOWED_TAGS, set(tags) - _ALLOWED_TAGS
    styles = list(parser.styles)
    for _, attrs in parser.tags:
        for name, value in attrs.items():
            assert name not in _LOADING_ATTRIBUTES, (name, value)
            assert not name.startswith("on"), name
            assert "url(" not in (value or "").lower(), (name, value)  # e.g. fill="url(...)"
            if name == "style":
                styles.append(value or "")
    assert styles  # the inline stylesheet was seen
    for style in styles:
        assert "url(" not in style.lower()
        assert "@import" not in style.lower()
    assert tags.count("table") == 1
    assert tags.count("thead") == 1
    assert tags.count("svg") == 2
    assert tags.count("rect") >= 20
    assert "polyline" in tags
    assert "<script>alert(1)</script>" in parser.cells
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Zoë & Co ✓" in parser.cells  # HTML keeps every character


def test_generation_time_defaults_to_utc(shop_reports: ReportEnv) -> None:
    """A workspace that sets no time zone gets the generation time in UTC."""
    orders = shop_reports.add_query("orders", "SELECT id FROM orders ORDER BY id LIMIT 3")
    report = shop_reports.add_report("Small", section("Ids", orders))
    record = shop_reports.run(shop_reports.request(report, "pdf"))
    assert re.search(r"generated [\d: -]+ UTC", "\n".join(_pdf_pages(shop_reports.file(record))))
    assert ALICE.workspace_id == WORKSPACE


GROUPED_SQL = (
    "SELECT date_trunc('month', day)::DATE AS month, owner, count(*) AS orders,"
    " sum(amount) AS revenue FROM orders GROUP BY ALL ORDER BY month, owner"
)
MONTHS = ("2025-01-01", "2025-02-01", "2025-03-01", "2025-04-01", "2025-05-01")


def _grouped(env: ReportEnv, display: Display = Display.LINE) -> Report:
    monthly = env.add_query("monthly", GROUPED_SQL)
    return env.add_report(
        "Grouped",
        section("Per month", monthly, display, series="owner", values=("revenue", "orders")),
    )


def _expected_pivot(tmp_path: Path) -> dict[tuple[dt.date, str], tuple[int, float]]:
    with duckdb.connect(str(tmp_path / "shop.duckdb"), read_only=True) as con:
        rows = con.execute(GROUPED_SQL).fetchall()
    return {(month, owner): (orders, revenue) for month, owner, orders, revenue in rows}


@pytest.mark.parametrize("display", [Display.LINE, Display.BAR])
def test_pdf_chart_grouped_by_a_series_column(shop_reports: ReportEnv, display: Display) -> None:
    """A chart of one row per month and owner draws each month once on the x axis (not once
    per row), one series per owner named in the legend, and revenue and the order count in
    panels of their own, each titled, each with its own value axis."""
    record = shop_reports.run(shop_reports.request(_grouped(shop_reports, display), "pdf"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    [page] = _pdf_pages(shop_reports.file(record))
    lines = [line.strip() for line in page.splitlines()]
    assert lines.count("revenue by owner") == lines.count("orders by owner") == 1
    for month in MONTHS:
        assert lines.count(month) == 2, (month, lines)  # once in each panel
    assert lines.count("alice") == lines.count("bob") == 2  # each panel's legend
    assert "1000" in lines  # revenue's own axis; the order counts' stops far below
    assert lines.index("revenue by owner") < lines.index("orders by owner")


def test_xlsx_chart_grouped_by_a_series_column(shop_reports: ReportEnv, tmp_path: Path) -> None:
    """The sheet keeps the query's rows as they are; beside them, a block per value column
    pivots them (a row per month, a column per owner, the query's numbers), and a native
    chart per block draws one series per owner from it, named by its header cell, over an
    axis of dates."""
    expected = _expected_pivot(tmp_path)
    record = shop_reports.run(shop_reports.request(_grouped(shop_reports), "xlsx"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    data = shop_reports.file(record)
    sheet = openpyxl.load_workbook(io.BytesIO(data))["Per month"]
    rows = list(sheet.iter_rows(values_only=True))
    assert rows[0][:4] == ("month", "owner", "orders", "revenue")
    header = rows[0]
    revenue_at, orders_at = header.index("revenue by owner"), header.index("orders by owner")
    assert header[revenue_at + 1 : revenue_at + 3] == ("alice", "bob")  # the ORDER BY's order
    months = sorted({month for month, _ in expected})
    for n, month in enumerate(months, start=1):
        assert rows[n][revenue_at] == dt.datetime.combine(month, dt.time())
        for offset, owner in ((1, "alice"), (2, "bob")):
            orders, revenue = expected.get((month, owner), (None, None))
            assert rows[n][revenue_at + offset] == pytest.approx(revenue)
            assert rows[n][orders_at + offset] == orders
    with zipfile.ZipFile(io.BytesIO(data)) as book:
        charts = sorted(n for n in book.namelist() if n.startswith("xl/charts/chart"))
        xml = [book.read(n).decode() for n in charts]
    assert len(xml) == 2
    for chart, title in zip(xml, ("revenue by owner", "orders by owner"), strict=True):
        assert "<c:lineChart>" in chart
        assert f"Per month: {title}" in chart
        assert chart.count("<c:ser>") == 2  # one per owner
        assert '<c:numFmt formatCode="yyyy-mm-dd"' in chart  # months, not serial numbers
        names = re.findall(r"<c:tx><c:strRef><c:f>'Per month'!\$([A-Z]+)\$1</c:f>", chart)
        first = revenue_at if title.startswith("revenue") else orders_at
        assert names == [_column_letter(first + 1), _column_letter(first + 2)]


def _column_letter(index: int) -> str:
    """The sheet column of a 0-based index (A, ..., Z, AA, ...)."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def test_html_chart_grouped_by_a_series_column(shop_reports: ReportEnv) -> None:
    """Inline SVG: a titled chart per value column, one line per owner in each, and a
    legend naming the owners."""
    record = shop_reports.run(shop_reports.request(_grouped(shop_reports), "html"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    page = shop_reports.file(record).decode("utf-8")
    parser = _Collector()
    parser.feed(page)
    tags = [tag for tag, _ in parser.tags]
    assert set(tags) <= _ALLOWED_TAGS
    labels = [attrs.get("aria-label") for tag, attrs in parser.tags if tag == "svg"]
    assert labels == ["Per month: revenue by owner", "Per month: orders by owner"]
    assert tags.count("polyline") == 4
    assert page.count(">alice</text>") == page.count(">bob</text>") == 2
    for month in MONTHS:
        assert page.count(f">{month}</text>") == 2
