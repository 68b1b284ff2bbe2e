"""What the browser tests share: Debian's Chromium driven by Playwright, a `qexport serve` and
a worker as real subprocesses, a signed-in member, and `Site.shot`, which keeps a screenshot
of a page state and checks it as a person would meet it: axe-core finds no violation and the
page does not scroll sideways.

A browser test module calls `require_browser()` before importing Playwright and imports the
fixtures it uses (`site`, `chromium`, `page`) from here.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# axe-core from npm, pinned by tests/web/axe/package-lock.json (`npm ci --prefix tests/web/axe`,
# run by scripts/dev.sh test and .ci/run).
AXE = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
EMAIL = "ann@example.com"
TIMEOUT_MS = 20_000


def require_browser() -> None:
    """Skip the calling module without Chromium or axe-core; in CI, fail instead."""
    missing = []
    if not CHROMIUM.exists():
        missing.append("Chromium (/usr/bin/chromium: apt-get install chromium)")
    if not AXE.exists():
        missing.append("axe-core (npm ci --prefix tests/web/axe)")
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the browser tests need {' and '.join(missing)} in CI")
    pytest.skip(
        f"browser tests skipped: {' and '.join(missing)} not installed", allow_module_level=True
    )


require_browser()

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

# A state the page reaches through a worker (settled, failed) may wait for a free worker slot
# on a busy machine: assertions wait as long as actions do.
expect.set_options(timeout=TIMEOUT_MS)

from qexport.clock import SystemClock  # noqa: E402
from qexport.domain.queries import Parameter, ParamType  # noqa: E402
from qexport.services.accounts import add_user  # noqa: E402
from qexport.sources.demo_data import build_demo_database  # noqa: E402
from qexport.store.accounts import SqlAccountStore  # noqa: E402
from tests.e2e.conftest import Env  # noqa: E402
from tests.e2e.test_serve import start_server  # noqa: E402
from tests.web.conftest import PASSWORD  # noqa: E402

SMALL = "SELECT order_id, total FROM orders WHERE order_id <= $n ORDER BY order_id"
# Hundreds of millions of rows with a hash each: runs far longer than any test waits.
SLOW = "SELECT i, sha256(i::VARCHAR) AS h FROM range(500000000) t(i)"
BAD_CAST = "SELECT 'not a number'::INTEGER AS n"

_AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")),
  }));
}"""


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is now (injected once per document)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated over the DevTools protocol, so the page's CSP (script-src 'self') stays on.
        page.evaluate(AXE.read_text(encoding="utf-8"))
    violations: list[dict[str, Any]] = page.evaluate(_AXE_RUN)
    return violations


def sideways_overflow(page: Page) -> int:
    """How many CSS pixels the page is wider than its window (0: no horizontal scrollbar)."""
    overflow: int = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    return max(overflow, 0)


class Site:
    """A server and a worker on a private data dir, with a member who has a password."""

    def __init__(
        self, env: Env, url: str, token: str, artifacts: Path, worker: subprocess.Popen[bytes]
    ) -> None:
        self.env, self.url, self.token, self.artifacts = env, url, token, artifacts
        self.worker = worker

    def shot(self, page: Page, name: str) -> None:
        """Keep a screenshot of this page state and check it: no axe-core violation, no
        sideways scrolling at the page's width."""
        page.screenshot(path=str(self.artifacts / f"{name}.png"), full_page=True)
        violations = axe_violations(page)
        assert not violations, f"axe-core on {name} ({page.url}):\n" + json.dumps(
            violations, indent=1
        )
        overflow = sideways_overflow(page)
        assert overflow == 0, f"{name} ({page.url}) scrolls sideways by {overflow} px"


def make_site(
    tmp_path_factory: pytest.TempPathFactory,
    name: str = "web",
    extra_env: dict[str, str] | None = None,
) -> Iterator[Site]:
    """A fresh site: demo data, three queries, an editor with a password and a token, a
    worker and `qexport serve` (with `extra_env` QEXPORT_* settings); every process is
    killed afterwards."""
    data_dir = tmp_path_factory.mktemp(name)
    artifacts = Path(os.environ.get("QEXPORT_TEST_ARTIFACTS") or data_dir / "screenshots")
    artifacts.mkdir(parents=True, exist_ok=True)
    build_demo_database(data_dir / "demo.duckdb", orders=2_000)
    env = Env(data_dir, extra=dict(extra_env or {}))
    env.run("db", "upgrade")
    env.add_query("small_orders", SMALL, Parameter("n", ParamType.INTEGER, False, "100"))
    env.add_query("every_number", SLOW)
    env.add_query("bad_cast", BAD_CAST)
    add_user(
        SqlAccountStore(env.store.engine),
        SystemClock(),
        EMAIL,
        workspace="demo",
        role="editor",
        password=PASSWORD,
    )
    token = env.run("tokens", "create", EMAIL).stdout.strip()
    worker = env.start_worker("--concurrency", "2")
    url, _ = start_server(env)
    yield Site(env, url, token, artifacts, worker)
    env.stop_all()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    yield from make_site(tmp_path_factory)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield browser
        browser.close()


def sign_in(
    site: Site,
    chromium: Browser,
    email: str = EMAIL,
    *,
    width: int = 1100,
    shot: str | None = "sign-in",
) -> Page:
    """A fresh browser context at `width` px, signed in as `email` with the form."""
    context = chromium.new_context(base_url=site.url, viewport={"width": width, "height": 700})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto("/")
    expect(page).to_have_url(f"{site.url}/sign-in?next=%2F")
    if shot:
        site.shot(page, shot)
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Exports")).to_be_visible()
    return page


@pytest.fixture
def page(site: Site, chromium: Browser) -> Iterator[Page]:
    """A fresh browser context, signed in as the member."""
    page = sign_in(site, chromium)
    yield page
    page.context.close()


def request_export(page: Page, query: str, fmt: str = "csv") -> str:
    """Request an export with the new-export form; the id from the page it lands on."""
    page.get_by_role("link", name="New export", exact=True).first.click()
    page.get_by_label("Query or report").select_option(label=query)
    page.get_by_role("button", name="Show its options").click()
    page.get_by_label("Format").select_option(fmt)
    page.get_by_role("button", name="Request export").click()
    expect(page.get_by_text("The export was requested.")).to_be_visible()
    return page.url.split("/exports/")[1].split("?")[0]


def status_badge(page: Page) -> Any:
    """The status badge of the export page."""
    return page.locator("#export .status .badge")
