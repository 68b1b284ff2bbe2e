"""The audit trail through the API: each action leaves exactly one event naming who did it
(the token's user, the public link), what it was done to and how it ended; only admins read
it, and only their own workspace's; no event holds a token, a password or row data."""

from __future__ import annotations

import json
from typing import Any

from qexport.services.audit_trail import verify
from qexport.store.tables.audit import audit_events
from tests.api.conftest import SOURCE, Api

ADMIN = "ada@acme.test"
EDITOR = "eddie@acme.test"
VIEWER = "vera@acme.test"
OUTSIDER = "otto@other.test"
QUERY = {
    "name": "big orders",
    "sql": "SELECT id, customer, amount FROM orders WHERE amount > $above ORDER BY id",
    "source": SOURCE,
    "parameters": [{"name": "above", "type": "number", "default": 100}],
}
CHANGED_SQL = "SELECT id, amount FROM orders WHERE amount > $above ORDER BY amount"


def _team(api: Api) -> Api:
    api.member(ADMIN, "admin")
    api.member(EDITOR, "editor")
    api.member(VIEWER, "viewer")
    api.member(OUTSIDER, "admin", workspace="other")
    api.add_query("orders")
    return api


def _trail(api: Api, **filters: Any) -> list[dict[str, Any]]:
    response = api.get("/api/v1/audit", ADMIN, params={"limit": 200, **filters})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _only(api: Api, action: str, **filters: Any) -> dict[str, Any]:
    """The one event of `action` (failing if there are none or several)."""
    found = _trail(api, action=action, **filters)
    assert len(found) == 1, [(e["action"], e["target"]) for e in found]
    return found[0]


def _export(api: Api, who: str, **body: Any) -> str:
    payload = {"query_id": "q-orders-acme", "format": "csv", **body}
    response = api.post("/api/v1/exports", who, json=payload)
    assert response.status_code == 202, response.text
    export_id: str = response.json()["id"]
    return export_id


def test_export_requests_downloads_and_cancels_are_each_one_event(api: Api) -> None:
    """A request, a ranged download and a cancel each leave one event by the token's user,
    naming the export; the download records its bytes, range, client and user agent."""
    _team(api)
    editor = api.user_id(EDITOR)
    export_id = _export(api, EDITOR, parameters={"since": "2024-01-10"})
    requested = _only(api, "export.requested", target=export_id)
    assert requested["actor"] == {"kind": "token", "id": editor}
    assert requested["target"] == {"kind": "export", "id": export_id}
    assert requested["outcome"] == "ok"
    assert requested["details"]["parameters"] == ["since"]  # names, never values
    assert "2024-01-10" not in json.dumps(requested)
    assert requested["details"]["token_id"] == api.tokens[EDITOR].split("_")[1]
    api.drain()

    headers = {**api.headers(EDITOR), "Range": "bytes=0-9", "User-Agent": "curl/8.5"}
    response = api.client.get(f"/api/v1/exports/{export_id}/file", headers=headers)
    assert response.status_code == 206
    download = _only(api, "file.downloaded", target=export_id)
    assert download["actor"] == {"kind": "token", "id": editor}
    assert download["details"]["bytes"] == 10
    assert download["details"]["range"] == "bytes=0-9"
    assert download["details"]["user_agent"] == "curl/8.5"
    assert download["client_address"] == "testclient"

    queued = _export(api, EDITOR)
    assert api.post(f"/api/v1/exports/{queued}/cancel", EDITOR).status_code == 200
    assert api.post(f"/api/v1/exports/{queued}/cancel", EDITOR).status_code == 409
    cancelled = _only(api, "export.cancelled")
    assert cancelled["target"]["id"] == queued


def test_a_public_link_is_created_used_and_revoked_on_record(api: Api) -> None:
    """Creating and revoking a link are events of its creator; each use is a download whose
    actor is the link; a use after revoking is recorded as refused."""
    _team(api)
    export_id = _export(api, EDITOR)
    api.drain()
    created = api.post(f"/api/v1/exports/{export_id}/links", EDITOR)
    assert created.status_code == 201
    link = created.json()
    event = _only(api, "link.created")
    assert event["target"] == {"kind": "link", "id": link["id"]}
    assert event["actor"]["id"] == api.user_id(EDITOR)

    path = "/p/" + link["url"].rsplit("/p/", 1)[1]
    assert api.client.get(path).status_code == 200
    used = _only(api, "file.downloaded", actor=link["id"])
    assert used["actor"] == {"kind": "public_link", "id": link["id"]}
    assert used["target"]["id"] == export_id
    assert used["outcome"] == "ok"

    assert api.delete(f"/api/v1/links/{link['id']}", EDITOR).status_code == 204
    assert api.delete(f"/api/v1/links/{link['id']}", EDITOR).status_code == 204  # again
    assert _only(api, "link.revoked")["target"]["id"] == link["id"]
    assert api.client.get(path).status_code == 410
    uses = _trail(api, action="file.downloaded", actor=link["id"])
    assert [u["outcome"] for u in uses] == ["refused", "ok"]


