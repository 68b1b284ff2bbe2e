"""The pre-render check of report exports, through the API and an in-process worker: a report
export whose report is gone, or whose report or any section's query its requester may no
longer read by the time a worker claims it, fails `access_lost` and stores nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import SOURCE, Api

OWNER = "owner@acme.test"
READER = "reader@acme.test"
REPORTS = "/api/v1/reports"
EXPORTS = "/api/v1/exports"
QUERIES = "/api/v1/queries"


@pytest.fixture
def prerender_team(api: Api) -> Api:
    """An admin who owns the queries and reports, a viewer who requests exports."""
    api.member(OWNER, "admin")
    api.member(READER, "viewer")
    return api


def _query(name: str, **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "sql": "SELECT id, amount FROM orders WHERE amount > $above ORDER BY id",
        "source": SOURCE,
        "parameters": [{"name": "above", "type": "number", "default": 10}],
        **changes,
    }


def _add_query(api: Api, name: str) -> str:
    response = api.post(QUERIES, OWNER, json=_query(name))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _report_body(query_ids: list[str], **changes: Any) -> dict[str, Any]:
    return {
        "title": "Quarterly",
        "sections": [
            {"heading": f"Section {i}", "query_id": q, "display": "table"}
            for i, q in enumerate(query_ids)
        ],
        **changes,
    }


def _add_report(api: Api, query_ids: list[str], **changes: Any) -> str:
    response = api.post(REPORTS, OWNER, json=_report_body(query_ids, **changes))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _request(api: Api, report_id: str) -> str:
    response = api.post(EXPORTS, READER, json={"report_id": report_id, "format": "pdf"})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _assert_refused_and_nothing_stored(api: Api, export_id: str) -> None:
    export = api.get(f"{EXPORTS}/{export_id}", READER).json()
    assert export["status"] == "failed"
    assert export["failure"]["code"] == "access_lost"
    assert export["attempts"] == 0
    assert export["size_bytes"] is None
    events = api.get(f"{EXPORTS}/{export_id}/events", READER).json()["items"]
    assert [e["kind"] for e in events] == ["requested", "refused"]
    assert events[-1]["code"] == "access_lost"
    key = api.deps.exports.get_export(export_id).storage_key  # type: ignore[union-attr]
    assert api.deps.objects.head(key) is None
    assert api.deps.objects.incomplete_uploads(key) == []
    assert api.get(f"{EXPORTS}/{export_id}/file", READER).status_code == 409


def test_removing_the_requester_from_a_report_refuses_the_export(prerender_team: Api) -> None:
    """The requester was a member of a members-only report when asking; the owner removes
    them before a worker claims it: failed/access_lost, nothing rendered or stored."""
    query_id = _add_query(prerender_team, "totals")
    reader = prerender_team.user_id(READER)
    report_id = _add_report(prerender_team, [query_id], visibility="members", members=[reader])
    export_id = _request(prerender_team, report_id)
    removed = prerender_team.client.put(
        f"{REPORTS}/{report_id}",
        headers=prerender_team.headers(OWNER),
        json=_report_body([query_id], visibility="members", members=[]),
    )
    assert removed.status_code == 200, removed.text
    prerender_team.drain()
    _assert_refused_and_nothing_stored(prerender_team, export_id)


def test_deleting_a_report_refuses_its_queued_export(prerender_team: Api) -> None:
    """A report deleted between the request and the claim: failed/access_lost, nothing
    stored."""
    query_id = _add_query(prerender_team, "totals")
    report_id = _add_report(prerender_team, [query_id])
    export_id = _request(prerender_team, report_id)
    assert prerender_team.delete(f"{REPORTS}/{report_id}", OWNER).status_code == 204
    prerender_team.drain()
    _assert_refused_and_nothing_stored(prerender_team, export_id)


def test_making_one_sections_query_private_refuses_the_export(prerender_team: Api) -> None:
    """The report stays readable, but one of its three sections' queries becomes members-only
    without the requester: failed/access_lost naming that section, nothing stored."""
    first, second, third = (_add_query(prerender_team, name) for name in ("one", "two", "three"))
    report_id = _add_report(prerender_team, [first, second, third])
    export_id = _request(prerender_team, report_id)
    private = prerender_team.client.put(
        f"{QUERIES}/{second}",
        headers=prerender_team.headers(OWNER),
        json=_query("two", visibility="members", members=[]),
    )
    assert private.status_code == 200, private.text
    prerender_team.drain()
    _assert_refused_and_nothing_stored(prerender_team, export_id)
    detail = prerender_team.get(f"{EXPORTS}/{export_id}", READER).json()["failure"]["detail"]
    assert "Section 1" in detail


def test_deleting_one_sections_query_refuses_the_export(prerender_team: Api) -> None:
    """A section's query deleted between the request and the claim: failed/access_lost."""
    first, second = (_add_query(prerender_team, name) for name in ("one", "two"))
    export_id = _request(prerender_team, _add_report(prerender_team, [first, second]))
    assert prerender_team.delete(f"{QUERIES}/{first}", OWNER).status_code == 204
    prerender_team.drain()
    _assert_refused_and_nothing_stored(prerender_team, export_id)


def test_a_requester_who_left_the_workspace_is_refused(prerender_team: Api) -> None:
    """The requester removed from the workspace before the claim: failed/access_lost."""
    export_id = _request(
        prerender_team, _add_report(prerender_team, [_add_query(prerender_team, "totals")])
    )
    prerender_team.context.accounts.remove_member("acme", prerender_team.user_id(READER))
    prerender_team.drain()
    prerender_team.member(READER, "viewer")  # back, to read the outcome
    _assert_refused_and_nothing_stored(prerender_team, export_id)


def test_an_export_still_readable_passes_the_check(prerender_team: Api) -> None:
    """The control: with nothing changed, the export is claimed and runs (whatever the
    renderer then makes of it), so the refusals above come from the check alone."""
    export_id = _request(
        prerender_team, _add_report(prerender_team, [_add_query(prerender_team, "totals")])
    )
    prerender_team.drain()
    events = prerender_team.get(f"{EXPORTS}/{export_id}/events", READER).json()["items"]
    assert [e["kind"] for e in events][:2] == ["requested", "claimed"]
    export = prerender_team.get(f"{EXPORTS}/{export_id}", READER).json()
    assert export["status"] in {"succeeded", "failed"}
    assert (export["failure"] or {}).get("code") != "access_lost"
