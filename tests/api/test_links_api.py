"""Public delivery links: created for a downloadable export, served without a token at
/p/{token} while valid, and otherwise one invalid-link page that reveals nothing."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

import pytest
import sqlalchemy as sa

from qexport.domain.queries import Visibility
from qexport.store.exports.queue import SqlExportQueue
from qexport.store.tables.exports import links
from tests.api.conftest import Api

ALICE = "alice@acme.test"
BOB = "bob@acme.test"
ADMIN = "admin@acme.test"
DAY = 24 * 3600


def _request(api: Api, who: str = ALICE) -> str:
    response = api.post("/api/v1/exports", who, json={"query_id": "q-orders-acme", "format": "csv"})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _link(api: Api, export_id: str, who: str = ALICE) -> dict[str, Any]:
    response = api.post(f"/api/v1/exports/{export_id}/links", who)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _open(api: Api, link: dict[str, Any], **headers: str) -> Any:
    """Fetch the public URL as anyone would: no Authorization header."""
    return api.client.get(urlparse(link["url"]).path, headers=headers, follow_redirects=False)


def _is_invalid_page(response: Any, status: int) -> bytes:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-robots-tag"] == "noindex"
    assert b"This link is not valid" in response.content
    return bytes(response.content)


@pytest.fixture
def shared(api: Api) -> tuple[Api, str, dict[str, Any], bytes]:
    """Alice's succeeded export, a link she made to it, and the file's bytes."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer")
    api.member(ADMIN, "admin")
    api.add_query("orders")
    export_id = _request(api)
    assert api.drain() == {"succeeded": 1}
    body = api.get(f"/api/v1/exports/{export_id}/file", ALICE).content
    return api, export_id, _link(api, export_id), body


def test_a_link_serves_the_file_to_anyone(shared: tuple[Api, str, dict[str, Any], bytes]) -> None:
    """201 with id, url and the export's expiry; the URL, without any token, downloads the
    same bytes with the same headers, byte ranges included."""
    api, export_id, link, body = shared
    export = api.get(f"/api/v1/exports/{export_id}", ALICE).json()
    assert link["expires_at"] == export["expires_at"]
    base = api.context.settings.public_base_url
    assert link["url"].startswith(f"{base}/p/")
    assert len(link["url"].removeprefix(f"{base}/p/")) == 43  # 256 bits, URL-safe base64
    response = _open(api, link)
    assert response.status_code == 200
    assert response.content == body
    assert response.headers["etag"] == f'"{export["sha256"]}"'
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"].startswith(
        'attachment; filename="orders_2026-01-05.csv"'
    )
    assert response.headers["x-robots-tag"] == "noindex"
    part = _open(api, link, Range="bytes=5-9")
    assert (part.status_code, part.content) == (206, body[5:10])
    assert _open(api, link, **{"If-None-Match": response.headers["etag"]}).status_code == 304


