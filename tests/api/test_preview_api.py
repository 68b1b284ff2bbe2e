"""`POST /api/v1/queries/{id}/preview`: the first rows of a query, run with the requester's
rights as an export would run (over real SQLite or PostgreSQL metadata and a DuckDB source):
the caps, who may, parameters bound and never interpolated, errors mapped as exports map
them, and the concurrency cap."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from qexport.app import create_app
from qexport.domain.queries import Parameter, ParamType, Query, Visibility
from qexport.http.one_hop import API_THREADS
from qexport.services.slots import PER_REQUESTER
from qexport.writers.cells import CUT_MARK
from tests.api.conftest import SOURCE, Api, api_on
from tests.fakes import FixedSources, InProcessPreviews
from tests.unit.fakes import FakeSource

ANN = "ann@acme.test"
VIEWER = "vic@acme.test"
STRANGER = "sam@other.test"
HOSTILE = "x'); DROP TABLE orders; -- \" \\ $$ %s"


def _url(query_id: str) -> str:
    return f"/api/v1/queries/{query_id}/preview"


@pytest.fixture
def preview_team(api_both: Api) -> Api:
    api_both.member(ANN, "editor")
    api_both.member(VIEWER, "viewer")
    api_both.member(STRANGER, "admin", workspace="other")
    api_both.add_query("orders")
    return api_both


def _add(api: Api, name: str, sql: str, *params: Parameter, **kwargs: Any) -> Query:
    return api.add_query(name, sql=sql, parameters=params, **kwargs)


def test_a_member_previews_the_first_rows_with_their_types(preview_team: Api) -> None:
    """200: the columns with DuckDB's type names, the rows in order, decimals as exact text,
    dates in ISO form, the parameters the query ran with; nothing is cut."""
    response = preview_team.post(
        _url("q-orders-acme"), VIEWER, json={"parameters": {"since": "2024-01-29"}}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["columns"] == [
        {"name": "id", "type": "BIGINT"},
        {"name": "customer", "type": "VARCHAR"},
        {"name": "amount", "type": "DECIMAL(10,2)"},
        {"name": "day", "type": "DATE"},
    ]
    assert body["rows"][:2] == [
        [28, "customer 0", "35.00", "2024-01-29"],
        [29, "customer 1", "36.25", "2024-01-30"],
    ]
    assert body["row_count"] == len(body["rows"]) == 6  # ids 28, 29, 58, 59, 88 and 89
    assert body["parameters"] == {"since": "2024-01-29"}
    assert body["truncated"] is False
    assert body["limits"] == {"rows": 100, "cell_chars": 1000, "bytes": 262144}


def test_at_most_100_rows_and_the_limit_asked_for(preview_team: Api) -> None:
    """300 rows: 100 shown, `truncated` and `more_rows` true; `limit` 5 shows 5; a limit
    past 100 is refused naming it."""
    _add(preview_team, "many", "SELECT o.id, t.i FROM orders o, range(3) t(i) ORDER BY o.id, t.i")
    body = preview_team.post(_url("q-many-acme"), ANN, json={}).json()
    assert body["row_count"] == 100
    assert body["truncated"] is True
    assert body["more_rows"] is True
    assert preview_team.post(_url("q-many-acme"), ANN, json={"limit": 5}).json()["row_count"] == 5
    refused = preview_team.post(_url("q-many-acme"), ANN, json={"limit": 101})
    assert refused.status_code == 422
    assert refused.json()["field"] == "limit"


def test_long_cells_are_cut_and_the_text_is_bounded(preview_team: Api) -> None:
    """A 5,000-character cell is cut to 1,000 and marked; 100 rows of four such cells would be
    about 400 KiB of text, so fewer rows are shown and the answer says it was truncated."""
    _add(preview_team, "long", "SELECT repeat('é', 5000) AS t")
    body = preview_team.post(_url("q-long-acme"), ANN, json={}).json()
    assert body["rows"] == [["é" * 1000 + CUT_MARK]]
    assert body["cut_cells"] == 1
    assert body["truncated"] is True
    wide = "SELECT " + ", ".join(f"repeat('{c}', 1000) AS {c}" for c in "abcd")
    _add(preview_team, "wide", f"{wide} FROM range(100)")
    body = preview_team.post(_url("q-wide-acme"), ANN, json={}).json()
    assert 0 < body["row_count"] < 100
    assert body["row_count"] * 4 * 1000 <= 256 * 1024
    assert body["truncated"] is True
    assert body["cut_cells"] == 0


def test_a_hostile_parameter_value_is_bound_never_interpolated(preview_team: Api) -> None:
    """Quotes, `; DROP TABLE`, dollar quotes: the value comes back as itself, matches nothing,
    and the table is still there."""
    _add(
        preview_team,
        "who",
        "SELECT $who AS who, count(*) AS n FROM orders WHERE customer = $who",
        Parameter("who", ParamType.STRING),
    )
    body = preview_team.post(_url("q-who-acme"), ANN, json={"parameters": {"who": HOSTILE}}).json()
    assert body["rows"] == [[HOSTILE, 0]]
    assert preview_team.post(_url("q-orders-acme"), ANN, json={}).json()["row_count"] == 100


def test_the_requester_context_is_the_callers(preview_team: Api) -> None:
    """$user_id and $workspace_id are the caller's, as in their export."""
    _add(preview_team, "me", "SELECT $user_id AS u, $workspace_id AS w")
    body = preview_team.post(_url("q-me-acme"), VIEWER, json={}).json()
    assert body["rows"] == [[preview_team.user_id(VIEWER), "acme"]]


