"""Secrets of deliveries: webhook signing keys and the tokens of delivery links.

Both derive from one master secret: `QEXPORT_SECRET_KEY` when set, otherwise a random
secret generated once per installation and kept in the metadata database, so that every
process (and every retry) derives the same values.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from qexport.config import Settings
from qexport.ports import Clock, ScheduleStore

_MASTER_NAME = "webhook-signing"  # the instance secret it is stored as


def master_secret(settings: Settings, schedules: ScheduleStore, clock: Clock) -> str:
    if settings.secret_key:
        return settings.secret_key
    return schedules.instance_secret(_MASTER_NAME, lambda: secrets.token_hex(32), now=clock.now())


def _mac(key: str, message: bytes) -> bytes:
    return hmac.new(key.encode(), message, hashlib.sha256).digest()


def signing_key(
    settings: Settings, schedules: ScheduleStore, clock: Clock, workspace_id: str
) -> str:
    """The key a workspace's webhook receivers verify signatures with (64 hex characters)."""
    return workspace_key(master_secret(settings, schedules, clock), workspace_id)


def workspace_key(master: str, workspace_id: str) -> str:
    return _mac(master, f"qexport-webhook:{workspace_id}".encode()).hex()


def signature_header(key: str, timestamp: int, body: bytes) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>." + body)>`."""
    return f"t={timestamp},v1={_mac(key, f'{timestamp}.'.encode() + body).hex()}"


def link_token(master: str, delivery_id: str) -> str:
    """The public link token of a delivery: the same for every retry of that delivery, so
    that a recipient who gets the message twice gets one link (43 URL-safe characters)."""
    digest = _mac(master, f"qexport-link:{delivery_id}".encode())
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
