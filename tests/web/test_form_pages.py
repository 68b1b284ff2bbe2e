"""The forms for people, without JavaScript: every mistake at once in field order, report
sections as rows, the schedule form's typed parameters, cron in words and checks, and
deleting queries, reports and schedules after asking."""

from __future__ import annotations

import html as markup
import re

import httpx2
from fastapi.testclient import TestClient

from qexport.domain.queries import Parameter, ParamType
from tests.api.conftest import Api
from tests.web.conftest import Browser, add_person, csrf_of
from tests.web.test_catalog_pages import ORDERS_ID, _post, _saved, _schedule_form

_ERROR_ID = re.compile(r'<p class="error" id="error-([^"]+)">')


def _errors(page: str) -> list[str]:
    """The fields whose refusal the page shows next to them, top to bottom."""
    return _ERROR_ID.findall(page)


def _summary(page: str) -> list[str]:
    """The fields the error summary links to, in its order."""
    assert 'class="error-summary"' in page, "no error summary"
    box = page.split('class="error-summary"', 1)[1].split("</div>", 1)[0]
    return re.findall(r'<li><a href="#([^"]+)">', box)


def _two_parameters(api: Api) -> None:
    api.add_query(
        "two",
        sql="SELECT * FROM orders WHERE day >= $since AND id < $top",
        parameters=(
            Parameter("since", ParamType.DATE, required=False, default="2024-01-01"),
            Parameter("top", ParamType.INTEGER),
        ),
    )


def test_the_query_form_shows_a_taken_name_a_bad_sql_and_a_stranger_at_once(
    api: Api, browser: Browser
) -> None:
    """A taken name, SQL the source refuses and a member of no workspace come back in one
    400, each next to its field and in the summary, in the form's order; nothing is saved."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    response = _post(
        browser,
        "/queries/new",
        "/queries/new",
        name="orders",
        source="shop",
        sql="SELECT * FROM no_such_table",
        parameters="since:date",
        visibility="members",
        members="stranger@example.com",
    )
    assert response.status_code == 400
    assert _errors(response.text) == ["name", "sql", "members"]
    assert _summary(response.text) == ["name", "sql", "members"]
    assert "3 things to fix" in response.text
    assert "a query named &#39;orders&#39; already exists" in response.text
    assert "no_such_table" in response.text.split('id="error-sql"')[1].split("</p>")[0]
    assert [q.name for q in api.context.catalog.list_queries("acme")] == ["orders"]


def test_the_query_form_reports_every_unreadable_parameter_line(api: Api, browser: Browser) -> None:
    """An empty name, an unknown source and two parameter lines that cannot be read are all
    told (the SQL is not described without a known source and readable parameters)."""
    add_person(api, "ann@example.com")
    browser.sign_in("ann@example.com")
    response = _post(
        browser,
        "/queries/new",
        "/queries/new",
        name="",
        source="nope",
        sql="SELECT 1",
        parameters="when:datetime\nok:integer\n9x:string",
        visibility="workspace",
    )
    assert response.status_code == 400
    assert _summary(response.text) == ["name", "source", "parameters"]
    shown = response.text.split('id="error-parameters">')[1].split("</p>")[0]
    assert "Line 1: unknown parameter type" in shown
    assert "Line 3: invalid parameter name" in shown


def test_the_report_form_shows_each_sections_mistakes_on_its_row(
    api: Api, browser: Browser
) -> None:
    """Mistakes of the title and of two sections come back at once, each on its row's field
    and led by its section's number, in the order the form shows them."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    response = _post(
        browser,
        "/reports/new",
        "/reports/new",
        title="",
        **{
            "section-1-heading": "",
            "section-1-query": "",
            "section-2-heading": "By day",
            "section-2-query": ORDERS_ID,
            "section-2-display": "table",
            "section-2-values": "amount",
            "section-2-rows": "many",
            "section-2-fixed": "nope=1",
        },
    )
    assert response.status_code == 400
    expected = [
        "title",
        "section-1-heading",
        "section-1-query",
        "section-2-values",
        "section-2-rows",
        "section-2-fixed",
    ]
    assert _summary(response.text) == expected
    assert _errors(response.text) == expected
    assert "Section 2: a table has no value columns" in response.text
    assert "Section 2: rows at most is a whole number" in response.text
    assert "Section 2: the query has no parameter &#39;nope&#39;" in response.text
    assert 'aria-describedby="hint-section-2-values error-section-2-values"' in response.text
    assert api.context.catalog.list_reports("acme") == []