def test_only_the_tokens_hash_is_stored(shared: tuple[Api, str, dict[str, Any], bytes]) -> None:
    """No column of the links table holds the token; the stored hash is its SHA-256."""
    api, _, link, _ = shared
    token = link["url"].rsplit("/", 1)[1]
    assert isinstance(api.deps.exports, SqlExportQueue)
    with api.deps.exports.engine.connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(sa.select(links))]
    assert len(rows) == 1
    assert all(token not in str(value) for value in rows[0].values())
    assert rows[0]["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert rows[0]["id"] == link["id"]


def test_a_revoked_link_shows_the_invalid_page(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """DELETE revokes (204, and 204 again); the link then answers 410 with the invalid
    page, while a second link to the same export keeps working."""
    api, export_id, link, body = shared
    other = _link(api, export_id)
    assert api.delete(f"/api/v1/links/{link['id']}", ALICE).status_code == 204
    assert api.delete(f"/api/v1/links/{link['id']}", ALICE).status_code == 204
    _is_invalid_page(_open(api, link), 410)
    assert _open(api, other).content == body


def test_every_invalid_link_gets_the_same_page(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """Revoked, expired, unknown and malformed tokens get byte-identical pages: 410 for the
    links that existed, 404 for the others."""
    api, export_id, link, _ = shared
    revoked = _link(api, export_id)
    api.delete(f"/api/v1/links/{revoked['id']}", ALICE)
    token = link["url"].rsplit("/", 1)[1]
    unknown = {"url": link["url"].replace(token, "A" * 43)}
    malformed = {"url": link["url"].replace(token, "..%2F" + token[:10])}
    pages = {
        _is_invalid_page(_open(api, revoked), 410),
        _is_invalid_page(_open(api, unknown), 404),
        _is_invalid_page(_open(api, malformed), 404),
        _is_invalid_page(api.client.get("/p/" + "x" * 5000), 404),
    }
    api.clock.advance(7 * DAY)
    pages.add(_is_invalid_page(_open(api, link), 410))
    assert len(pages) == 1


def test_a_link_dies_with_its_creators_access(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """The link stops working (410) when its creator may no longer read the query, and when
    the creator leaves the workspace."""
    api, _, link, body = shared
    store = api.deps.catalog
    query = store.get_query("q-orders-acme")
    assert query is not None
    store.update_query(replace(query, visibility=Visibility.MEMBERS))
    _is_invalid_page(_open(api, link), 410)
    store.update_query(query)
    assert _open(api, link).content == body
    api.context.accounts.remove_member("acme", api.user_id(ALICE))
    _is_invalid_page(_open(api, link), 410)


def test_an_admins_link_to_a_members_export(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """An admin may share a member's export and revoke the member's links; another member
    can do neither (404, as if there were nothing)."""
    api, export_id, link, body = shared
    assert api.post(f"/api/v1/exports/{export_id}/links", BOB).status_code == 404
    assert api.delete(f"/api/v1/links/{link['id']}", BOB).status_code == 404
    assert _open(api, link).status_code == 200
    admins = _link(api, export_id, ADMIN)
    assert _open(api, admins).content == body
    assert api.delete(f"/api/v1/links/{link['id']}", ADMIN).status_code == 204
    _is_invalid_page(_open(api, link), 410)


def test_links_are_only_made_for_downloadable_exports(api: Api) -> None:
    """Queued or failed: 409; expired: 410; the query no longer readable: 403; someone
    else's or unknown: 404."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer")
    query = api.add_query("orders")

    def refused(export_id: str, status: int, code: str, who: str = ALICE) -> None:
        response = api.post(f"/api/v1/exports/{export_id}/links", who)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == code

    queued = _request(api)
    refused(queued, 409, "not_ready")
    api.post(f"/api/v1/exports/{queued}/cancel", ALICE)
    refused(queued, 409, "export_failed")
    done = _request(api)
    api.drain()
    refused(done, 404, "not_found", who=BOB)
    refused("no-such-export", 404, "not_found")
    api.deps.catalog.update_query(replace(query, visibility=Visibility.MEMBERS))
    refused(done, 403, "access_lost")
    api.deps.catalog.update_query(query)
    api.clock.advance(7 * DAY)
    refused(done, 410, "expired")


# ---------------------------------------------------------------- listing and last use


def test_live_links_are_listed_to_those_who_may_revoke_them(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """GET /exports/{id}/links: its creator sees their links (never the URL again), an admin
    every link; a revoked one is listed no more; a member who cannot see the export, and
    another workspace's member, get 404 as for a missing export."""
    api, export_id, link, _ = shared
    admins = _link(api, export_id, ADMIN)
    mine = api.get(f"/api/v1/exports/{export_id}/links", ALICE)
    assert mine.status_code == 200
    (item,) = mine.json()["items"]
    assert item["id"] == link["id"]
    assert item["created_by"] == api.user_id(ALICE)
    assert item["expires_at"] == link["expires_at"]
    assert item["last_used_at"] is None
    assert "url" not in item
    every = api.get(f"/api/v1/exports/{export_id}/links", ADMIN).json()["items"]
    # Both made at the same instant of the test clock: their order is the ids'.
    assert sorted(i["id"] for i in every) == sorted([link["id"], admins["id"]])
    api.member("mallory@other.test", "admin", workspace="other")
    for who in (BOB, "mallory@other.test"):
        response = api.get(f"/api/v1/exports/{export_id}/links", who)
        assert response.status_code == 404, who
        assert link["id"] not in response.text
    assert api.delete(f"/api/v1/links/{link['id']}", ALICE).status_code == 204
    assert api.get(f"/api/v1/exports/{export_id}/links", ALICE).json()["items"] == []


def test_links_are_found_by_the_start_of_their_id_by_those_who_may_revoke_them(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """GET /links?id_prefix=: what the export's list shows each caller, found by the start of
    an id, with the export it shares: its creator's, every one for an admin, none for
    another member or another workspace's admin (an empty list, as for no such start); a
    revoked link is found no more; a start under 4 characters, or of no id, is 422."""
    api, export_id, link, _ = shared
    admins = _link(api, export_id, ADMIN)

    def found(who: str, start: str) -> list[str]:
        response = api.get("/api/v1/links", who, params={"id_prefix": start})
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    (item,) = api.get("/api/v1/links", ALICE, params={"id_prefix": link["id"][:8]}).json()["items"]
    listed = api.get(f"/api/v1/exports/{export_id}/links", ALICE).json()["items"]
    assert [item] == listed
    assert item["export_id"] == export_id
    assert found(ALICE, link["id"].upper()) == [link["id"]]
    assert found(ALICE, admins["id"][:8]) == []
    assert found(ADMIN, admins["id"][:8]) == [admins["id"]]
    assert found(ADMIN, link["id"][:8]) == [link["id"]]
    api.member("mallory@other.test", "admin", workspace="other")
    for who in (BOB, "mallory@other.test"):
        assert found(who, link["id"][:8]) == [], who
    assert api.delete(f"/api/v1/links/{link['id']}", ALICE).status_code == 204
    assert found(ALICE, link["id"]) == []
    for start in ("abc", "zzzz", ""):
        response = api.get("/api/v1/links", ALICE, params={"id_prefix": start})
        assert response.status_code == 422, start
        assert response.json()["code"] == "invalid_request"
    response = api.get("/api/v1/links", ALICE, params={"id_prefix": "abcd", "limit": 0})
    assert response.status_code == 422


def test_a_links_last_use_is_recorded_at_most_once_a_minute(
    shared: tuple[Api, str, dict[str, Any], bytes],
) -> None:
    """Serving the file records `last_used_at` (after the response); downloads within the
    minute after write nothing more, the first one after it does."""
    api, export_id, link, body = shared
    first = api.clock.now()
    assert _open(api, link).content == body
    listed = api.get(f"/api/v1/exports/{export_id}/links", ALICE).json()["items"]
    assert listed[0]["last_used_at"] == first.isoformat().replace("+00:00", "Z")
    api.clock.advance(30)
    assert _open(api, link).status_code == 200
    row = api.get(f"/api/v1/exports/{export_id}/links", ALICE).json()["items"][0]
    assert row["last_used_at"] == listed[0]["last_used_at"]
    api.clock.advance(31)
    assert _open(api, link, Range="bytes=0-9").status_code == 206
    later = api.get(f"/api/v1/exports/{export_id}/links", ADMIN).json()["items"][0]
    assert later["last_used_at"] == api.clock.now().isoformat().replace("+00:00", "Z")
