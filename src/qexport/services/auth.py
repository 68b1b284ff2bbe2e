"""Who is calling: an API token checked in constant time, and the caller's current role."""

from __future__ import annotations

from qexport.domain.accounts import Principal, hash_secret, parse_api_token, secret_matches
from qexport.domain.failures import UnauthorizedError
from qexport.ports import AccountStore, Clock

# Compared against when the token id is unknown, so that an unknown id and a wrong secret
# cost the same time.
_NO_TOKEN_HASH = hash_secret("no such token")


def authenticate(accounts: AccountStore, clock: Clock, token: str) -> Principal:
    """The principal behind a bearer token; UnauthorizedError (never more detail) otherwise.

    A token stops working when it is revoked, when its user leaves the workspace, and while
    its user is disabled.
    """
    parsed = parse_api_token(token)
    if parsed is None:
        raise UnauthorizedError("invalid token")
    token_id, secret = parsed
    stored = accounts.get_token(token_id)
    matches = secret_matches(secret, stored.secret_hash if stored else _NO_TOKEN_HASH)
    if stored is None or not matches or stored.revoked_at is not None:
        raise UnauthorizedError("invalid token")
    role = accounts.role_of(stored.workspace_id, stored.user_id)
    user = accounts.get_user(stored.user_id)
    if role is None or user is None or user.disabled:
        raise UnauthorizedError("invalid token")
    accounts.touch_token(stored.id, now=clock.now())
    return Principal(user.id, user.email, stored.workspace_id, role, stored.id)
