"""Signed session cookies and their CSRF tokens.

A session is a small JSON value signed with HMAC-SHA256: the user and workspace (none
before sign-in), the user's session epoch when it was issued, a random CSRF token and when
it was issued. The user and their membership are read again on every request (one
statement): a session works only while its epoch is the user's current one, the user is
enabled and still a member.
Sign-out, a password change, removal from a workspace and disabling raise the epoch, which
ends every session of that user at once, on every server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

COOKIE = "qx_session"
MAX_AGE = timedelta(hours=12)
MAX_COOKIE_CHARS = 2048


@dataclass(frozen=True)
class Session:
    """What the cookie says; `user_id` is None before sign-in."""

    csrf: str
    issued_at: datetime
    user_id: str | None = None
    workspace_id: str | None = None
    epoch: int = 0

    @classmethod
    def fresh(
        cls,
        now: datetime,
        user_id: str | None = None,
        workspace_id: str | None = None,
        epoch: int = 0,
    ) -> Session:
        return cls(secrets.token_urlsafe(24), now, user_id, workspace_id, epoch)

    def csrf_matches(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.csrf.encode(), token.encode())


class SessionKey:
    """The key session cookies are signed with, derived on first use from the installation's
    master secret (QEXPORT_SECRET_KEY, or the one kept in the metadata database), so that
    every server of an installation accepts the others' cookies."""

    def __init__(self, master: Callable[[], str]) -> None:
        self._master = master
        self._key: bytes | None = None

    def known(self) -> bytes | None:
        """The key if it was derived already (None: deriving it may read the database)."""
        return self._key

    def __call__(self) -> bytes:
        if self._key is None:
            self._key = hmac.new(
                self._master().encode(), b"qexport-session", hashlib.sha256
            ).digest()
        return self._key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def encode(session: Session, key: bytes) -> str:
    body: dict[str, Any] = {
        "c": session.csrf,
        "t": session.issued_at.isoformat(),
        "u": session.user_id,
        "w": session.workspace_id,
        "e": session.epoch,
    }
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_signature(key, payload)}"


def decode(cookie: str | None, key: bytes, now: datetime) -> Session | None:
    """The session if the cookie is intact and younger than MAX_AGE; None otherwise."""
    if not cookie or len(cookie) > MAX_COOKIE_CHARS or "." not in cookie:
        return None
    payload, signature = cookie.rsplit(".", 1)
    if not hmac.compare_digest(signature, _signature(key, payload)):
        return None
    try:
        body = json.loads(_unb64(payload))
        session = Session(
            body["c"], datetime.fromisoformat(body["t"]), body["u"], body["w"], body["e"]
        )
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(session.epoch, int):
        return None
    if not timedelta(0) <= now - session.issued_at <= MAX_AGE:
        return None
    return session