def test_report_rows_are_added_moved_and_removed_before_saving(api: Api, browser: Browser) -> None:
    """ "Add a section", "Move section 2 up" and "Remove section 1" re-render the form with
    the rows as typed (nothing saved); "Save report" then saves them in the order shown."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    form = {
        "title": "Review",
        "section-1-heading": "First",
        "section-1-query": ORDERS_ID,
        "section-2-heading": "Second",
        "section-2-query": ORDERS_ID,
        "section-2-display": "line",
        "section-2-values": "amount",
    }
    added = _post(browser, "/reports/new", "/reports/new", action="add", **form)
    assert added.status_code == 200
    assert 'id="section-3"' in added.text
    assert "<legend>Section 3</legend>" in added.text
    assert 'value="Second"' in added.text
    assert 'formaction="/reports/new#section-4"' in added.text  # the next Add lands on it
    assert ">Move section 3 up</button>" in added.text
    assert ">Move section 1 up</button>" not in added.text
    assert ">Move section 3 down</button>" not in added.text
    moved = _post(browser, "/reports/new", "/reports/new", action="up-2", **form)
    first_row = moved.text.split('id="section-1"')[1].split("</fieldset>")[0]
    assert 'value="Second"' in first_row
    assert '<option value="line" selected>' in first_row
    assert 'value="amount"' in first_row
    removed = _post(browser, "/reports/new", "/reports/new", action="remove-1", **form)
    assert 'value="First"' not in removed.text
    assert 'id="section-2"' not in removed.text
    assert api.context.catalog.list_reports("acme") == []
    swapped = {
        **form,
        "section-1-heading": "Second",
        "section-1-display": "line",
        "section-1-values": "amount",
        "section-2-heading": "First",
        "section-2-display": "table",
        "section-2-values": "",
    }
    saved = _post(browser, "/reports/new", "/reports/new", action="save", **swapped)
    report = api.context.catalog.get_report(_saved(saved, "reports"))
    assert report is not None
    assert [(s.heading, s.display.value, s.values) for s in report.sections] == [
        ("Second", "line", ("amount",)),
        ("First", "table", ()),
    ]


def test_the_new_export_form_shows_every_mistake_at_once(api: Api, browser: Browser) -> None:
    """A format the query does not take, a date that is not one and a missing required
    integer come back in one 400, on the format and each parameter's input, in order."""
    add_person(api, "ann@example.com")
    _two_parameters(api)
    browser.sign_in("ann@example.com")
    subject = "query:q-two-acme"
    html = browser.page(f"/exports/new?subject={subject}")
    assert re.findall(
        r'<option value="(\w+)"', html.split('id="format"')[1].split("</select>")[0]
    ) == [
        "csv",
        "tsv",
        "jsonl",
        "parquet",
        "xlsx",
    ]
    response = browser.client.post(
        "/exports/new",
        data={"csrf": csrf_of(html), "subject": subject, "format": "pdf", "p.since": "soon"},
    )
    assert response.status_code == 400
    assert _summary(response.text) == ["format", "param-since", "param-top"]
    assert _errors(response.text) == ["format", "param-since", "param-top"]
    assert "missing required parameter &#39;top&#39;" in response.text
    assert 'value="soon"' in response.text
    assert api.context.exports.list_exports(workspace_id="acme", limit=5) == []


