"""The query form checks the SQL with its source when saved: a refusal is shown next to the
SQL field (tied to it for screen readers), the form keeps what was typed, and a saved query's
page lists its columns (or says they are not known yet). A refused save is on the record and
takes one of the person's previews of the minute."""

from __future__ import annotations

import html as markup
import json
import re
from pathlib import Path

from qexport.domain.audit import AuditFilter
from qexport.domain.sources import RegisteredSource
from tests.api.conftest import Api, api_on
from tests.web.conftest import Browser, add_person, csrf_of

FORM = "/queries/new"


def _submit(browser: Browser, path: str = FORM, **data: str) -> tuple[int, str]:
    token = csrf_of(browser.page(path))
    fields = {"name": "checked", "source": "shop", "visibility": "workspace", **data}
    response = browser.client.post(path, data={"csrf": token, **fields}, follow_redirects=False)
    return response.status_code, response.text


def _sql_error(page: str) -> str:
    """The error shown for the SQL field, checked to be tied to the textarea."""
    found = re.search(r'<p class="error" id="error-sql">([^<]*)</p>', page)
    assert found, "no error next to the SQL field"
    textarea = re.search(r"<textarea id=\"sql\"[^>]*>", page)
    assert textarea
    assert 'aria-invalid="true"' in textarea.group(0)
    assert "error-sql" in textarea.group(0)
    return markup.unescape(found.group(1))


def test_a_broken_query_is_refused_next_to_the_sql_field(api: Api, browser: Browser) -> None:
    """A syntax error: 400, the source's message with its line and column next to the SQL
    field, what was typed still in the form, nothing saved."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    sql = "SELECT id\nFORM orders"
    status, page = _submit(browser, sql=sql)
    assert status == 400
    assert _sql_error(page) == 'Parser Error: syntax error at or near "orders" (line 2, column 6)'
    assert f">{markup.escape(sql)}</textarea>" in page
    assert api.context.catalog.list_queries("acme") == []


def test_a_missing_table_and_a_delete_are_refused(api: Api, browser: Browser) -> None:
    """`SELECT * FROM no_such_table` and `DELETE FROM orders` are refused at save time, said
    as people read it (not the engine's suggestion of one of its own tables, no caret art)."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    status, page = _submit(browser, sql="SELECT * FROM no_such_table")
    assert status == 400
    assert "no_such_table does not exist" in _sql_error(page)
    assert "pg_tables" not in _sql_error(page)
    assert "^" not in _sql_error(page)
    status, page = _submit(browser, sql="DELETE FROM orders")
    assert status == 400
    assert "got DELETE" in _sql_error(page)
    assert api.context.catalog.list_queries("acme") == []


def test_an_unreachable_source_keeps_the_form(api: Api, browser: Browser, tmp_path: Path) -> None:
    """A source that cannot be opened: 503, the reason above the form, nothing saved."""
    api.context.accounts.add_source(
        RegisteredSource(
            "gone",
            f"duckdb://{tmp_path / 'missing' / 'gone.duckdb'}",
            "acme",
            frozenset(),
            False,
            api.clock.now(),
        )
    )
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    status, page = _submit(browser, source="gone", sql="SELECT 1 AS one")
    assert status == 503
    assert re.search(r'<p class="error" role="alert">[^<]*not saved', page)
    assert api.context.catalog.list_queries("acme") == []


def test_a_saved_query_page_lists_its_columns(api: Api, browser: Browser) -> None:
    """After saving, the query's page shows each column with the source's type."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    status, _ = _submit(browser, sql="SELECT id, amount FROM orders")
    assert status == 303
    (query,) = api.context.catalog.list_queries("acme")
    page = browser.page(f"/queries/{query.id}")
    assert "<td>id</td><td><code>BIGINT</code></td>" in page
    assert "<td>amount</td><td><code>DECIMAL(10,2)</code></td>" in page


def test_a_query_saved_before_checking_still_shows(api: Api, browser: Browser) -> None:
    """A query stored without columns shows its page, saying its columns are not known yet."""
    query = api.add_query()
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    page = browser.page(f"/queries/{query.id}")
    assert "Not known yet" in page
    assert '<pre class="sql">' in page


def test_a_refused_save_is_recorded_and_counts_with_previews(
    tmp_path: Path, source_template: Path
) -> None:
    """Two previews a minute: the form's refused save is a failed `query.created` by the
    signed-in person (a session); the second refused save spends the minute, and the third
    is 429 with Retry-After, the reason above the form, the form kept, nothing recorded."""
    with api_on(tmp_path, source_template, preview_per_minute=2) as api:
        browser = Browser(api.client)
        add_person(api, "ann@example.com")
        browser.sign_in("ann@example.com")
        sql = "SELECT * FROM no_such_table"
        status, _ = _submit(browser, sql=sql)
        assert status == 400
        narrow = AuditFilter(action="query.created")
        [found] = api.context.audit.list_events(workspace_id="acme", narrow=narrow)
        assert (found.actor_kind, found.actor_id) == ("user", api.user_id("ann@example.com"))
        assert found.outcome == "failed"
        details = json.loads(found.details)
        assert (details["name"], details["source"], details["code"]) == (
            "checked",
            "shop",
            "query_invalid",
        )
        assert _submit(browser, sql=sql)[0] == 400
        token = csrf_of(browser.page(FORM))
        fields = {"name": "checked", "source": "shop", "visibility": "workspace", "sql": sql}
        limited = browser.client.post(FORM, data={"csrf": token, **fields})
        assert limited.status_code == 429
        assert limited.headers["Retry-After"] == "60"
        assert re.search(
            r'<p class="error" role="alert">[^<]*the query was not saved', limited.text
        )
        assert f">{markup.escape(sql)}</textarea>" in limited.text
        assert len(api.context.audit.list_events(workspace_id="acme", narrow=narrow)) == 2
        assert api.context.catalog.list_queries("acme") == []
