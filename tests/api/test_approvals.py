"""Sensitive queries: their exports wait for an admin's approval (four eyes), and a request
that is denied or left unanswered past QEXPORT_APPROVAL_TTL creates nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from qexport.domain.reports import Report, Section
from tests.api.conftest import Api, api_on
from tests.support.receivers import SmtpServer, smtp_server

__all__ = ["smtp_server"]  # a fixture for the tests here

ALICE = "alice@acme.test"  # an editor
ADMIN = "admin@acme.test"
BOSS = "boss@acme.test"  # the second admin
VIEWER = "viewer@acme.test"
OTHER_ADMIN = "admin@other.test"
POLICY = "/api/v1/workspaces/acme/policy"
QUERY = "q-orders-acme"
DAY = 24 * 3600


def _team(api: Api) -> Api:
    api.member(ALICE, "editor")
    api.member(ADMIN, "admin")
    api.member(BOSS, "admin")
    api.member(VIEWER, "viewer")
    api.member(OTHER_ADMIN, "admin", workspace="other")
    api.add_query("orders")
    api.add_query("public")
    return api


@pytest.fixture
def approvals_acme(api_both: Api) -> Api:
    """A workspace whose `orders` query is sensitive, on SQLite and on PostgreSQL."""
    _team(api_both)
    marked = api_both.client.patch(
        POLICY, headers=api_both.headers(ADMIN), json={"sensitive_queries": [QUERY]}
    )
    assert marked.status_code == 200, marked.text
    return api_both


def _ask(api: Api, who: str = ALICE, **body: Any) -> dict[str, Any]:
    response = api.post("/api/v1/exports", who, json={"query_id": QUERY, "format": "csv"} | body)
    assert response.status_code == 202, response.text
    view: dict[str, Any] = response.json()
    assert view["kind"] == "approval", view
    assert response.headers["Location"] == f"/api/v1/approvals/{view['id']}"
    return view


def _decide(api: Api, approval_id: str, who: str, verb: str = "approve", **body: Any) -> Any:
    return api.post(f"/api/v1/approvals/{approval_id}/{verb}", who, json=body or None)


def _exports(api: Api) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get("/api/v1/exports", ADMIN).json()["items"]
    return items


def _events(api: Api, action: str) -> list[dict[str, Any]]:
    body = api.get("/api/v1/audit", ADMIN, params={"action": action}).json()
    items: list[dict[str, Any]] = body["items"]
    return items


def test_a_sensitive_export_is_made_only_once_another_admin_approves(approvals_acme: Api) -> None:
    """The request is recorded as awaiting approval and nothing is queued; its requester (an
    editor) cannot approve it, nor can a viewer, who does not even see it; another admin's
    approval creates the export, the requester's, which then runs through the lifecycle like
    any other. Each step is one audit event."""
    asked = _ask(approvals_acme, parameters={"since": "2024-01-02"})
    assert asked["status"] == "pending"
    assert asked["subject"] == {"type": "query", "id": QUERY, "name": "orders"}
    assert _exports(approvals_acme) == []
    assert approvals_acme.drain() == {}
    mine = approvals_acme.get("/api/v1/approvals", ALICE).json()["items"]
    assert [a["id"] for a in mine] == [asked["id"]]
    assert [
        a["id"] for a in approvals_acme.get("/api/v1/approvals?pending=true", BOSS).json()["items"]
    ] == [asked["id"]]

    assert _decide(approvals_acme, asked["id"], ALICE).status_code == 403
    assert _decide(approvals_acme, asked["id"], VIEWER).status_code == 404  # not theirs to see
    approved = _decide(approvals_acme, asked["id"], BOSS, reason="for the audit committee")
    assert approved.status_code == 200, approved.text
    decided = approved.json()
    assert decided["status"] == "approved"
    assert decided["decided_by"] == approvals_acme.user_id(BOSS)
    assert decided["reason"] == "for the audit committee"
    assert approvals_acme.drain() == {"succeeded": 1}
    export = approvals_acme.get(f"/api/v1/exports/{decided['export_id']}", ALICE).json()
    assert export["status"] == "succeeded"
    assert export["requested_by"] == approvals_acme.user_id(ALICE)
    assert export["parameters"] == {"since": "2024-01-02"}
    assert (
        approvals_acme.get(f"/api/v1/approvals/{asked['id']}", ALICE).json()["status"] == "approved"
    )
    assert _decide(approvals_acme, asked["id"], ADMIN).status_code == 409  # decided once

    (requested,) = _events(approvals_acme, "approval.requested")
    assert (requested["actor"]["id"], requested["target"]) == (
        approvals_acme.user_id(ALICE),
        {"kind": "approval", "id": asked["id"]},
    )
    (decision,) = _events(approvals_acme, "approval.decided")
    assert decision["actor"] == {"kind": "token", "id": approvals_acme.user_id(BOSS)}
    assert decision["outcome"] == "ok"
    assert decision["details"]["decision"] == "approve"
    assert decision["details"]["export_id"] == decided["export_id"]
    assert _events(approvals_acme, "export.requested") == []  # the request was the approval's


def test_an_admin_may_not_approve_their_own_request(approvals_acme: Api) -> None:
    """Four eyes: the refusal names the rule and is on record; another admin may approve."""
    asked = _ask(approvals_acme, ADMIN)
    refused = _decide(approvals_acme, asked["id"], ADMIN)
    assert refused.status_code == 403
    assert "four eyes" in refused.json()["detail"]
    assert _exports(approvals_acme) == []
    (event,) = _events(approvals_acme, "approval.decided")
    assert (event["outcome"], event["actor"]["id"]) == ("refused", approvals_acme.user_id(ADMIN))
    assert _decide(approvals_acme, asked["id"], BOSS).status_code == 200
    assert len(_exports(approvals_acme)) == 1


def test_a_denied_or_unanswered_request_creates_nothing(approvals_acme: Api) -> None:
    """A denial is final and says why; a request past QEXPORT_APPROVAL_TTL (3 days) reads as
    expired and can no longer be approved. Neither ever creates an export."""
    denied = _ask(approvals_acme)
    answer = _decide(approvals_acme, denied["id"], ADMIN, "deny", reason="not for this quarter")
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["reason"]) == ("denied", "not for this quarter")
    assert _decide(approvals_acme, denied["id"], BOSS).status_code == 409

    lapsed = _ask(approvals_acme)
    assert lapsed["expires_at"] > lapsed["created_at"]
    approvals_acme.clock.advance(3 * DAY - 60)
    assert (
        approvals_acme.get(f"/api/v1/approvals/{lapsed['id']}", ALICE).json()["status"] == "pending"
    )
    approvals_acme.clock.advance(61)
    assert (
        approvals_acme.get(f"/api/v1/approvals/{lapsed['id']}", ALICE).json()["status"] == "expired"
    )
    late = _decide(approvals_acme, lapsed["id"], ADMIN)
    assert late.status_code == 409
    assert "expired" in late.json()["detail"]
    assert approvals_acme.get("/api/v1/approvals?pending=true", ADMIN).json()["items"] == []
    assert _exports(approvals_acme) == []
    assert approvals_acme.drain() == {}


def test_other_workspaces_and_other_members_see_no_such_request(approvals_acme: Api) -> None:
    """Another workspace's admin gets 404 for the id, to read or to decide; another member of
    the workspace who is not an admin sees only their own requests."""
    asked = _ask(approvals_acme)
    assert approvals_acme.get(f"/api/v1/approvals/{asked['id']}", OTHER_ADMIN).status_code == 404
    assert _decide(approvals_acme, asked["id"], OTHER_ADMIN).status_code == 404
    assert approvals_acme.get("/api/v1/approvals", OTHER_ADMIN).json()["items"] == []
    assert approvals_acme.get(f"/api/v1/approvals/{asked['id']}", VIEWER).status_code == 404
    assert approvals_acme.get("/api/v1/approvals", VIEWER).json()["items"] == []
    assert (
        approvals_acme.get(f"/api/v1/approvals/{asked['id']}", ALICE).json()["status"] == "pending"
    )


def test_only_sensitive_subjects_wait_and_a_report_holding_one_waits_too(
    approvals_acme: Api,
) -> None:
    """Another query is queued at once; a report with a sensitive section awaits approval,
    and its approved export is the report's, with the recipients the request named."""
    plain = approvals_acme.post(
        "/api/v1/exports", ALICE, json={"query_id": "q-public-acme", "format": "csv"}
    )
    assert plain.status_code == 202
    assert plain.json()["status"] == "queued"
    approvals_acme.deps.catalog.add_report(
        Report(
            id="r-mixed",
            workspace_id="acme",
            title="mixed",
            sections=(Section("Public", "q-public-acme"), Section("Orders", QUERY)),
        )
    )
    asked = approvals_acme.post(
        "/api/v1/exports",
        ALICE,
        json={"report_id": "r-mixed", "format": "html", "notify": [{"email": ALICE}]},
    )
    assert asked.status_code == 202, asked.text
    assert asked.json()["kind"] == "approval"
    decided = _decide(approvals_acme, asked.json()["id"], ADMIN).json()
    assert approvals_acme.drain() == {"succeeded": 2}
    export = approvals_acme.get(f"/api/v1/exports/{decided['export_id']}", ALICE).json()
    assert export["subject"]["type"] == "report"
    assert export["format"] == "html"
    deliveries = approvals_acme.get(f"/api/v1/exports/{export['id']}/deliveries", ALICE).json()
    assert [d["recipient"] for d in deliveries["items"]] == [{"email": ALICE}]  # as asked


