"""Queries, reports and schedules in the browser without JavaScript: browsing, the editors'
forms, and the same access rules as the API."""

from __future__ import annotations

import html as markup
import re

import httpx2
from fastapi.testclient import TestClient

from qexport.domain.schedules import Schedule
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of

ORDERS_ID = "q-orders-acme"


def _post(browser: Browser, path: str, form_page: str, **data: str) -> httpx2.Response:
    """Submit a form found on `form_page` (its CSRF token included), without following."""
    token = csrf_of(browser.page(form_page))
    return browser.client.post(path, data={"csrf": token, **data}, follow_redirects=False)


def _saved(response: httpx2.Response, prefix: str) -> str:
    """The id in the Location of a POST-redirect-GET to the saved thing's page."""
    assert response.status_code == 303, response.text
    found = re.match(rf"^/{prefix}/([^/?]+)\?notice=saved$", response.headers["location"])
    assert found
    return found.group(1)


def _schedule_form(**changes: str) -> dict[str, str]:
    form = {
        "subject": f"query:{ORDERS_ID}",
        "format": "csv",
        "cron": "0 8 * * 1",
        "timezone": "Europe/Berlin",
        "recipients": "ops@example.com\nhttps://hooks.example.com/qexport",
        "missed": "skip",
        "p.since": "2024-01-02",
    }
    return {**form, **changes}


def _schedule(api: Api, browser: Browser) -> str:
    response = _post(browser, "/schedules/new", "/schedules/new", **_schedule_form())
    return _saved(response, "schedules")


def test_an_editor_creates_and_edits_a_query(api: Api, browser: Browser) -> None:
    """The new-query form saves a query (parameters written `name:type[=default]`), its page
    shows the SQL and an Export button; the edit form starts from its values and replaces it."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    assert 'href="/queries/new"' in browser.page("/queries")
    sql = "SELECT * FROM orders WHERE day >= $since AND id < $top"
    response = _post(
        browser,
        "/queries/new",
        "/queries/new",
        name="early orders",
        source="shop",
        sql=sql,
        parameters="since:date=2024-01-10\n\ntop:integer",
        visibility="workspace",
    )
    query_id = _saved(response, "queries")
    page = browser.page(f"/queries/{query_id}?notice=saved")
    assert f'<pre class="sql">{markup.escape(sql)}</pre>' in page
    assert "since:date=2024-01-10" in page
    assert "top:integer" in page
    assert f'href="/exports/new?subject=query:{query_id}"' in page
    edit = browser.page(f"/queries/{query_id}/edit")
    assert "since:date=2024-01-10\ntop:integer</textarea>" in edit
    assert '<option value="shop" selected>' in edit
    response = _post(
        browser,
        f"/queries/{query_id}/edit",
        f"/queries/{query_id}/edit",
        name="recent orders",
        source="shop",
        sql="SELECT * FROM orders WHERE day >= $since",
        parameters="since:date",
        visibility="members",
        members="ann@example.com",
    )
    assert _saved(response, "queries") == query_id
    query = api.context.catalog.get_query(query_id)
    assert query is not None
    assert (query.name, query.visibility.value) == ("recent orders", "members")
    assert query.members == {api.user_id("ann@example.com")}
    assert ">recent orders</a>" in browser.page("/queries")


def test_an_editor_creates_and_edits_a_report(api: Api, browser: Browser) -> None:
    """Sections written as rows (heading, query picked by name, display, chart columns, rows
    at most, fixed values) make a report whose page lists them; the edit form starts from
    its rows and replacing them saves the new ones."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    response = _post(
        browser,
        "/reports/new",
        "/reports/new",
        title="Orders review",
        description="Every order, then by day",
        **{
            "section-1-heading": "All orders",
            "section-1-query": ORDERS_ID,
            "section-1-display": "table",
            "section-2-heading": "By day",
            "section-2-query": ORDERS_ID,
            "section-2-display": "bar",
            "section-2-values": "amount",
            "section-2-series": "customer",
            "section-2-rows": "20",
            "section-2-fixed": "since=2024-01-15",
        },
    )
    report_id = _saved(response, "reports")
    page = browser.page(f"/reports/{report_id}")
    assert "By day" in page
    assert f'<a href="/queries/{ORDERS_ID}">orders</a>' in page
    assert "<code>since</code> = 2024-01-15" in page
    assert "bar of amount by customer" in page
    assert f'href="/exports/new?subject=report:{report_id}"' in page
    edit = browser.page(f"/reports/{report_id}/edit")
    assert 'id="section-2-heading" name="section-2-heading" type="text" value="By day"' in edit
    assert f'<option value="{ORDERS_ID}" selected>orders</option>' in edit
    assert 'name="section-2-values" type="text" value="amount"' in edit
    assert ">since=2024-01-15</textarea>" in edit
    response = _post(
        browser,
        f"/reports/{report_id}/edit",
        f"/reports/{report_id}/edit",
        title="Orders by day",
        **{
            "section-1-heading": "By day",
            "section-1-query": ORDERS_ID,
            "section-1-display": "line",
            "section-1-rows": "50",
            "section-1-fixed": "since=2024-01-20",
        },
    )
    assert _saved(response, "reports") == report_id
    report = api.context.catalog.get_report(report_id)
    assert report is not None
    assert report.title == "Orders by day"
    assert [(s.heading, s.display.value, s.row_cap) for s in report.sections] == [
        ("By day", "line", 50)
    ]
    assert report.sections[0].parameters == {"since": "2024-01-20"}


