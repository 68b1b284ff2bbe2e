"""Who is calling: an API token checked in constant time, and the caller's current role."""

from __future__ import annotations

from datetime import datetime

from qexport.domain.accounts import (
    Principal,
    hash_secret,
    last_use_due,
    parse_api_token,
    secret_matches,
)
from qexport.domain.failures import UnauthorizedError
from qexport.ports import Clock, TokenStore

# Compared against when the token id is unknown, so that an unknown id and a wrong secret
# cost the same time.
_NO_TOKEN_HASH = hash_secret("no such token")


def authenticate(accounts: TokenStore, clock: Clock, token: str) -> Principal:
    """The principal behind a bearer token (UnauthorizedError, never more detail, otherwise),
    its use recorded when one is due (see identify)."""
    principal, last_use = identify(accounts, clock, token)
    if last_use is not None:
        accounts.touch_token(principal.token_id, now=last_use)
    return principal


def identify(accounts: TokenStore, clock: Clock, token: str) -> tuple[Principal, datetime | None]:
    """The principal behind a bearer token, and the time to record as its last use when one
    is due (None: recorded within LAST_USED_RESOLUTION); UnauthorizedError (never more
    detail) otherwise. Only reads: one statement.

    A token stops working when it is revoked, when its user leaves the workspace, and while
    its user is disabled. One read finds the token, its user and their role (four
    transactions before: 5.5-7.8 ms a request on SQLite, bench/api_load.py); the last use is
    written at most once per LAST_USED_RESOLUTION.
    """
    parsed = parse_api_token(token)
    if parsed is None:
        raise UnauthorizedError("invalid token")
    token_id, secret = parsed
    holder = accounts.token_holder(token_id)
    matches = secret_matches(secret, holder.token.secret_hash if holder else _NO_TOKEN_HASH)
    if holder is None or not matches or holder.token.revoked_at is not None:
        raise UnauthorizedError("invalid token")
    user, role = holder.member.user, holder.member.role
    if role is None or user.disabled:
        raise UnauthorizedError("invalid token")
    now = clock.now()
    principal = Principal(user.id, user.email, holder.token.workspace_id, role, holder.token.id)
    return principal, now if last_use_due(holder.token, now) else None
