"""The browser a user signed in from before: exempt from the account's sign-in ceiling.

Guessing spread over many addresses is slowed per account (domain/sign_in.py): past the
ceiling, every attempt on the account waits a few seconds after its latest failure. An
attacker who keeps failing can keep that wait open and win the race for each free moment,
holding the account's owner at "try again in 5 seconds" for as long as the attack lasts.
The owner's own browser is told apart by a cookie it got from a successful sign-in: the
user's id and the time, signed with a key derived from the session key (so every server
accepts it and nobody else can make one), sent only to /sign-in, valid MAX_AGE. Its holder
is still bound by the per-address limits; it only skips the account-wide slowdown, which
exists for addresses that never signed in. (OWASP calls these device cookies.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime, timedelta

from fastapi import Request, Response

COOKIE = "qx_known"
MAX_AGE = timedelta(days=30)
PATH = "/sign-in"
MAX_COOKIE_CHARS = 512


def _key(request: Request) -> bytes:
    session_key: bytes = request.app.state.session_key()
    return hmac.new(session_key, b"qexport-known-browser", hashlib.sha256).digest()


def _signature(key: bytes, payload: str) -> str:
    digest = hmac.new(key, payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def remember(response: Response, request: Request, user_id: str, now: datetime) -> None:
    """Mark this browser as one `user_id` signed in from (refreshed at every sign-in)."""
    body = json.dumps({"u": user_id, "t": now.isoformat()}, separators=(",", ":")).encode()
    payload = base64.urlsafe_b64encode(body).rstrip(b"=").decode()
    response.set_cookie(
        COOKIE,
        f"{payload}.{_signature(_key(request), payload)}",
        max_age=int(MAX_AGE.total_seconds()),
        path=PATH,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


def known_user(request: Request, now: datetime) -> str | None:
    """The user this browser signed in as within MAX_AGE, if its cookie is intact."""
    cookie = request.cookies.get(COOKIE)
    if not cookie or len(cookie) > MAX_COOKIE_CHARS or "." not in cookie:
        return None
    payload, signature = cookie.rsplit(".", 1)
    if not hmac.compare_digest(signature, _signature(_key(request), payload)):
        return None
    try:
        body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        user_id, issued = body["u"], datetime.fromisoformat(body["t"])
        fresh = timedelta(0) <= now - issued <= MAX_AGE
    except (ValueError, KeyError, TypeError):
        return None
    return user_id if fresh and isinstance(user_id, str) else None
