"""The demo report's HTML file in Debian's Chromium (headless, driven by Playwright): its
grouped chart as a person sees it, with a screenshot kept as a test artifact."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from qexport.bootstrap import DEMO_SOURCE
from qexport.demo.run import register_demo_queries, register_demo_report
from qexport.domain.exports import Status
from qexport.sources.demo_data import build_demo_database
from qexport.sources.duckdb.source import DuckDBSource
from tests.fakes import FixedSources
from tests.fakes.previews import InProcessPreviews
from tests.integration.report_env import ALICE, ReportEnv, make_env
from tests.support.stores import SqlMetadataStore
from tests.web.browser import chromium, require_browser

require_browser()

from playwright.sync_api import Browser, expect  # noqa: E402

__all__ = ["chromium"]  # the fixture

CATEGORIES = ("Electronics", "Home", "Kitchen", "Office", "Outdoor", "Toys")


@pytest.fixture
def demo_env(sqlite_store: SqlMetadataStore, tmp_path: Path) -> ReportEnv:
    """A worker whose demo source reads a small demo database."""
    env = make_env(sqlite_store, tmp_path)
    demo = tmp_path / "demo.duckdb"
    build_demo_database(demo, orders=2_000)
    sources = FixedSources({DEMO_SOURCE: DuckDBSource(DEMO_SOURCE, demo)})
    # Saved queries are described by the preview runner, which must see the same sources.
    deps = dataclasses.replace(env.deps, sources=sources, previews=InProcessPreviews(sources))
    return ReportEnv(deps, env.store)


@pytest.mark.parametrize("width", [1100, 375])
def test_the_demo_reports_chart_draws_a_line_per_category(
    demo_env: ReportEnv, chromium: Browser, tmp_path: Path, width: int
) -> None:
    """Opened in a browser, "Revenue per month" shows two charts, revenue and the order
    count, each with six lines and a legend naming the six categories, all visible and
    within the window, also 375 px wide."""
    queries = register_demo_queries(demo_env.deps, ALICE)
    report = register_demo_report(demo_env.deps, ALICE, queries)
    record = demo_env.run(demo_env.request(report, "html"))
    assert record.status is Status.SUCCEEDED, record.failure_detail
    path = tmp_path / "report.html"
    path.write_bytes(demo_env.file(record))
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(path.as_uri())
    charts = page.get_by_role("img", name="Revenue per month:", exact=False)
    expect(charts).to_have_count(2)
    for n, title in enumerate(("revenue by category", "orders by category")):
        chart = charts.nth(n)
        expect(chart).to_be_visible()
        expect(chart).to_have_attribute("aria-label", f"Revenue per month: {title}")
        expect(chart.locator("polyline")).to_have_count(len(CATEGORIES))
        for name in CATEGORIES:
            expect(chart.locator("text", has_text=name)).to_be_visible()
        box = chart.bounding_box()
        assert box is not None
        assert box["x"] + box["width"] <= width  # scaled to the window, never wider
    artifacts = Path(os.environ.get("QEXPORT_TEST_ARTIFACTS") or tmp_path / "screenshots")
    artifacts.mkdir(parents=True, exist_ok=True)
    page.locator("section").first.screenshot(path=str(artifacts / f"demo-chart-{width}.png"))
    context.close()