def test_query_and_schedule_changes_are_recorded_with_the_statement_before_and_after(
    api: Api,
) -> None:
    """A query created, changed (its SQL before and after) and deleted, and a schedule
    created, changed and deleted: one event each, by the member who did it."""
    _team(api)
    query = api.post("/api/v1/queries", EDITOR, json=QUERY).json()
    created = _only(api, "query.created")
    assert created["target"] == {"kind": "query", "id": query["id"]}
    put = api.client.put(
        f"/api/v1/queries/{query['id']}",
        headers=api.headers(EDITOR),
        json={**QUERY, "sql": CHANGED_SQL},
    )
    assert put.status_code == 200, put.text
    changed = _only(api, "query.changed")
    assert changed["details"]["changed"] == ["sql"]
    assert changed["details"]["sql_before"] == QUERY["sql"]
    assert changed["details"]["sql_after"] == CHANGED_SQL
    assert api.delete(f"/api/v1/queries/{query['id']}", EDITOR).status_code == 204
    assert _only(api, "query.deleted")["target"]["id"] == query["id"]

    schedule = api.post(
        "/api/v1/schedules",
        EDITOR,
        json={
            "query_id": "q-orders-acme",
            "format": "csv",
            "cron": "0 8 * * 1",
            "timezone": "UTC",
            "recipients": [{"webhook": "https://hooks.example.com/secret-path?key=s3cr3t"}],
        },
    ).json()
    made = _only(api, "schedule.created")
    assert made["details"]["recipients"] == ["webhook:hooks.example.com"]
    assert "s3cr3t" not in json.dumps(made)
    patched = api.client.patch(
        f"/api/v1/schedules/{schedule['id']}",
        headers=api.headers(EDITOR),
        json={"cron": "0 9 * * 1"},
    )
    assert patched.status_code == 200, patched.text
    assert _only(api, "schedule.changed")["details"]["changed"] == ["cron"]
    assert api.delete(f"/api/v1/schedules/{schedule['id']}", EDITOR).status_code == 204
    assert _only(api, "schedule.deleted")["target"]["id"] == schedule["id"]
    every = api.deps.settings.audit_checkpoint_every
    (report,) = verify(api.deps.audit, api.deps.objects, "acme", checkpoint_every=every)
    assert report.ok


def test_only_a_workspaces_admins_read_its_trail_and_only_theirs(api: Api) -> None:
    """Editors and viewers get 403; an admin of another workspace sees none of acme's
    events; bad filters are 422 naming each."""
    _team(api)
    _export(api, EDITOR)
    for who in (EDITOR, VIEWER):
        response = api.get("/api/v1/audit", who)
        assert response.status_code == 403
        assert response.json()["code"] == "forbidden"
    assert api.get("/api/v1/audit", OUTSIDER).json()["items"] == []
    assert len(_trail(api)) == 1
    bad = api.get("/api/v1/audit", ADMIN, params={"since": "yesterday", "cursor": "x"})
    assert bad.status_code == 422
    assert {p["field"] for p in bad.json()["errors"]} >= {"since", "cursor"}


def test_the_trail_pages_by_an_opaque_cursor(api: Api) -> None:
    """Newest first; `next_cursor` continues with older events until none are left."""
    _team(api)
    ids = [_export(api, EDITOR) for _ in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = api.get("/api/v1/audit", ADMIN, params=params).json()
        seen += [e["target"]["id"] for e in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]


def test_no_event_holds_a_token_a_link_token_a_password_or_row_data(api: Api) -> None:
    """Run the actions with known secrets, then scan every audit row for them: API tokens,
    a public link's token, a webhook URL's key, and values from the exported rows."""
    _team(api)
    export_id = _export(api, EDITOR, parameters={"since": "2024-01-10"})
    api.drain()
    api.get(f"/api/v1/exports/{export_id}/file", EDITOR)
    link = api.post(f"/api/v1/exports/{export_id}/links", EDITOR).json()
    api.client.get("/p/" + link["url"].rsplit("/p/", 1)[1])
    api.post("/api/v1/queries", EDITOR, json=QUERY)
    api.post(
        "/api/v1/schedules",
        EDITOR,
        json={
            "query_id": "q-orders-acme",
            "format": "csv",
            "cron": "0 8 * * 1",
            "recipients": [{"webhook": "https://hooks.example.com/h?key=hook-key-zz9"}],
        },
    )
    with api.deps.exports.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = [json.dumps([str(v) for v in row]) for row in conn.execute(audit_events.select())]
    assert len(rows) >= 6
    secrets = [
        *api.tokens.values(),
        *(token.split("_", 2)[2] for token in api.tokens.values()),  # the secret (may hold _)
        link["url"].rsplit("/p/", 1)[1],
        "hook-key-zz9",
        "customer 3",  # a value of the exported rows
        "2024-01-10",  # a parameter's value
    ]
    for row in rows:
        for secret in secrets:
            assert secret not in row, (secret, row)


def test_a_policy_change_is_one_event_with_the_rules_before_and_after(api: Api) -> None:
    """PATCH /workspaces/{id}/policy leaves one policy.changed event of the admin's; a
    refused change (a non-admin's) leaves none."""
    _team(api)
    url = "/api/v1/workspaces/acme/policy"
    refused = api.client.patch(url, headers=api.headers(EDITOR), json={"max_rows": 10})
    assert refused.status_code == 403
    done = api.client.patch(url, headers=api.headers(ADMIN), json={"max_rows": 1000})
    assert done.status_code == 200, done.text
    changed = _only(api, "policy.changed")
    assert changed["actor"] == {"kind": "token", "id": api.user_id(ADMIN)}
    assert changed["target"] == {"kind": "workspace", "id": "acme"}
    assert changed["details"]["before"] == {}
    assert changed["details"]["after"]["max_rows"] == 1000