def test_a_query_the_caller_may_not_read_is_404(preview_team: Api) -> None:
    """Another workspace's member, a members-only query that does not list the caller, and a
    missing query all answer 404 alike; the owner of the members-only query reads it."""
    _add(
        preview_team,
        "secret",
        "SELECT 1 AS one",
        visibility=Visibility.MEMBERS,
        owner=preview_team.user_id(ANN),
    )
    for who, query_id in [
        (STRANGER, "q-orders-acme"),
        (VIEWER, "q-secret-acme"),
        (ANN, "q-nothing"),
    ]:
        response = preview_team.post(_url(query_id), who, json={})
        assert response.status_code == 404, (who, query_id, response.text)
        assert response.json()["code"] == "not_found"
    assert preview_team.post(_url("q-secret-acme"), ANN, json={}).status_code == 200


def test_bad_parameters_are_422_naming_them(preview_team: Api) -> None:
    """A value of the wrong type, an undeclared one and a missing required one: 422 on
    `parameters.<name>`."""
    _add(preview_team, "typed", "SELECT $n AS n", Parameter("n", ParamType.INTEGER))
    for given, field in [
        ({"n": "many"}, "parameters.n"),
        ({"n": 1, "x": 2}, "parameters.x"),
        ({}, "parameters.n"),
    ]:
        response = preview_team.post(_url("q-typed-acme"), ANN, json={"parameters": given})
        assert response.status_code == 422, response.text
        assert response.json()["field"] == field


def test_a_statement_that_is_not_one_select_is_refused(preview_team: Api) -> None:
    """A query holding a DELETE (saved before queries were checked) is 422 query_invalid with
    the source's words; the rows are still there."""
    _add(preview_team, "delete", "DELETE FROM orders")
    response = preview_team.post(_url("q-delete-acme"), ANN, json={})
    assert response.status_code == 422
    problem = response.json()
    assert problem["code"] == "query_invalid"
    assert "only a single SELECT statement is allowed" in problem["detail"]
    assert preview_team.post(_url("q-orders-acme"), ANN, json={}).json()["row_count"] == 100


def test_a_source_that_cannot_be_reached_is_503(preview_team: Api) -> None:
    """A query naming a source that is not configured: 503 source_unavailable, as an export of
    it would fail."""
    preview_team.deps.catalog.add_query(Query("q-gone", "acme", "gone", "SELECT 1", "gone"))
    response = preview_team.post(_url("q-gone"), ANN, json={})
    assert response.status_code == 503
    assert response.json()["code"] == "source_unavailable"


def test_an_unauthenticated_caller_is_401(preview_team: Api) -> None:
    """No token, no preview."""
    response = preview_team.client.post(_url("q-orders-acme"), json={})
    assert response.status_code == 401


def test_a_source_the_workspace_may_not_use_is_refused(
    tmp_path: Path, source_template: Path
) -> None:
    """The workspace lost the source: 403 access_lost, as the worker refuses its exports."""
    with api_on(tmp_path, source_template, source_workspaces={SOURCE: frozenset({"other"})}) as api:
        api.member(ANN, "editor")
        api.add_query("orders")
        response = api.post(_url("q-orders-acme"), ANN, json={})
    assert response.status_code == 403
    assert response.json()["code"] == "access_lost"


