"""GET /api/v1/members: who a caller may name, by email, as the lists they read name them."""

from __future__ import annotations

from tests.api.conftest import Api


def _seen(api: Api, who: str) -> list[tuple[str, str, str]]:
    response = api.get("/api/v1/members", who)
    assert response.status_code == 200, response.text
    return [(m["id"], m["email"], m["role"]) for m in response.json()["items"]]


def test_an_admin_sees_every_member_and_anyone_else_themselves(api: Api) -> None:
    """An admin: the workspace's members, by email, with their ids and roles; a viewer or an
    editor: only themselves (as their approvals and links list only their own); nobody of
    another workspace; without a token, 401."""
    api.member("ann@acme.test", "admin")
    api.member("bob@acme.test", "editor")
    api.member("cy@acme.test", "viewer")
    api.member("mallory@other.test", "admin", workspace="other")
    ids = {email: api.user_id(email) for email in ("ann@acme.test", "bob@acme.test")}
    assert _seen(api, "ann@acme.test") == [
        (ids["ann@acme.test"], "ann@acme.test", "admin"),
        (ids["bob@acme.test"], "bob@acme.test", "editor"),
        (api.user_id("cy@acme.test"), "cy@acme.test", "viewer"),
    ]
    assert _seen(api, "bob@acme.test") == [(ids["bob@acme.test"], "bob@acme.test", "editor")]
    assert [email for _id, email, _role in _seen(api, "mallory@other.test")] == [
        "mallory@other.test"
    ]
    assert api.client.get("/api/v1/members").status_code == 401
