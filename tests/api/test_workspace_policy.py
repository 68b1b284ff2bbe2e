"""A workspace's export policy: its admins narrow what may leave (formats, rows, public links
and their lifetime, retention); each refusal names the policy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.api.conftest import Api

ALICE = "alice@acme.test"  # an editor
ADMIN = "admin@acme.test"
OTHER_ADMIN = "admin@other.test"
POLICY = "/api/v1/workspaces/acme/policy"
DAY = 24 * 3600


@pytest.fixture
def policy_acme(api: Api) -> Api:
    api.member(ALICE, "editor")
    api.member(ADMIN, "admin")
    api.member(OTHER_ADMIN, "admin", workspace="other")
    api.add_query("orders")
    return api


def _set(api: Api, who: str = ADMIN, **rules: Any) -> Any:
    return api.client.patch(POLICY, headers=api.headers(who), json=rules)


def _request(api: Api, fmt: str = "csv") -> Any:
    return api.post("/api/v1/exports", ALICE, json={"query_id": "q-orders-acme", "format": fmt})


def _problems(response: Any, status: int = 422) -> dict[str, str]:
    assert response.status_code == status, response.text
    return {e["field"]: e["message"] for e in response.json().get("errors", [])}


def _succeeded(api: Api) -> dict[str, Any]:
    response = _request(api)
    assert response.status_code == 202, response.text
    assert api.drain() == {"succeeded": 1}
    body: dict[str, Any] = api.get(f"/api/v1/exports/{response.json()['id']}", ALICE).json()
    return body


def test_members_read_the_policy_and_only_its_admins_change_it(policy_acme: Api) -> None:
    """No rules at first; an editor may read but not change it; another workspace's admin
    sees no such workspace; the admin's change reads back."""
    assert policy_acme.get(POLICY, ALICE).json() == {
        "formats": None,
        "max_rows": None,
        "public_links": True,
        "link_max_days": None,
        "retention_days": None,
        "recipient_domains": None,
        "sensitive_tables": [],
        "sensitive_queries": [],
    }
    assert _set(policy_acme, ALICE, public_links=False).status_code == 403
    assert _set(policy_acme, OTHER_ADMIN, public_links=False).status_code == 404
    changed = _set(
        policy_acme, formats=["parquet", "csv"], max_rows=500, recipient_domains=["Acme.Test"]
    )
    assert changed.status_code == 200, changed.text
    assert policy_acme.get(POLICY, ALICE).json() | {} == {
        "formats": ["csv", "parquet"],
        "max_rows": 500,
        "public_links": True,
        "link_max_days": None,
        "retention_days": None,
        "recipient_domains": ["acme.test"],
        "sensitive_tables": [],
        "sensitive_queries": [],
    }
    lifted = _set(policy_acme, formats=None).json()
    assert lifted["formats"] is None
    assert lifted["max_rows"] == 500  # left out: kept


def test_a_rule_that_would_widen_the_server_or_makes_no_sense_is_refused(policy_acme: Api) -> None:
    """Every mistake at once, each naming its rule; nothing is changed."""
    problems = _problems(
        _set(
            policy_acme,
            formats=["csv", "docx"],
            max_rows=60_000_000,
            retention_days=30,
            link_max_days=0,
            recipient_domains=["not a domain"],
        )
    )
    assert "unknown format 'docx'" in problems["formats"]
    assert "may not exceed the installation's row limit" in problems["max_rows"]
    assert "may not exceed the installation's retention (7)" in problems["retention_days"]
    assert "at least 1" in problems["link_max_days"]
    assert "is not an email domain" in problems["recipient_domains[0]"]
    assert _problems(_set(policy_acme, formats=[]))["formats"].startswith("formats is a non-empty")
    assert _set(policy_acme, sensitive=True).status_code == 422  # no such rule
    assert policy_acme.get(POLICY, ALICE).json()["formats"] is None


def test_a_format_the_policy_does_not_allow_is_refused_and_a_queued_one_fails(
    policy_acme: Api,
) -> None:
    """A request in it is 422 naming the policy and records nothing; one queued before the
    change fails access_lost when it runs, saying why."""
    queued = _request(policy_acme, "parquet").json()["id"]
    assert _set(policy_acme, formats=["csv"]).status_code == 200
    refused = _problems(_request(policy_acme, "parquet"))
    assert refused["format"] == (
        "the workspace's policy does not allow parquet exports (allowed: csv)"
    )
    assert _request(policy_acme, "csv").status_code == 202
    assert policy_acme.drain() == {"succeeded": 1, "failed": 1}
    failed = policy_acme.get(f"/api/v1/exports/{queued}", ALICE).json()
    assert failed["failure"]["code"] == "access_lost"
    assert "policy does not allow parquet" in failed["failure"]["detail"]


