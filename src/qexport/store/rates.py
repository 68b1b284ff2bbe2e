"""RateLimits over SQLAlchemy Core: each key's uses within its window, as rows.

A sliding window, exact: `admit` counts the key's uses after `now - window` and records one
more only below the limit, so no minute ever holds more than the limit (a fixed window, or a
token bucket with as large a burst, lets nearly twice as many through across a minute).
Every process that shares the database counts alike: the API's, the pages' and the CLI's
previews are one member's previews. Per key the check and the write are one transaction
that callers take in turn: on PostgreSQL under a transaction-scoped advisory lock on the key
(its own lock space), on SQLite in a write transaction (one writer at a time); without the
lock, 20 callers at once with a limit of 5 were admitted 17 times on PostgreSQL. The key's
rows older than the window go in the same transaction, so a key keeps at most `limit` rows:
one statement to delete, one to count, one to insert; 0.15 ms on SQLite and 0.8 ms on
PostgreSQL (median of 300). `give_back` deletes one row of the key at the time it was
admitted (a query check whose source accepted the statement is not a look; looks.py).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

import sqlalchemy as sa

from qexport.store.engine import transaction
from qexport.store.tables.accounts import rate_admissions

# The advisory locks' first key: the rate limits' own space ("RATE"), apart from the audit
# chains' and the migrations'.
_LOCK_SPACE = 0x52415445
_LOCK = sa.text(f"SELECT pg_advisory_xact_lock({_LOCK_SPACE}, hashtext(:key))")
_KEY = sa.bindparam("key_", type_=rate_admissions.c.key.type)
_KEY_CHARS = 300  # rate_admissions.key
_SINCE = sa.bindparam("since_", type_=rate_admissions.c.at.type)
_c = rate_admissions.c
_FORGET = rate_admissions.delete().where(_c.key == _KEY, _c.at <= _SINCE)
_WITHIN = sa.select(sa.func.count(), sa.func.min(_c.at)).where(_c.key == _KEY, _c.at > _SINCE)
_ADD = rate_admissions.insert()
_AT = sa.bindparam("at_", type_=rate_admissions.c.at.type)
_ONE_AT = sa.select(sa.func.max(_c.id)).where(_c.key == _KEY, _c.at == _AT).scalar_subquery()
_GIVE_BACK = rate_admissions.delete().where(_c.id == _ONE_AT)


def _stored_key(key: str) -> str:
    """The key as its column holds it: a key longer than the column (a local requester may
    name any user) by its SHA-256."""
    if len(key) <= _KEY_CHARS:
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class SqlRateLimits:
    """RateLimits over any SQLAlchemy engine."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def admit(self, key: str, *, now: datetime, limit: int, window: timedelta) -> timedelta:
        key = _stored_key(key)
        since = now - window
        with transaction(self._engine) as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(_LOCK, {"key": key})
            conn.execute(_FORGET, {"key_": key, "since_": since})
            count, oldest = conn.execute(_WITHIN, {"key_": key, "since_": since}).one()
            if count >= limit:
                wait: timedelta = oldest + window - now
                return max(wait, timedelta(microseconds=1))
            conn.execute(_ADD, {"key": key, "at": now})
        return timedelta(0)

    def give_back(self, key: str, *, at: datetime) -> None:
        key = _stored_key(key)
        with transaction(self._engine) as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(_LOCK, {"key": key})
            conn.execute(_GIVE_BACK, {"key_": key, "at_": at})