def _flagged(api: Api) -> None:
    api.add_query(
        "flagged",
        sql="SELECT * FROM orders WHERE $all OR id < $top",
        parameters=(
            Parameter("all", ParamType.BOOLEAN, required=False, default=True),
            Parameter("top", ParamType.INTEGER),
        ),
    )


def _all_box(page: str) -> str:
    return re.search(r'<input id="param-all"[^>]*>', page).group(0)  # type: ignore[union-attr]


def test_an_unticked_box_stays_unticked_when_the_form_comes_back(
    api: Api, browser: Browser
) -> None:
    """A yes/no parameter whose default is yes, unticked, with a mistake elsewhere: the form
    comes back with the box still unticked (not the default again), on the new-export form and
    the schedule form; saved, the schedule keeps no. A subject just chosen shows the default."""
    add_person(api, "ann@example.com")
    _flagged(api)
    browser.sign_in("ann@example.com")
    subject = "query:q-flagged-acme"
    html = browser.page(f"/exports/new?subject={subject}")
    assert " checked" in _all_box(html)
    form = {"csrf": csrf_of(html), "subject": subject, "format": "csv", "params_of": subject}
    refused = browser.client.post("/exports/new", data={**form, "p.top": "many"})
    assert refused.status_code == 400
    assert " checked" not in _all_box(refused.text)

    shown = _post(browser, "/schedules/new", "/schedules/new", action="subject", subject=subject)
    assert " checked" in _all_box(shown.text)
    schedule = _schedule_form(subject=subject, params_of=subject, **{"p.top": "many"})
    del schedule["p.since"]
    refused = _post(browser, "/schedules/new", "/schedules/new", **schedule)
    assert refused.status_code == 400
    assert " checked" not in _all_box(refused.text)
    saved = _saved(
        _post(browser, "/schedules/new", "/schedules/new", **{**schedule, "p.top": "5"}),
        "schedules",
    )
    assert api.context.schedules.get_schedule(saved).parameters == {  # type: ignore[union-attr]
        "all": False,
        "top": 5,
    }


