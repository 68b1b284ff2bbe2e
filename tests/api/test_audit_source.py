"""The built-in `audit` source: an admin saves a query on the trail and exports it through
the normal lifecycle; the file holds their workspace's events and no other's; nobody but
an admin may run it."""

from __future__ import annotations

import csv
import io

from tests.api.conftest import Api

ADMIN = "ada@acme.test"
EDITOR = "eddie@acme.test"
OUTSIDER = "otto@other.test"
TRAIL = {
    "name": "downloads and requests",
    "sql": "SELECT id, action, actor_kind, target_id, json_extract_string(details, '$.format')"
    " AS fmt FROM audit_events WHERE action LIKE $prefix ORDER BY id",
    "source": "audit",
    "parameters": [{"name": "prefix", "type": "string", "default": "export.%"}],
}


def test_an_admin_exports_the_audit_trail_as_csv_holding_only_their_workspaces_events(
    api: Api,
) -> None:
    """The export runs like any other and its file lists the workspace's export requests;
    another workspace's requests are not in it."""
    api.member(ADMIN, "admin")
    api.member(EDITOR, "editor")
    api.member(OUTSIDER, "admin", workspace="other")
    api.add_query("orders")
    api.add_query("orders", workspace="other")
    requested = [
        api.post(
            "/api/v1/exports", EDITOR, json={"query_id": "q-orders-acme", "format": fmt}
        ).json()["id"]
        for fmt in ("csv", "parquet")
    ]
    theirs = api.post(
        "/api/v1/exports", OUTSIDER, json={"query_id": "q-orders-other", "format": "csv"}
    ).json()["id"]
    saved = api.post("/api/v1/queries", ADMIN, json=TRAIL)
    assert saved.status_code == 201, saved.text
    export = api.post(
        "/api/v1/exports", ADMIN, json={"query_id": saved.json()["id"], "format": "csv"}
    )
    assert export.status_code == 202, export.text
    api.drain()
    done = api.get(f"/api/v1/exports/{export.json()['id']}", ADMIN).json()
    assert done["status"] == "succeeded", done
    body = api.get(f"/api/v1/exports/{export.json()['id']}/file", ADMIN).text
    rows = list(csv.DictReader(io.StringIO(body)))
    assert [(r["action"], r["target_id"], r["fmt"]) for r in rows] == [
        ("export.requested", requested[0], "csv"),
        ("export.requested", requested[1], "parquet"),
        ("export.requested", rows[2]["target_id"], "csv"),  # this very export's request
    ]
    assert theirs not in body
    for fmt in ("parquet", "xlsx"):
        again = api.post(
            "/api/v1/exports", ADMIN, json={"query_id": saved.json()["id"], "format": fmt}
        )
        assert again.status_code == 202
    api.drain()
    statuses = [e["status"] for e in api.get("/api/v1/exports", ADMIN).json()["items"][:2]]
    assert statuses == ["succeeded", "succeeded"]


def test_only_admins_may_save_or_run_a_query_on_the_trail(api: Api) -> None:
    """An editor cannot name the audit source; an admin's query on it fails access_lost
    once its requester is no longer an admin."""
    api.member(ADMIN, "admin")
    api.member(EDITOR, "editor")
    refused = api.post("/api/v1/queries", EDITOR, json=TRAIL)
    assert refused.status_code == 422
    assert refused.json()["field"] == "source"
    saved = api.post("/api/v1/queries", ADMIN, json=TRAIL).json()
    export = api.post("/api/v1/exports", ADMIN, json={"query_id": saved["id"], "format": "csv"})
    api.member(ADMIN, "editor")  # demoted before the worker runs it
    api.drain()
    record = api.get(f"/api/v1/exports/{export.json()['id']}", ADMIN).json()
    assert record["status"] == "failed"
    assert record["failure"]["code"] == "access_lost"


def test_the_audit_source_is_listed_for_admins_only(api: Api) -> None:
    """GET /api/v1/sources names `audit` to a workspace's admins, for whom a query may use
    it, and not to its other members."""
    api.member(ADMIN, "admin")
    api.member(EDITOR, "editor")
    listed = api.get("/api/v1/sources", ADMIN).json()["items"]
    (trail,) = [s for s in listed if s["name"] == "audit"]
    assert trail["kind"] == "audit"
    assert "audit" not in [s["name"] for s in api.get("/api/v1/sources", EDITOR).json()["items"]]