def test_an_editor_creates_and_edits_a_schedule(api: Api, browser: Browser) -> None:
    """The schedule form saves recipients (an address or a URL a line) and parameters
    (`name=value`); the list shows the next run on the schedule's own clock; editing the cron
    moves it."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    schedule_id = _schedule(api, browser)
    listing = browser.page("/schedules")
    row = listing[listing.index(f'id="schedule-{schedule_id}"') :]
    assert "<code>0 8 * * 1</code>" in row
    assert "Europe/Berlin" in row
    assert "Mon 2026-01-12 08:00 CET" in row  # the clock reads Monday 2026-01-05 10:00 there
    assert "email ops@example.com" in row
    assert "webhook https://hooks.example.com/qexport" in row
    assert ">active<" in row
    edit = browser.page(f"/schedules/{schedule_id}/edit")
    assert f'<option value="query:{ORDERS_ID}" data-kind="query" selected>' in edit
    assert 'id="param-since" name="p.since" type="date" value="2024-01-02"' in edit
    assert "ops@example.com\nhttps://hooks.example.com/qexport</textarea>" in edit
    assert 'value="skip" checked' in edit
    response = _post(
        browser,
        f"/schedules/{schedule_id}/edit",
        f"/schedules/{schedule_id}/edit",
        **_schedule_form(cron="30 9 * * *", recipients="ops@example.com", missed="once"),
    )
    assert _saved(response, "schedules") == schedule_id
    page = browser.page(f"/schedules/{schedule_id}")
    assert "Tue 2026-01-06 09:30 CET" in page
    schedule = api.context.schedules.get_schedule(schedule_id)
    assert isinstance(schedule, Schedule)
    assert [r.target for r in schedule.recipients] == ["ops@example.com"]
    assert schedule.parameters == {"since": "2024-01-02"}


def test_the_schedule_form_takes_slack_and_teams_lines(api: Api, browser: Browser) -> None:
    """`slack URL` and `teams URL` lines save Slack and Teams recipients; the edit form shows
    them the same way; an http (not https) Slack URL is refused on its line."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    lines = (
        "slack https://hooks.slack.com/services/T1/B2/tok\n"
        "Teams: https://acme.webhook.office.com/webhookb2/tok"
    )
    response = _post(
        browser, "/schedules/new", "/schedules/new", **_schedule_form(recipients=lines)
    )
    schedule_id = _saved(response, "schedules")
    schedule = api.context.schedules.get_schedule(schedule_id)
    assert isinstance(schedule, Schedule)
    assert [r.to_json() for r in schedule.recipients] == [
        {"slack": "https://hooks.slack.com/services/T1/B2/tok"},
        {"teams": "https://acme.webhook.office.com/webhookb2/tok"},
    ]
    edit = browser.page(f"/schedules/{schedule_id}/edit")
    assert (
        "slack https://hooks.slack.com/services/T1/B2/tok\n"
        "teams https://acme.webhook.office.com/webhookb2/tok</textarea>"
    ) in edit
    refused = _post(
        browser,
        "/schedules/new",
        "/schedules/new",
        **_schedule_form(recipients="ops@example.com\nslack http://hooks.slack.com/x"),
    )
    assert re.search(
        r'id="error-recipients">Line 2: &#39;http://hooks.slack.com/\*\*\*&#39; is not an https',
        refused.text,
    )