def test_the_schedule_form_shows_five_mistakes_at_once_in_field_order(
    api: Api, browser: Browser
) -> None:
    """The issue's schedule: a format the query does not take, a cron in words, an unknown
    time zone, two bad recipients and a date that is not one: one submit, all five fields
    refused in the form's order (the recipients by line), nothing saved."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    response = _post(
        browser,
        "/schedules/new",
        "/schedules/new",
        **_schedule_form(
            format="pdf",
            cron="every monday",
            timezone="Mars/Olympus",
            recipients="not-an-address\nftp://files.example.com",
            **{"p.since": "soon"},
        ),
    )
    assert response.status_code == 400
    expected = ["format", "cron", "timezone", "recipients", "param-since"]
    assert _summary(response.text) == expected
    assert _errors(response.text) == expected
    assert "5 things to fix" in response.text
    recipients = response.text.split('id="error-recipients">')[1].split("</p>")[0]
    assert "Line 1: &#39;not-an-address&#39; is not an email address" in recipients
    assert "Line 2: &#39;ftp://files.example.com&#39; is not an http(s) URL" in recipients
    assert 'value="Mars/Olympus"' in response.text
    assert api.context.schedules.list_schedules("acme") == []


def test_the_schedule_form_types_parameters_and_narrows_formats_to_the_subject(
    api: Api, browser: Browser
) -> None:
    """ "Show its formats and parameters" re-renders the form for the chosen subject: a date
    picker and a number input with the defaults, and, for a report, only the report formats
    within reach (csv hidden and disabled)."""
    add_person(api, "ann@example.com")
    _two_parameters(api)
    browser.sign_in("ann@example.com")
    shown = _post(
        browser, "/schedules/new", "/schedules/new", action="subject", subject="query:q-two-acme"
    )
    assert shown.status_code == 200
    assert 'id="param-since" name="p.since" type="date" value="2024-01-01"' in shown.text
    assert 'id="param-top" name="p.top" type="number" step="1" value=""' in shown.text
    assert 'top <span class="muted">(integer, required)</span>' in shown.text
    assert 'class="error"' not in shown.text
    api.member("ann@example.com", "editor")
    api.add_query()
    report = api.post(
        "/api/v1/reports",
        "ann@example.com",
        json={"title": "R", "sections": [{"heading": "A", "query_id": ORDERS_ID}]},
    )
    subject = f"report:{report.json()['id']}"
    shown = _post(browser, "/schedules/new", "/schedules/new", action="subject", subject=subject)
    options = shown.text.split('id="format"')[1].split("</select>")[0]
    assert '<option value="csv" data-for="query" hidden disabled>' in options
    assert '<option value="html" data-for="report" selected>' in options  # csv was typed
    assert '<option value="xlsx" data-for="query report">' in options
    refused = _post(browser, "/schedules/new", "/schedules/new", **_schedule_form(subject=subject))
    assert "unknown report format &#39;csv&#39;" in refused.text


def test_check_shows_the_cron_in_words_and_the_next_runs_and_saves_nothing(
    api: Api, browser: Browser
) -> None:
    """ "Check" with nothing wrong says so, with the cron in words and the next three runs on
    the schedule's wall clock; no schedule is saved. The script's endpoint answers the same."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    checked = _post(browser, "/schedules/new", "/schedules/new", action="check", **_schedule_form())
    assert checked.status_code == 200
    text = checked.text
    assert "Nothing to fix" in text
    assert "<strong data-words>At 08:00, only on Monday</strong>" in text
    runs = re.findall(r"<li>(Mon 2026-01-\d\d 08:00 CET)</li>", text)
    assert runs == [
        "Mon 2026-01-12 08:00 CET",
        "Mon 2026-01-19 08:00 CET",
        "Mon 2026-01-26 08:00 CET",
    ]
    assert api.context.schedules.list_schedules("acme") == []
    found = browser.client.get(
        "/schedules/timetable", params={"cron": "30 9 1 * *", "timezone": "America/New_York"}
    ).json()
    assert found["words"] == "At 09:30, on day 1 of the month"
    assert found["runs"][0] == "Sun 2026-02-01 09:30 EST"
    assert len(found["runs"]) == 3
    bad = browser.client.get("/schedules/timetable", params={"cron": "every day"}).json()
    assert bad == {"words": None, "runs": [], "zone": "UTC"}


def test_email_recipients_are_warned_about_when_the_server_sends_no_mail(
    api: Api, browser: Browser
) -> None:
    """Without QEXPORT_SMTP_URL, a schedule with an email recipient is saved, but its form
    (after a check) and its page say that email will not be sent; one with only a webhook is
    not warned about."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    checked = _post(browser, "/schedules/new", "/schedules/new", action="check", **_schedule_form())
    warning = '<p class="warning" id="no-smtp">Email is not configured on this server'
    assert warning in checked.text
    schedule_id = _saved(
        _post(browser, "/schedules/new", "/schedules/new", **_schedule_form()), "schedules"
    )
    assert "Email is not configured on this server" in browser.page(f"/schedules/{schedule_id}")
    hooks = _schedule_form(recipients="https://hooks.example.com/qexport")
    quiet = _post(browser, "/schedules/new", "/schedules/new", action="check", **hooks)
    assert '<p class="warning" id="no-smtp" hidden>' in quiet.text
    other = _saved(_post(browser, "/schedules/new", "/schedules/new", **hooks), "schedules")
    assert "Email is not configured" not in browser.page(f"/schedules/{other}")


def test_the_schedule_pages_say_the_cron_in_words(api: Api, browser: Browser) -> None:
    """The list and the schedule's page show the cron in words beside the expression."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    form = _schedule_form(cron="0 8 * * 1-5")
    schedule_id = _saved(_post(browser, "/schedules/new", "/schedules/new", **form), "schedules")
    assert "At 08:00, Monday through Friday" in browser.page("/schedules")
    assert "At 08:00, Monday through Friday" in browser.page(f"/schedules/{schedule_id}")