def test_a_slow_statement_ends_in_query_timeout(tmp_path: Path, source_template: Path) -> None:
    """Past the statement timeout: 504 query_timeout."""
    with api_on(tmp_path, source_template, statement_timeout_seconds=0.5) as api:
        api.member(ANN, "editor")
        _add(api, "slow", "SELECT count(*) AS n FROM range(100000000000) t(i)")
        response = api.post(_url("q-slow-acme"), ANN, json={})
    assert response.status_code == 504
    assert response.json()["code"] == "query_timeout"


def test_a_third_preview_at_once_is_429_with_retry_after(api: Api) -> None:
    """While two of a member's previews hold the source, a third is 429 with Retry-After (and
    so is saving a query, whose describe shares the slots); another member's goes through;
    once the first two finish the member may preview again."""
    api.member(ANN, "editor")
    api.member(VIEWER, "viewer")
    api.add_query("orders")
    inside = threading.Semaphore(0)
    release = threading.Event()
    calls = iter(range(1_000))
    lock = threading.Lock()

    def hold() -> None:  # the first previews wait inside the source until released
        with lock:
            call = next(calls)
        if call < PER_REQUESTER:
            inside.release()
            release.wait(timeout=20)

    source = FakeSource(pa.table({"n": [1]}), on_preview=hold)
    sources = FixedSources({SOURCE: source}, ["acme"])
    deps = replace(api.deps, sources=sources, previews=InProcessPreviews(sources))
    answers: list[int] = []
    with TestClient(create_app(deps), raise_server_exceptions=False) as client:

        def preview() -> None:
            answers.append(
                client.post(_url("q-orders-acme"), headers=api.headers(ANN), json={}).status_code
            )

        held = [threading.Thread(target=preview, name=f"held-{i}") for i in range(PER_REQUESTER)]
        try:
            for thread in held:
                thread.start()
            for _ in held:
                assert inside.acquire(timeout=20)
            refused = client.post(_url("q-orders-acme"), headers=api.headers(ANN), json={})
            assert refused.status_code == 429
            assert refused.json()["code"] == "too_many_requests"
            assert int(refused.headers["Retry-After"]) > 0
            query = {"name": "n", "sql": "SELECT 1 AS n", "source": SOURCE}
            saving = client.post("/api/v1/queries", headers=api.headers(ANN), json=query)
            assert saving.status_code == 429
            other = client.post(_url("q-orders-acme"), headers=api.headers(VIEWER), json={})
            assert other.status_code == 200
        finally:
            release.set()
            for thread in held:
                thread.join(timeout=20)
        assert answers == [200] * PER_REQUESTER
        again = client.post(_url("q-orders-acme"), headers=api.headers(ANN), json={})
        assert again.status_code == 200


def test_previews_waiting_on_their_source_leave_the_request_threads_free(api: Api) -> None:
    """Previews wait on their source on threads of their own: while more previews wait than
    the server has request threads, the API (a list, a page of exports) still answers; once
    the source answers, every preview gets its rows."""
    members = [f"ed{i}@acme.test" for i in range(API_THREADS + 1)]
    for member in members:
        api.member(member, "editor")
    api.add_query("orders")
    inside = threading.Semaphore(0)
    release = threading.Event()

    def hold() -> None:
        inside.release()
        release.wait(timeout=30)

    source = FakeSource(pa.table({"n": [1]}), on_preview=hold)
    sources = FixedSources({SOURCE: source}, ["acme"])
    deps = replace(api.deps, sources=sources, previews=InProcessPreviews(sources))
    with (
        TestClient(create_app(deps), raise_server_exceptions=False) as client,
        ThreadPoolExecutor(len(members) + 1) as pool,
    ):
        url, ann = _url("q-orders-acme"), api.headers(members[0])
        waiting = [
            pool.submit(client.post, url, headers=api.headers(member), json={})
            for member in members
        ]
        try:
            for _ in members:
                assert inside.acquire(timeout=30), "a preview did not reach its source"
            listed = pool.submit(client.get, "/api/v1/queries", headers=ann)
            # (A bound for a failure, not a timing: held threads would make it wait for ever.)
            assert listed.result(timeout=30).status_code == 200
            exports = pool.submit(client.get, "/api/v1/exports", headers=ann)
            assert exports.result(timeout=30).status_code == 200
        finally:
            release.set()
        assert [answer.result(timeout=30).status_code for answer in waiting] == [200] * len(members)
