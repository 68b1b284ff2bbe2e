"""A new public link's URL, carried once from the POST that made it to the page it redirects
to (POST-redirect-GET: a reload of that page never makes another link).

The URL is a bearer credential and only its hash is stored, so the page after the redirect
cannot read it back from the database. Two ways were weighed:

- Deriving the token again from the installation secret (HMAC of the link id), as delivery
  links are: the URL could be shown again at any time, but then whoever reads the database
  and the secret has every live link (without QEXPORT_SECRET_KEY the secret lives in that
  same database), which is what storing only hashes is there to prevent; and links made
  before a key rotation would show wrong URLs.
- A one-time flash in a cookie (chosen): the URL travels to the browser that asked for it,
  sealed (AES-256-GCM under a key derived from the session key, bound to the session's CSRF
  token and to the export), HttpOnly, SameSite=Strict, scoped to the export's page and
  dropped by the first page that shows it, within FLASH_SECONDS. The browser holding it
  already holds the session, which could make links at will, so it learns nothing new; a
  logged cookie shows nothing without the key; and the database still holds only hashes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastapi import Request, Response

from qexport.web.session import Session

COOKIE = "qx_new_link"
FLASH_SECONDS = 300  # long enough for a slow redirect, short enough to be gone if it fails
_NONCE_BYTES = 12
MAX_COOKIE_CHARS = 1024


@dataclass(frozen=True)
class NewLink:
    link_id: str
    url: str


def _key(request: Request) -> bytes:
    session_key: bytes = request.app.state.session_key()
    return hmac.new(session_key, b"qexport-new-link", hashlib.sha256).digest()


def _aad(session: Session, export_id: str) -> bytes:
    return f"qexport-new-link:{session.csrf}:{export_id}".encode()


def _path(export_id: str) -> str:
    return f"/exports/{export_id}"


def remember(
    response: Response, request: Request, session: Session, export_id: str, new: NewLink
) -> None:
    """Seal the new link into the response for the export's page to show once."""
    nonce = secrets.token_bytes(_NONCE_BYTES)
    body = json.dumps({"l": new.link_id, "u": new.url}).encode()
    sealed = AESGCM(_key(request)).encrypt(nonce, body, _aad(session, export_id))
    response.set_cookie(
        COOKIE,
        base64.urlsafe_b64encode(nonce + sealed).decode(),
        max_age=FLASH_SECONDS,
        path=_path(export_id),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def read(request: Request, session: Session, export_id: str) -> NewLink | None:
    """The link the export's page is to show, if the cookie holds one sealed for this
    session and export (`drop` it with the page that shows it)."""
    raw = request.cookies.get(COOKIE)
    if raw is None or len(raw) > MAX_COOKIE_CHARS:
        return None
    try:
        data = base64.urlsafe_b64decode(raw.encode())
        opened = AESGCM(_key(request)).decrypt(
            data[:_NONCE_BYTES], data[_NONCE_BYTES:], _aad(session, export_id)
        )
        body = json.loads(opened)
        return NewLink(str(body["l"]), str(body["u"]))
    except (InvalidTag, ValueError, binascii.Error, KeyError, TypeError):
        return None


def drop(request: Request, response: Response, export_id: str) -> None:
    """Make the page's response forget the flash, so that a reload shows it no more."""
    if COOKIE in request.cookies:
        response.delete_cookie(
            COOKIE,
            path=_path(export_id),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