# ---------------------------------------------------------------- deleting


def _delete(browser: Browser, path: str, **data: str) -> httpx2.Response:
    return _post(browser, f"{path}/delete", path, **data)


def test_an_editor_deletes_a_query_after_the_confirmation_page(api: Api, browser: Browser) -> None:
    """The query's page has a red Delete whose dialog says what happens; without JavaScript
    the POST (or a GET of its URL) answers with the confirmation page, and yes deletes it and
    goes to the list with a notice."""
    add_person(api, "ann@example.com")
    query = api.add_query()
    browser.sign_in("ann@example.com")
    _saved(_post(browser, "/schedules/new", "/schedules/new", **_schedule_form()), "schedules")
    path = f"/queries/{query.id}"
    page = browser.page(path)
    assert 'action="/queries/q-orders-acme/delete"' in page
    assert '<button type="submit" class="danger">Delete this query</button>' in page
    assert "1 schedule exports it" in markup.unescape(page)
    asked = _delete(browser, path)
    assert asked.status_code == 200
    assert "<h1>Delete the query orders?</h1>" in asked.text
    assert "fail as access lost before they run" in asked.text
    assert '<input type="hidden" name="confirmed" value="yes">' in asked.text
    reloaded = browser.client.get(f"{path}/delete")  # the URL from the address bar: asks too
    assert reloaded.status_code == 200
    assert "<h1>Delete the query orders?</h1>" in reloaded.text
    assert api.context.catalog.get_query(query.id) is not None
    assert not api.context.catalog.get_query(query.id).deleted  # type: ignore[union-attr]
    done = _delete(browser, path, confirmed="yes")
    assert done.status_code == 303
    assert done.headers["location"] == "/queries?notice=query-deleted"
    assert "The query was deleted." in browser.page(done.headers["location"])
    assert browser.client.get(path).status_code == 404


def test_a_deleted_querys_queued_export_fails_access_lost_and_files_stop_downloading(
    api: Api, browser: Browser
) -> None:
    """What the confirmation says is what happens: an export queued when its query is deleted
    fails access_lost when a worker claims it, and a file made before can no longer be
    downloaded (403) nor opened through a public link."""
    add_person(api, "ann@example.com")
    token = api.member("ann@example.com", "editor")
    query = api.add_query()
    made = api.post("/api/v1/exports", token, json={"query_id": query.id, "format": "csv"})
    api.drain()
    link = api.post(f"/api/v1/exports/{made.json()['id']}/links", token).json()["url"]
    queued = api.post("/api/v1/exports", token, json={"query_id": query.id, "format": "csv"})
    browser.sign_in("ann@example.com")
    assert _delete(browser, f"/queries/{query.id}", confirmed="yes").status_code == 303
    api.drain()
    settled = api.get(f"/api/v1/exports/{queued.json()['id']}", token).json()
    assert settled["status"] == "failed"
    assert settled["failure"]["code"] == "access_lost"
    file = api.get(f"/api/v1/exports/{made.json()['id']}/file", token)
    assert file.status_code == 403
    assert browser.client.get(f"/exports/{made.json()['id']}/download").status_code == 403
    assert api.client.get(link.removeprefix("http://127.0.0.1:8000")).status_code == 410


