"""The authorization matrix: roles x endpoints x whose export, each cell a documented status.

Viewers and editors see only their own exports; admins see every export of their workspace;
nobody sees another workspace's. What a caller may not see answers exactly like something
that does not exist, so no response reveals whether another person's export exists.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.api.conftest import Api

ROLES = ("viewer", "editor", "admin")
OWNERS = ("own", "member", "other_workspace")


@dataclass
class World:
    api: Api
    caller: str
    # owner -> (succeeded export id, queued export id)
    exports: dict[str, tuple[str, str]]
    # owner -> the email of the person who requested that owner's exports
    people: dict[str, str]


def _request(api: Api, who: str, query_id: str) -> str:
    response = api.post("/api/v1/exports", who, json={"query_id": query_id, "format": "csv"})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _world(api: Api, role: str) -> World:
    """The caller (with `role`), another member of the same workspace, and a member of another
    workspace; each with one succeeded and one queued export of a query everyone can read."""
    api.member("caller@acme.test", role)
    api.member("colleague@acme.test", "viewer")
    api.member("stranger@other.test", "admin", workspace="other")
    acme = api.add_query("orders")
    other = api.add_query("orders", workspace="other")
    people = {
        "own": ("caller@acme.test", acme.id),
        "member": ("colleague@acme.test", acme.id),
        "other_workspace": ("stranger@other.test", other.id),
    }
    succeeded = {owner: _request(api, who, query) for owner, (who, query) in people.items()}
    assert api.drain() == {"succeeded": 3}
    queued = {owner: _request(api, who, query) for owner, (who, query) in people.items()}
    return World(
        api,
        "caller@acme.test",
        {o: (succeeded[o], queued[o]) for o in OWNERS},
        {o: who for o, (who, _) in people.items()},
    )


def _sees(role: str, owner: str) -> bool:
    return owner == "own" or (owner == "member" and role == "admin")


def _revoke_as(api: Api, caller: str, creator: str, export_id: str) -> tuple[int, int]:
    """A fresh link made by `creator` on their export, then the caller's DELETE of it:
    (the DELETE's status, the public link's status afterwards)."""
    created = api.post(f"/api/v1/exports/{export_id}/links", creator)
    assert created.status_code == 201, created.text
    link = created.json()
    revoked = api.delete(f"/api/v1/links/{link['id']}", caller).status_code
    public = api.client.get(urlparse(link["url"]).path, follow_redirects=False).status_code
    return revoked, public


def _cells(world: World, role: str) -> list[tuple[str, str, int, int]]:
    """(endpoint, owner, expected status, actual status) for every cell of the role's row."""
    api, caller = world.api, world.caller
    cells = []
    for owner in OWNERS:
        done, waiting = world.exports[owner]
        visible = _sees(role, owner)
        checks: list[tuple[str, Any, int]] = [
            ("GET export", lambda d=done: api.get(f"/api/v1/exports/{d}", caller), 200),
            ("GET file", lambda d=done: api.get(f"/api/v1/exports/{d}/file", caller), 200),
            ("GET events", lambda d=done: api.get(f"/api/v1/exports/{d}/events", caller), 200),
            (
                "POST links",
                lambda d=done: api.post(f"/api/v1/exports/{d}/links", caller),
                201,
            ),
            (
                "POST cancel (queued)",
                lambda w=waiting: api.post(f"/api/v1/exports/{w}/cancel", caller),
                200,
            ),
            (
                "POST cancel (settled)",
                lambda d=done: api.post(f"/api/v1/exports/{d}/cancel", caller),
                409,
            ),
        ]
        for endpoint, call, allowed in checks:
            cells.append((endpoint, owner, allowed if visible else 404, call().status_code))
        # The creator or a workspace admin may revoke a link; anyone else is told it does
        # not exist, and the link keeps working.
        revoked, public = _revoke_as(api, caller, world.people[owner], done)
        cells.append(("DELETE link", owner, 204 if visible else 404, revoked))
        cells.append(("GET /p/ after DELETE link", owner, 410 if visible else 200, public))
    return cells


@pytest.mark.parametrize("role", ROLES)
def test_export_endpoints_follow_the_matrix(api: Api, role: str) -> None:
    """Every export endpoint answers each role as documented for its own exports, a
    colleague's, and another workspace's: admins reach the workspace's, others only theirs."""
    world = _world(api, role)
    wrong = [(e, o, want, got) for e, o, want, got in _cells(world, role) if want != got]
    assert wrong == [], f"(endpoint, owner, expected, got) for role {role}"


