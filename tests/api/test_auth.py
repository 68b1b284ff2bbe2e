"""Bearer tokens at the HTTP API: a bad token of any kind gets 401 and nothing else; a good
one works and its use is recorded; only hashes of tokens are stored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from qexport.domain.accounts import parse_api_token
from qexport.store.exports.queue import SqlExportQueue
from tests.api.conftest import Api

ANN = "ann@acme.test"
PROTECTED = "/api/v1/queries"


def _secret(token: str) -> str:
    """The token's random part (which may itself contain `_`)."""
    parsed = parse_api_token(token)
    assert parsed is not None
    return parsed[1]


def _token_id(token: str) -> str:
    return token.split("_")[1]


def _tampered(token: str) -> str:
    """The token with one character of its secret changed."""
    middle = len(token) - 10
    return token[:middle] + ("B" if token[middle] != "B" else "C") + token[middle + 1 :]


def _authorization(api: Api, case: str) -> dict[str, str]:
    """The Authorization header of each refused case (some change the account first)."""
    token = api.tokens[ANN]
    if case == "revoked":
        assert api.context.accounts.revoke_token(_token_id(token), now=api.clock.now())
    if case == "removed member":
        assert api.context.accounts.remove_member("acme", api.user_id(ANN))
    if case == "disabled user":
        assert api.context.accounts.set_disabled(api.user_id(ANN), disabled_at=api.clock.now())
    headers = {
        "missing": {},
        "basic scheme": {"Authorization": "Basic YW5uOnNlY3JldA=="},
        "token scheme": {"Authorization": f"Token {token}"},
        "malformed": {"Authorization": "Bearer not-a-token"},
        "tampered": {"Authorization": f"Bearer {_tampered(token)}"},
        "unknown id": {"Authorization": f"Bearer qx_0123456789abcdef_{_secret(token)}"},
    }
    return headers.get(case, {"Authorization": f"Bearer {token}"})


NO_BEARER = ["missing", "basic scheme", "token scheme"]
BAD_BEARER = ["malformed", "tampered", "unknown id", "revoked", "removed member", "disabled user"]


def _refusal(api: Api, case: str) -> tuple[dict[str, Any], dict[str, str]]:
    api.member(ANN, "admin")
    api.add_query("orders")
    response = api.client.get(PROTECTED, headers=_authorization(api, case))
    assert response.status_code == 401, response.text
    return response.json(), dict(response.headers)


@pytest.mark.parametrize("case", NO_BEARER + BAD_BEARER)
def test_every_bad_credential_gets_401_and_nothing_else(api: Api, case: str) -> None:
    """401, WWW-Authenticate: Bearer, and a bare problem document: no data, no hint of what
    was wrong beyond "unauthorized"."""
    body, headers = _refusal(api, case)
    assert headers["www-authenticate"] == "Bearer"
    assert headers["content-type"] == "application/problem+json"
    assert set(body) == {"type", "title", "status", "code", "detail"}
    assert (body["status"], body["code"], body["title"]) == (401, "unauthorized", "Unauthorized")
    assert "orders" not in str(body)


@pytest.fixture(params=BAD_BEARER)
def bad_bearer_body(api: Api, request: pytest.FixtureRequest) -> dict[str, Any]:
    return _refusal(api, str(request.param))[0]


EXPECTED_BAD_BEARER = {
    "type": "about:blank",
    "title": "Unauthorized",
    "status": 401,
    "code": "unauthorized",
    "detail": "invalid token",
}


def test_a_presented_bad_token_gets_one_fixed_body(bad_bearer_body: dict[str, Any]) -> None:
    """Each bad bearer token (malformed, tampered, unknown, revoked, user removed or disabled)
    gets exactly this body, so none can be told from another."""
    assert bad_bearer_body == EXPECTED_BAD_BEARER


# Requests that are invalid besides their credentials: in a query parameter, in a JSON body
# that does not parse, in one that names no query.
INVALID_REQUESTS = [
    ("GET", "/api/v1/exports?limit=0", None),
    ("GET", "/api/v1/exports?status=nonsense", None),
    ("POST", "/api/v1/exports", "{not json"),
    ("POST", "/api/v1/exports", '{"format": "csv"}'),
    ("PATCH", "/api/v1/workspaces/acme/policy", '{"max_rows": "many"}'),
]