def test_no_schedule_exports_a_sensitive_query(approvals_acme: Api) -> None:
    """Saving a schedule of a sensitive query is refused naming the policy; a schedule made
    before the query was marked runs, but its export fails access_lost and reads nothing."""
    schedule = {"query_id": QUERY, "format": "csv", "cron": "0 6 * * *", "timezone": "UTC"}
    refused = approvals_acme.post("/api/v1/schedules", ALICE, json=schedule)
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["errors"]
    assert problem["field"] == "query_id"
    assert "policy marks the query 'orders' sensitive" in problem["message"]

    approvals_acme.client.patch(
        POLICY, headers=approvals_acme.headers(ADMIN), json={"sensitive_queries": []}
    )
    created = approvals_acme.post("/api/v1/schedules", ALICE, json=schedule)
    assert created.status_code == 201, created.text
    approvals_acme.client.patch(
        POLICY, headers=approvals_acme.headers(ADMIN), json={"sensitive_queries": [QUERY]}
    )
    run = approvals_acme.post(f"/api/v1/schedules/{created.json()['id']}/run", ALICE)
    assert run.status_code in (200, 201, 202), run.text
    assert approvals_acme.drain() == {"failed": 1}
    failed = approvals_acme.get(f"/api/v1/exports/{run.json()['id']}", ALICE).json()
    assert failed["failure"]["code"] == "access_lost"
    assert "sensitive" in failed["failure"]["detail"]