def test_a_result_over_the_policy_row_limit_fails_limit_exceeded(policy_acme: Api) -> None:
    assert _set(policy_acme, max_rows=10).status_code == 200
    export_id = _request(policy_acme).json()["id"]
    policy_acme.drain()
    failed = policy_acme.get(f"/api/v1/exports/{export_id}", ALICE).json()
    assert failed["failure"]["code"] == "limit_exceeded"
    assert failed["failure"]["detail"] == (
        "the result has more than 10 rows, the most the workspace's policy allows an export"
    )
    assert _set(policy_acme, max_rows=100).status_code == 200  # the source's 100 rows fit
    assert _succeeded(policy_acme)["row_count"] == 100


def test_files_expire_after_the_workspace_retention(policy_acme: Api) -> None:
    assert _set(policy_acme, retention_days=2).status_code == 200
    export = _succeeded(policy_acme)
    expires = policy_acme.clock.now() + timedelta(days=2)
    assert export["expires_at"] == expires.isoformat().replace("+00:00", "Z")


def test_public_links_off_refuses_new_ones_and_stops_existing_ones(policy_acme: Api) -> None:
    export_id = _succeeded(policy_acme)["id"]
    link = policy_acme.post(f"/api/v1/exports/{export_id}/links", ALICE).json()
    path = urlparse(link["url"]).path
    assert policy_acme.client.get(path).status_code == 200
    assert _set(policy_acme, public_links=False).status_code == 200
    refused = policy_acme.post(f"/api/v1/exports/{export_id}/links", ALICE)
    assert refused.status_code == 403
    assert refused.json()["detail"] == "the workspace's policy allows no public links"
    assert policy_acme.client.get(path).status_code == 410
    assert policy_acme.get(f"/api/v1/exports/{export_id}/file", ALICE).status_code == 200
    assert _set(policy_acme, public_links=True).status_code == 200
    assert policy_acme.client.get(path).status_code == 200


def test_links_live_no_longer_than_the_policy_allows(policy_acme: Api) -> None:
    """With a 1-day lifetime a link expires after a day though its file lives 7; asking for
    longer is 422 naming the policy; asking for less is honoured; never past the file."""
    assert _set(policy_acme, link_max_days=1).status_code == 200
    export_id = _succeeded(policy_acme)["id"]
    links = f"/api/v1/exports/{export_id}/links"
    too_long = policy_acme.post(links, ALICE, json={"expires_in_days": 3})
    assert _problems(too_long)["expires_in_days"] == (
        "the workspace's policy lets a public link live at most 1 days (asked: 3)"
    )
    link = policy_acme.post(links, ALICE).json()
    day = (policy_acme.clock.now() + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert link["expires_at"] == day
    assert policy_acme.get(links, ALICE).json()["items"][0]["expires_at"] == day
    assert _set(policy_acme, link_max_days=None).status_code == 200
    file_expiry = policy_acme.get(f"/api/v1/exports/{export_id}", ALICE).json()["expires_at"]
    assert policy_acme.post(links, ALICE, json={"expires_in_days": 30}).json()["expires_at"] == (
        file_expiry
    )
    policy_acme.clock.advance(DAY + 1)
    assert policy_acme.client.get(urlparse(link["url"]).path).status_code == 410
    assert policy_acme.get(f"/api/v1/exports/{export_id}/file", ALICE).status_code == 200


def test_notify_outside_the_recipient_domains_is_refused(policy_acme: Api) -> None:
    assert _set(policy_acme, recipient_domains=["acme.test"]).status_code == 200
    body = {"query_id": "q-orders-acme", "format": "csv"}
    refused = policy_acme.post(
        "/api/v1/exports",
        ALICE,
        json=body | {"notify": [{"email": "x@acme.test"}, {"email": "leak@gmail.com"}]},
    )
    assert _problems(refused)["notify[1].email"] == (
        "the workspace's policy only allows email recipients at acme.test (gmail.com is not one)"
    )
    ok = policy_acme.post(
        "/api/v1/exports", ALICE, json=body | {"notify": [{"email": "b@eu.acme.test"}]}
    )
    assert ok.status_code == 202, ok.text
    schedule = {
        **body,
        "cron": "0 6 * * *",
        "recipients": [{"email": "leak@acme.test.evil.com"}],
    }
    assert "recipients[0].email" in _problems(
        policy_acme.post("/api/v1/schedules", ALICE, json=schedule)
    )