def test_reports_and_schedules_are_deleted_from_their_pages(api: Api, browser: Browser) -> None:
    """A report's and a schedule's pages have Delete for those who may; confirmed, each is
    gone and the list says so."""
    add_person(api, "ann@example.com")
    api.add_query()
    browser.sign_in("ann@example.com")
    form = {"title": "R", "section-1-heading": "A", "section-1-query": ORDERS_ID}
    report_id = _saved(_post(browser, "/reports/new", "/reports/new", **form), "reports")
    schedule_id = _saved(
        _post(browser, "/schedules/new", "/schedules/new", **_schedule_form()), "schedules"
    )
    schedule_page = browser.page(f"/schedules/{schedule_id}")
    assert ">Delete this schedule</button>" in schedule_page
    assert "they finish and are delivered to its recipients as before" in schedule_page
    asked = _delete(browser, f"/schedules/{schedule_id}")
    assert "<h1>Delete the schedule of orders?</h1>" in asked.text
    done = _delete(browser, f"/schedules/{schedule_id}", confirmed="yes")
    assert done.headers["location"] == "/schedules?notice=schedule-deleted"
    assert "it makes no more exports" in browser.page(done.headers["location"])
    assert api.context.schedules.list_schedules("acme") == []
    assert ">Delete this report</button>" in browser.page(f"/reports/{report_id}")
    done = _delete(browser, f"/reports/{report_id}", confirmed="yes")
    assert done.headers["location"] == "/reports?notice=report-deleted"
    assert "The report was deleted." in browser.page(done.headers["location"])
    assert api.context.catalog.list_reports("acme") == []


def test_who_may_not_delete_sees_no_button_and_is_refused(api: Api, browser: Browser) -> None:
    """A viewer sees no Delete on a query or report and is refused (403) when posting it
    anyway, confirmed or not; another editor may not delete a schedule they do not own; a
    member of another workspace gets 404 for all three. Nothing is deleted."""
    add_person(api, "ann@example.com")
    add_person(api, "val@example.com", "viewer")
    add_person(api, "bob@example.com")
    add_person(api, "oz@example.com", "admin", workspace="other")
    query = api.add_query()
    browser.sign_in("ann@example.com")
    form = {"title": "R", "section-1-heading": "A", "section-1-query": ORDERS_ID}
    report_id = _saved(_post(browser, "/reports/new", "/reports/new", **form), "reports")
    schedule_id = _saved(
        _post(browser, "/schedules/new", "/schedules/new", **_schedule_form()), "schedules"
    )
    paths = (f"/queries/{query.id}", f"/reports/{report_id}", f"/schedules/{schedule_id}")
    viewer = Browser(TestClient(api.client.app))
    viewer.sign_in("val@example.com")
    for path in paths:
        page = viewer.page(path)
        assert "/delete" not in page
        assert ">Delete this" not in page
        for confirmed in ("", "yes"):
            assert _delete(viewer, path, confirmed=confirmed).status_code == 403
    bob = Browser(TestClient(api.client.app))
    bob.sign_in("bob@example.com")
    assert "/delete" not in bob.page(paths[2])
    assert _delete(bob, paths[2], confirmed="yes").status_code == 403
    oz = Browser(TestClient(api.client.app))
    oz.sign_in("oz@example.com")
    for path in paths:
        for confirmed in ("", "yes"):
            refused = _post(oz, f"{path}/delete", "/queries", confirmed=confirmed)
            assert refused.status_code == 404, path
    query_now = api.context.catalog.get_query(query.id)
    assert query_now is not None
    assert not query_now.deleted
    assert api.context.catalog.get_report(report_id) is not None
    assert len(api.context.schedules.list_schedules("acme")) == 1


def test_deleting_a_query_names_only_the_reports_one_may_read(api: Api, browser: Browser) -> None:
    """The question counts every report that shows the query but names only those the person
    may read: a report kept to its owner is counted, its title not shown."""
    add_person(api, "ann@example.com")
    add_person(api, "bob@example.com")
    api.member("bob@example.com", "editor")
    query = api.add_query()
    for title, visibility in (("Open review", "workspace"), ("Secret plans", "members")):
        made = api.post(
            "/api/v1/reports",
            "bob@example.com",
            json={
                "title": title,
                "visibility": visibility,
                "sections": [{"heading": "A", "query_id": query.id}],
            },
        )
        assert made.status_code == 201, made.text
    browser.sign_in("ann@example.com")
    asked = markup.unescape(_delete(browser, f"/queries/{query.id}").text)
    assert "2 reports show it (Open review and 1 more)" in asked
    assert "Secret plans" not in asked