def test_the_policy_names_only_live_queries_of_its_workspace(approvals_acme: Api) -> None:
    """A typo, or another workspace's query, would protect nothing: 422 naming the rule."""
    approvals_acme.add_query("secret", workspace="other")
    for wrong in (["q-nope"], ["q-secret-other"], "q-orders-acme", [""]):
        response = approvals_acme.client.patch(
            POLICY, headers=approvals_acme.headers(ADMIN), json={"sensitive_queries": wrong}
        )
        assert response.status_code == 422, (wrong, response.text)
        assert response.json()["errors"][0]["field"].startswith("sensitive_queries")
    assert approvals_acme.get(POLICY, ALICE).json()["sensitive_queries"] == [QUERY]


@pytest.fixture
def mailing(tmp_path: Path, source_template: Path, smtp_server: SmtpServer) -> Iterator[Api]:
    with api_on(tmp_path, source_template, smtp_url=smtp_server.url) as api:
        _team(api)
        api.client.patch(POLICY, headers=api.headers(ADMIN), json={"sensitive_queries": [QUERY]})
        yield api


def _mail_to(smtp: SmtpServer, address: str, count: int = 1) -> list[Any]:
    deadline = time.monotonic() + 10
    while len(smtp.to(address)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return smtp.to(address)


def test_admins_hear_of_a_request_and_the_requester_of_the_decision(
    mailing: Api, smtp_server: SmtpServer
) -> None:
    """With QEXPORT_SMTP_URL set, every admin but the requester is mailed the request (with
    where to decide it), and the requester the decision with its reason."""
    asked = _ask(mailing)
    for admin in (ADMIN, BOSS):
        (mail,) = _mail_to(smtp_server, admin)
        assert mail.message["Subject"] == "Approval asked: orders (csv)"
        assert ALICE in mail.text
        assert "http://127.0.0.1:8000/approvals" in mail.text
    assert smtp_server.to(VIEWER) == []
    _decide(mailing, asked["id"], BOSS, "deny", reason="ask Finance")
    (told,) = _mail_to(smtp_server, ALICE)
    assert told.message["Subject"] == "Export denied: orders (csv)"
    assert "ask Finance" in told.text


def _pending_gauge(api: Api) -> dict[str, float]:
    text = api.client.get("/metrics").text
    found = {}
    for line in text.splitlines():
        if line.startswith("qexport_approvals_pending{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('workspace="')[1].split('"')[0]] = float(value)
    return found


def test_metrics_report_the_requests_pending_by_workspace(approvals_acme: Api) -> None:
    """/metrics counts each workspace's requests still waiting: a decision or the TTL takes
    one off."""
    first, second = _ask(approvals_acme), _ask(approvals_acme)
    assert _pending_gauge(approvals_acme) == {"acme": 2.0, "other": 0.0}
    _decide(approvals_acme, first["id"], ADMIN, "deny")
    assert _pending_gauge(approvals_acme)["acme"] == 1.0
    approvals_acme.clock.advance(3 * DAY)
    assert _pending_gauge(approvals_acme)["acme"] == 0.0
    assert (
        approvals_acme.get(f"/api/v1/approvals/{second['id']}", ALICE).json()["status"] == "expired"
    )


def test_a_sensitive_query_is_not_previewed(approvals_acme: Api) -> None:
    """Its rows leave only through an approved export: a preview is 403 naming the policy,
    for its requester and for an admin alike; another query still previews."""
    for who in (ALICE, ADMIN):
        refused = approvals_acme.post(f"/api/v1/queries/{QUERY}/preview", who, json={})
        assert refused.status_code == 403, refused.text
        assert "sensitive" in refused.json()["detail"]
    assert (
        approvals_acme.post("/api/v1/queries/q-public-acme/preview", ALICE, json={}).status_code
        == 200
    )


def test_an_approval_holds_only_for_what_was_asked(approvals_acme: Api) -> None:
    """The query's SQL changed after the request: approving is 409 and nothing is made. A
    report whose sections change after its approval: the export fails access_lost and
    reads nothing it was not approved for."""
    asked = _ask(approvals_acme)
    query = approvals_acme.deps.catalog.get_query(QUERY)
    assert query is not None
    approvals_acme.deps.catalog.update_query(replace(query, sql="SELECT 'changed' AS secret"))
    changed = _decide(approvals_acme, asked["id"], ADMIN)
    assert changed.status_code == 409, changed.text
    assert "changed since it was asked for" in changed.json()["detail"]
    assert _exports(approvals_acme) == []

    approvals_acme.add_query("salaries")
    policy = {"sensitive_queries": [QUERY, "q-salaries-acme"]}
    approvals_acme.client.patch(POLICY, headers=approvals_acme.headers(ADMIN), json=policy)
    report = Report(
        id="r-pay", workspace_id="acme", title="pay", sections=(Section("Orders", QUERY),)
    )
    approvals_acme.deps.catalog.add_report(report)
    asked = approvals_acme.post(
        "/api/v1/exports", ALICE, json={"report_id": "r-pay", "format": "html"}
    )
    decided = _decide(approvals_acme, asked.json()["id"], BOSS).json()
    approvals_acme.deps.catalog.update_report(
        replace(report, sections=(Section("S", "q-salaries-acme"),))
    )
    assert approvals_acme.drain() == {"failed": 1}
    failed = approvals_acme.get(f"/api/v1/exports/{decided['export_id']}", ALICE).json()
    assert failed["failure"]["code"] == "access_lost"
    assert "changed since its export was approved" in failed["failure"]["detail"]


def test_the_admin_sees_the_recipients_and_any_requester_may_withdraw(approvals_acme: Api) -> None:
    """The request shows where the file would go; its requester, an editor, withdraws it
    (deny) and nothing is made; requests waiting are capped per requester (429)."""
    asked = _ask(approvals_acme, notify=[{"email": "ops@acme.test"}])
    shown = approvals_acme.get(f"/api/v1/approvals/{asked['id']}", BOSS).json()
    assert shown["notify"] == [{"email": "ops@acme.test"}]
    withdrawn = approvals_acme.post(
        f"/api/v1/approvals/{asked['id']}/deny", ALICE, json={"reason": None}
    )
    assert withdrawn.status_code == 200, withdrawn.text  # a null reason is none
    assert withdrawn.json()["status"] == "denied"
    for _ in range(20):  # QEXPORT_MAX_UNSETTLED_PER_USER
        _ask(approvals_acme)
    capped = approvals_acme.post(
        "/api/v1/exports", ALICE, json={"query_id": QUERY, "format": "csv"}
    )
    assert capped.status_code == 429, capped.text
    assert _exports(approvals_acme) == []


def test_a_name_with_a_line_break_is_mailed_on_one_subject_line(
    mailing: Api, smtp_server: SmtpServer
) -> None:
    """A query named across lines neither fails the request nor adds a header of its own."""
    query = mailing.deps.catalog.get_query(QUERY)
    assert query is not None
    mailing.deps.catalog.update_query(replace(query, name="pay\r\nBcc: spy@evil.test"))
    asked = mailing.post("/api/v1/exports", ALICE, json={"query_id": QUERY, "format": "csv"})
    assert asked.status_code == 202, asked.text
    (mail,) = _mail_to(smtp_server, ADMIN)
    assert mail.message["Subject"] == "Approval asked: pay  Bcc: spy@evil.test (csv)"
    assert mail.message["Bcc"] is None
    assert smtp_server.to("spy@evil.test") == []