def test_pause_resume_and_run_now_are_for_the_owner_or_an_admin(api: Api, browser: Browser) -> None:
    """The owner pauses (no next run), resumes and runs a schedule now (an export); another
    editor sees it without those buttons and is refused if they post them anyway."""
    add_person(api, "ann@example.com")
    add_person(api, "bob@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    schedule_id = _schedule(api, browser)
    page_path = f"/schedules/{schedule_id}"
    response = _post(browser, f"{page_path}/pause", page_path)
    assert response.headers["location"] == f"{page_path}?notice=paused"
    paused = browser.page(response.headers["location"])
    assert ">paused<" in paused
    assert "none while paused" in paused
    assert ">Resume</button>" in paused
    response = _post(browser, f"{page_path}/resume", page_path)
    assert ">active<" in browser.page(response.headers["location"])
    response = _post(browser, f"{page_path}/run", page_path)
    location = response.headers["location"]
    assert re.match(r"^/exports/[0-9a-f-]{36}\?notice=requested$", location)
    assert "The export was requested." in browser.page(location)
    bob = Browser(TestClient(api.client.app))
    bob.sign_in("bob@example.com")
    seen = bob.page(page_path)
    assert "Run now" not in seen
    assert "/edit" not in seen
    for action in ("pause", "run", "edit"):
        refused = _post(bob, f"{page_path}/{action}", page_path, **_schedule_form())
        assert refused.status_code == 403
    assert bob.client.get(f"{page_path}/edit").status_code == 403
    schedule = api.context.schedules.get_schedule(schedule_id)
    assert schedule is not None
    assert schedule.enabled


def test_a_viewer_browses_but_cannot_create_or_edit(api: Api, browser: Browser) -> None:
    """A viewer sees the lists and pages with no create or edit controls; the forms and a
    POST with a valid CSRF token are refused with the 403 page and nothing is saved."""
    add_person(api, "ann@example.com")
    add_person(api, "val@example.com", "viewer")
    api.add_query()
    browser.sign_in("ann@example.com")
    schedule_id = _schedule(api, browser)
    viewer = Browser(TestClient(api.client.app))
    viewer.sign_in("val@example.com")
    for path in ("/queries", "/reports", "/schedules", f"/queries/{ORDERS_ID}"):
        html = viewer.page(path)
        assert "/new" not in html.replace("/exports/new", "")
        assert "/edit" not in html
    assert "Run now" not in viewer.page(f"/schedules/{schedule_id}")
    forms = {
        "/queries/new": {"name": "x", "source": "shop", "sql": "SELECT 1"},
        f"/queries/{ORDERS_ID}/edit": {"name": "x", "source": "shop", "sql": "SELECT 1"},
        "/reports/new": {
            "title": "x",
            "section-1-heading": "A",
            "section-1-query": ORDERS_ID,
        },
        "/schedules/new": _schedule_form(),
    }
    for path, data in forms.items():
        if path.endswith("/new"):
            assert viewer.client.get(path).status_code == 403
        refused = _post(viewer, path, "/queries", **data)
        assert refused.status_code == 403
        assert "You may not do that" in refused.text
    assert [q.name for q in api.context.catalog.list_queries("acme")] == ["orders"]
    assert api.context.catalog.list_reports("acme") == []
    assert len(api.context.schedules.list_schedules("acme")) == 1


def test_refused_values_are_shown_next_to_their_field_with_the_entries_kept(
    api: Api, browser: Browser
) -> None:
    """A bad parameter line, section line, cron or recipient re-renders the form (400) with
    the message tied to its control, naming the line, and every value as it was typed."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    query = _post(
        browser,
        "/queries/new",
        "/queries/new",
        name="typed",
        source="shop",
        sql="SELECT $since AS s",
        parameters="since:date\nwhen:datetime",
    )
    text = query.text
    assert query.status_code == 400
    assert re.search(r'id="error-parameters">Line 2: unknown parameter type', text)
    assert "aria-invalid" in text.split('id="parameters"')[1].split(">")[0]
    assert 'value="typed"' in text
    assert "SELECT $since AS s</textarea>" in text
    report = _post(
        browser,
        "/reports/new",
        "/reports/new",
        title="R",
        **{"section-1-heading": "A", "section-1-query": ORDERS_ID, "section-2-heading": "B"},
    )
    assert report.status_code == 400
    assert re.search(r'id="error-section-2-query">Section 2: choose the query', report.text)
    assert 'value="B"' in report.text
    schedule = _post(
        browser, "/schedules/new", "/schedules/new", **_schedule_form(cron="every monday")
    )
    text = schedule.text
    assert schedule.status_code == 400
    assert re.search(r'id="error-cron">cron &#39;every monday&#39; must have 5 fields', text)
    assert 'value="every monday"' in text
    assert "ops@example.com\nhttps://hooks.example.com/qexport</textarea>" in text
    bad_recipient = _post(
        browser,
        "/schedules/new",
        "/schedules/new",
        **_schedule_form(recipients="ops@example.com\nftp://files.example.com"),
    )
    assert re.search(
        r'id="error-recipients">Line 2: &#39;ftp://files.example.com&#39; is not an http',
        bad_recipient.text,
    )
    assert api.context.schedules.list_schedules("acme") == []


def test_another_workspaces_queries_reports_and_schedules_are_404(
    api: Api, browser: Browser
) -> None:
    """Items of another workspace look like missing pages, for reading and for every form."""
    api.member("oz@example.com", "admin", workspace="other")
    api.add_query(workspace="other")
    other = "q-orders-other"
    report = api.post(
        "/api/v1/reports",
        "oz@example.com",
        json={"title": "Theirs", "sections": [{"heading": "A", "query_id": other}]},
    ).json()["id"]
    body = {"query_id": other, "format": "csv", "cron": "0 8 * * *", "recipients": []}
    schedule = api.post("/api/v1/schedules", "oz@example.com", json=body).json()["id"]
    add_person(api, "ann@example.com", "admin")
    browser.sign_in("ann@example.com")
    for path in (
        f"/queries/{other}",
        f"/queries/{other}/edit",
        f"/reports/{report}",
        f"/reports/{report}/edit",
        f"/schedules/{schedule}",
        f"/schedules/{schedule}/edit",
    ):
        response = browser.client.get(path)
        assert response.status_code == 404, path
        assert "Page not found" in response.text
    for path in (f"/schedules/{schedule}/pause", f"/schedules/{schedule}/run"):
        assert _post(browser, path, "/schedules").status_code == 404
    assert "Theirs" not in browser.page("/reports")