@pytest.mark.parametrize(("method", "path", "body"), INVALID_REQUESTS)
@pytest.mark.parametrize("case", ["tampered", "revoked"])
def test_a_bad_token_is_401_before_the_request_is_judged(
    api: Api, case: str, method: str, path: str, body: str | None
) -> None:
    """An invalid request with a bad token gets the bad token's 401, never a 422 that would
    tell its sender anything about the API; with a good token it is the 422."""
    api.member(ANN, "admin")
    headers = {"Content-Type": "application/json"}
    refused = api.client.request(
        method, path, content=body, headers={**headers, **_authorization(api, case)}
    )
    assert (refused.status_code, refused.json()) == (401, EXPECTED_BAD_BEARER)
    assert refused.headers["www-authenticate"] == "Bearer"
    token = api.member("bob@acme.test", "admin")
    judged = api.client.request(
        method, path, content=body, headers={**headers, "Authorization": f"Bearer {token}"}
    )
    assert judged.status_code == 422, judged.text


@pytest.fixture(params=NO_BEARER)
def no_bearer_body(api: Api, request: pytest.FixtureRequest) -> dict[str, Any]:
    return _refusal(api, str(request.param))[0]


def test_no_bearer_credentials_get_one_fixed_body(no_bearer_body: dict[str, Any]) -> None:
    """No Authorization header, or another scheme (even carrying a valid token): the very
    body a bad token gets, so nothing tells the cases apart."""
    assert no_bearer_body == EXPECTED_BAD_BEARER


def test_a_valid_token_works_and_its_use_is_recorded(api: Api) -> None:
    """The token authenticates (the scheme in any case) and last_used_at is set to now."""
    token = api.member(ANN, "viewer")
    fresh = api.context.accounts.get_token(_token_id(token))
    assert fresh is not None
    assert fresh.last_used_at is None
    api.clock.advance(30)
    response = api.client.get(PROTECTED, headers={"Authorization": f"bearer {token}"})
    assert response.status_code == 200
    assert response.json() == {"items": []}
    stored = api.context.accounts.get_token(_token_id(token))
    assert stored is not None
    assert stored.last_used_at == api.clock.now()


def test_tokens_are_stored_only_as_hashes(api: Api) -> None:
    """No column of api_tokens holds the token, its secret, or any part of the secret
    longer than its public id."""
    tokens = [api.member(f"user{i}@acme.test", "viewer") for i in range(3)]
    assert isinstance(api.deps.exports, SqlExportQueue)
    with api.deps.exports.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM api_tokens")).all()
    assert len(rows) == 3
    stored = [str(value) for row in rows for value in row]
    for token in tokens:
        secret = _secret(token)
        assert not any(token in value or secret in value for value in stored)
        assert not any(secret[:20] in value for value in stored)


@contextmanager
def _statements(api: Api) -> Iterator[list[str]]:
    """The SQL statements SQLite runs meanwhile on the metadata database's connections, as
    its driver traces them (below SQLAlchemy: the hottest reads bypass its Connection);
    transaction control left out."""
    seen: list[str] = []

    def _record(statement: str) -> None:
        verb = statement.split(None, 1)[0].upper()
        if verb not in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA"):
            seen.append(verb)

    def _trace(dbapi_connection: Any, _record_: Any) -> None:
        dbapi_connection.set_trace_callback(_record)

    assert isinstance(api.deps.exports, SqlExportQueue)
    engine = api.deps.exports.engine
    assert engine.dialect.name == "sqlite"
    engine.dispose()  # every connection from here on is a new one, traced
    event.listen(engine, "connect", _trace)
    try:
        yield seen
    finally:
        event.remove(engine, "connect", _trace)
        engine.dispose()


def test_authenticating_a_request_is_one_read_and_a_last_use_write_once_a_minute(
    api: Api,
) -> None:
    """A request with a token costs one statement to authenticate besides its own (listing
    the queries); the token's last use is written on its first use and then again only once
    LAST_USED_RESOLUTION has passed, so a busy client's reads stay reads."""
    token = api.member(ANN, "viewer")
    headers = {"Authorization": f"Bearer {token}"}
    with _statements(api) as first:
        assert api.client.get(PROTECTED, headers=headers).status_code == 200
    api.clock.advance(30)
    with _statements(api) as again:
        assert api.client.get(PROTECTED, headers=headers).status_code == 200
    api.clock.advance(31)
    with _statements(api) as later:
        assert api.client.get(PROTECTED, headers=headers).status_code == 200
    assert first == ["SELECT", "UPDATE", "SELECT"]
    assert again == ["SELECT", "SELECT"]
    assert later == ["SELECT", "UPDATE", "SELECT"]
