"""Preview on the pages without JavaScript: the query page's and the new-export page's POST
(with its CSRF field) re-renders the page with the first rows as a table, or the refusal next
to the parameter or above the table; the same access rules as the API."""

from __future__ import annotations

import html as markup
import json
import re
from pathlib import Path

import httpx2

from qexport.domain.audit import Action, AuditFilter
from qexport.domain.exports import Requester
from qexport.domain.queries import Parameter, ParamType, Visibility
from tests.api.conftest import Api, api_on
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS = "q-orders-acme"


def _post(browser: Browser, path: str, form_page: str, **data: str) -> httpx2.Response:
    token = csrf_of(browser.page(form_page))
    return browser.client.post(path, data={"csrf": token, **data}, follow_redirects=False)


def _cells(page: str) -> list[list[str]]:
    """The preview table's body cells, as text."""
    table = page.split('class="preview-table"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [
        [markup.unescape(c) for c in re.findall(r"<td[^>]*><div>(.*?)</div></td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def _signed_in(api: Api, browser: Browser, role: str = "viewer") -> None:
    add_person(api, "vic@example.com", role)
    browser.sign_in("vic@example.com")
    api.add_query("orders")


def test_the_query_page_previews_its_first_rows(api: Api, browser: Browser) -> None:
    """The page offers Preview with the query's parameter inputs; the POST answers the page
    with a table of the rows (column names with their types) and says how many."""
    _signed_in(api, browser)
    page = browser.page(f"/queries/{ORDERS}")
    assert f'action="/queries/{ORDERS}/preview#preview"' in page
    assert 'id="param-since"' in page
    response = _post(
        browser, f"/queries/{ORDERS}/preview", f"/queries/{ORDERS}", **{"p.since": "2024-01-29"}
    )
    assert response.status_code == 200, response.text
    shown = response.text
    assert "First rows of orders" in shown
    assert 'amount <span class="type">DECIMAL(10,2)</span>' in shown
    assert _cells(shown)[:2] == [
        ["28", "customer 0", "35.00", "2024-01-29"],
        ["29", "customer 1", "36.25", "2024-01-30"],
    ]
    assert "6 rows." in shown
    assert 'value="2024-01-29"' in shown  # the input keeps what was typed
    assert 'class="table-scroll" tabindex="0" role="region"' in shown


def test_more_rows_and_cut_texts_are_said(api: Api, browser: Browser) -> None:
    """Past 100 rows the page says the result goes on; a long text ends in the cut mark; NULL
    reads as NULL; markup in a value is shown, never run."""
    _signed_in(api, browser)
    api.add_query(
        "odd",
        sql="SELECT i, repeat('x', 2000) AS t, NULL AS n, '<b>bold</b>' AS h FROM range(150) t(i)",
        parameters=(),
    )
    response = _post(browser, "/queries/q-odd-acme/preview", "/queries/q-odd-acme")
    assert response.status_code == 200
    assert "The first 100 rows; the result goes on" in response.text
    assert "are cut, ending in …[cut]" in response.text
    first = _cells(response.text)[0]
    assert first == ["0", "x" * 1000 + "…[cut]", "NULL", "<b>bold</b>"]
    assert "&lt;b&gt;bold&lt;/b&gt;" in response.text
    assert len(_cells(response.text)) == 100


def test_a_bad_parameter_is_shown_next_to_its_input(api: Api, browser: Browser) -> None:
    """400, the page again, the refusal tied to the input; no table."""
    _signed_in(api, browser)
    api.add_query("typed", sql="SELECT $n AS n", parameters=(Parameter("n", ParamType.INTEGER),))
    response = _post(
        browser, "/queries/q-typed-acme/preview", "/queries/q-typed-acme", **{"p.n": "many"}
    )
    assert response.status_code == 400
    assert 'aria-describedby="error-n" aria-invalid="true"' in response.text
    assert "parameter &#39;n&#39; must be an integer" in response.text
    assert "preview-table" not in response.text


def test_a_statement_the_source_refuses_is_shown_above_the_table(
    api: Api, browser: Browser
) -> None:
    """The source's refusal (query_invalid) is shown in the preview's place with its words."""
    _signed_in(api, browser)
    api.add_query("broken", sql="SELECT * FROM no_such_table", parameters=())
    response = _post(browser, "/queries/q-broken-acme/preview", "/queries/q-broken-acme")
    assert response.status_code == 422
    assert "The preview could not be read:" in response.text
    assert "no_such_table" in response.text


def test_without_the_csrf_field_nothing_runs(api: Api, browser: Browser) -> None:
    """A POST without the form's token is refused (403)."""
    _signed_in(api, browser)
    response = browser.client.post(f"/queries/{ORDERS}/preview", data={}, follow_redirects=False)
    assert response.status_code == 403


def test_a_query_the_person_may_not_read_is_not_found(api: Api, browser: Browser) -> None:
    """Another workspace's query and a members-only query not listing them: 404 pages."""
    _signed_in(api, browser)
    api.add_query("theirs", workspace="other")
    api.add_query("secret", visibility=Visibility.MEMBERS, owner="someone-else")
    for query_id in ("q-theirs-other", "q-secret-acme"):
        response = _post(browser, f"/queries/{query_id}/preview", "/queries")
        assert response.status_code == 404, query_id


def test_the_new_export_page_previews_before_requesting(api: Api, browser: Browser) -> None:
    """Preview beside Request export posts the same form to the preview: the page comes back
    filled in as it was (subject, format, parameters) with the table; nothing is requested."""
    _signed_in(api, browser)
    form_page = f"/exports/new?subject=query:{ORDERS}"
    assert 'formaction="/exports/new/preview#preview"' in browser.page(form_page)
    response = _post(
        browser,
        "/exports/new/preview",
        form_page,
        subject=f"query:{ORDERS}",
        format="xlsx",
        **{"p.since": "2024-01-30"},
    )
    assert response.status_code == 200, response.text
    assert _cells(response.text)[0] == ["29", "customer 1", "36.25", "2024-01-30"]
    assert '<option value="xlsx" selected>' in response.text
    assert 'value="2024-01-30"' in response.text
    assert api.deps.exports.list_exports(workspace_id="acme") == []


def test_the_new_export_preview_of_a_report_is_refused(api: Api, browser: Browser) -> None:
    """A report has no rows of its own to preview (the page offers none): 400 asking for a
    query."""
    _signed_in(api, browser)
    response = _post(browser, "/exports/new/preview", "/exports/new", subject="report:nope")
    assert response.status_code == 400
    assert "Choose a query" in response.text


def test_the_preview_address_opened_again_leads_to_the_page(api: Api, browser: Browser) -> None:
    """A GET (a reload, a bookmark) of the preview's address redirects to its page, not 405."""
    _signed_in(api, browser)
    response = browser.client.get(f"/queries/{ORDERS}/preview", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == f"/queries/{ORDERS}"
    response = browser.client.get("/exports/new/preview", follow_redirects=False)
    assert response.headers["location"] == "/exports/new"


def test_saving_a_query_with_no_slot_free_keeps_the_form(api: Api, browser: Browser) -> None:
    """With the editor's two describe-or-preview slots taken, saving a query answers 429 with
    the reason above the form and everything typed kept (nothing saved)."""
    add_person(api, "ed@example.com", "editor")
    browser.sign_in("ed@example.com")
    editor = Requester(api.user_id("ed@example.com"), "acme")
    slots = api.context.source_slots
    with slots.hold(editor), slots.hold(editor):
        response = _post(
            browser,
            "/queries/new",
            "/queries/new",
            name="held",
            source="shop",
            sql="SELECT 42 AS answer",
            visibility="workspace",
        )
    assert response.status_code == 429
    assert "previews or query checks running" in response.text
    assert "SELECT 42 AS answer</textarea>" in response.text
    assert api.deps.catalog.find_query("acme", "held") is None


def test_a_page_preview_is_recorded_and_counts_with_the_apis(
    tmp_path: Path, source_template: Path
) -> None:
    """The page's preview is a `query.previewed` event by the signed-in person (a session,
    not a token) with the values typed and the rows shown; it counts toward the same
    previews a minute as the API's: two through the page, one through the API, and the
    page's next is 429 with Retry-After, the refusal shown in the preview's place."""
    with api_on(tmp_path, source_template, preview_per_minute=3) as api:
        browser = Browser(api.client)
        _signed_in(api, browser)
        token = api.member("vic@example.com", "viewer")
        fields = {"p.since": "2024-01-29"}
        for _ in range(2):
            shown = _post(browser, f"/queries/{ORDERS}/preview", f"/queries/{ORDERS}", **fields)
            assert shown.status_code == 200
        narrow = AuditFilter(action=Action.QUERY_PREVIEWED.value)
        first = api.context.audit.list_events(workspace_id="acme", narrow=narrow)[-1]
        assert (first.actor_kind, first.actor_id) == ("user", api.user_id("vic@example.com"))
        assert (first.target_id, first.outcome) == (ORDERS, "ok")
        details = json.loads(first.details)
        assert (details["parameters"], details["rows"]) == ({"since": "2024-01-29"}, 6)
        api_preview = api.post(f"/api/v1/queries/{ORDERS}/preview", token, json={})
        assert api_preview.status_code == 200
        refused = _post(browser, f"/queries/{ORDERS}/preview", f"/queries/{ORDERS}", **fields)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "60"
        assert "3 previews in the last minute" in refused.text
        assert "preview-table" not in refused.text
        assert len(api.context.audit.list_events(workspace_id="acme", narrow=narrow)) == 3