@pytest.mark.parametrize("role", ROLES)
def test_list_shows_exactly_what_the_role_may_see(api: Api, role: str) -> None:
    """The list holds the caller's own exports, plus colleagues' for an admin, and never
    another workspace's."""
    world = _world(api, role)
    listed = {
        item["id"] for item in api.get("/api/v1/exports?limit=200", world.caller).json()["items"]
    }
    expected = {
        export_id
        for owner, pair in world.exports.items()
        if _sees(role, owner)
        for export_id in pair
    }
    assert listed == expected


@pytest.mark.parametrize("role", ROLES)
def test_queries_are_written_by_editors_and_admins_only(api: Api, role: str) -> None:
    """Viewers may read queries but get 403 on every write; editors and admins may write."""
    api.member("caller@acme.test", role)
    existing = api.add_query("orders")
    body = {"name": "daily", "sql": "SELECT 1 AS one", "source": "shop", "parameters": []}
    read = api.get(f"/api/v1/queries/{existing.id}", "caller@acme.test")
    created = api.post("/api/v1/queries", "caller@acme.test", json=body)
    deleted = api.delete(f"/api/v1/queries/{existing.id}", "caller@acme.test")
    if role == "viewer":
        assert (created.status_code, deleted.status_code, read.status_code) == (403, 403, 200)
        assert created.json()["code"] == "forbidden"
    else:
        assert (created.status_code, deleted.status_code, read.status_code) == (201, 204, 200)


def test_another_persons_export_is_indistinguishable_from_a_missing_one(api: Api) -> None:
    """A colleague's export and an id that was never issued get byte-identical answers on
    every endpoint, so probing ids reveals nothing."""
    api.member("caller@acme.test", "editor")
    api.member("colleague@acme.test", "viewer")
    query = api.add_query("orders")
    theirs = _request(api, "colleague@acme.test", query.id)
    api.drain()
    missing = str(uuid.uuid4())
    for suffix, method in (
        ("", "get"),
        ("/file", "get"),
        ("/events", "get"),
        ("/cancel", "post"),
        ("/links", "post"),
    ):
        answers = [
            getattr(api, method)(f"/api/v1/exports/{export_id}{suffix}", "caller@acme.test")
            for export_id in (theirs, missing)
        ]
        # The detail may echo the id that was asked for; nothing else may differ.
        bodies = [
            a.text.replace(export_id, "ID")
            for a, export_id in zip(answers, (theirs, missing), strict=True)
        ]
        assert [a.status_code for a in answers] == [404, 404], suffix
        assert bodies[0] == bodies[1], suffix


def test_other_workspace_queries_are_invisible(api: Api) -> None:
    """A query of another workspace is 404 to read, to export and to change, even for an
    admin, and is not listed."""
    api.member("caller@acme.test", "admin")
    theirs = api.add_query("secret", workspace="other")
    assert api.get(f"/api/v1/queries/{theirs.id}", "caller@acme.test").status_code == 404
    assert api.delete(f"/api/v1/queries/{theirs.id}", "caller@acme.test").status_code == 404
    request = {"query_id": theirs.id, "format": "csv"}
    assert api.post("/api/v1/exports", "caller@acme.test", json=request).status_code == 404
    names = [q["name"] for q in api.get("/api/v1/queries", "caller@acme.test").json()["items"]]
    assert "secret" not in names


def test_every_api_route_needs_a_token(api: Api) -> None:
    """Without a token every /api/v1 route answers 401 with a problem document."""
    export_id, link_id = str(uuid.uuid4()), str(uuid.uuid4())
    calls = [
        ("get", "/api/v1/exports"),
        ("post", "/api/v1/exports"),
        ("get", f"/api/v1/exports/{export_id}"),
        ("get", f"/api/v1/exports/{export_id}/file"),
        ("get", f"/api/v1/exports/{export_id}/events"),
        ("post", f"/api/v1/exports/{export_id}/cancel"),
        ("post", f"/api/v1/exports/{export_id}/links"),
        ("delete", f"/api/v1/links/{link_id}"),
        ("get", "/api/v1/queries"),
        ("post", "/api/v1/queries"),
    ]
    for method, path in calls:
        response = getattr(api.client, method)(path)
        assert response.status_code == 401, (method, path)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "unauthorized"
