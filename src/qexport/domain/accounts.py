"""Users, workspaces, roles, API tokens and public links: who may do what. Pure, no I/O."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from qexport.domain.exports import Requester
from qexport.domain.failures import InvalidRequestError

# A token's last-used time is written at most this often, so that a busy client does not
# turn every read into a write (on SQLite, a write takes the database lock).
LAST_USED_RESOLUTION = timedelta(minutes=1)


class Role(StrEnum):
    """A member's role in a workspace; each includes the rights of the one before."""

    VIEWER = "viewer"  # read visible queries, request exports, see and download their own
    EDITOR = "editor"  # and create, change and delete queries
    ADMIN = "admin"  # and see every export of the workspace


_RANK = {Role.VIEWER: 0, Role.EDITOR: 1, Role.ADMIN: 2}


def at_least(role: Role, minimum: Role) -> bool:
    return _RANK[role] >= _RANK[minimum]


@dataclass(frozen=True)
class User:
    id: str
    email: str
    created_at: datetime
    password_hash: str | None = field(default=None, repr=False)
    # Every session cookie carries the epoch it was issued in; raising it ends them all.
    session_epoch: int = 0
    disabled_at: datetime | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


@dataclass(frozen=True)
class Membership:
    workspace_id: str
    user_id: str
    role: Role


@dataclass(frozen=True)
class Member:
    """A user and their role in one workspace (None: not a member), read together."""

    user: User
    role: Role | None


@dataclass(frozen=True)
class Standing:
    """What the store knows of a requester in a workspace when an export is about to run.

    A workspace without accounts (`registered` False) belongs to the local command line,
    whose requester is whoever runs it; in a registered one the requester must be a member.
    """

    registered: bool = False
    role: Role | None = None
    disabled: bool = False  # the requester's account is disabled (`qexport users disable`)

    @property
    def member(self) -> bool:
        return not self.registered or self.role is not None


# The `token_id` of a Principal from a signed-in session rather than an API token.
SESSION_TOKEN_ID = "session"  # noqa: S105 - a marker, not a secret
# The operator's command line on the local database, acting for a member: it has no token.
OPERATOR_TOKEN_ID = "cli"  # noqa: S105 - a marker, not a secret


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of the HTTP API: a user acting in one workspace."""

    user_id: str
    email: str
    workspace_id: str
    role: Role
    token_id: str

    @property
    def requester(self) -> Requester:
        return Requester(self.user_id, self.workspace_id)

    @property
    def can_write_queries(self) -> bool:
        return at_least(self.role, Role.EDITOR)

    @property
    def sees_workspace(self) -> bool:
        """Admins see every export of the workspace; others only their own."""
        return self.role is Role.ADMIN


@dataclass(frozen=True)
class ApiToken:
    id: str
    user_id: str
    workspace_id: str
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    secret_hash: str = field(default="", repr=False)


@dataclass(frozen=True)
class TokenHolder:
    """An API token and, read with it, its user and the user's role in its workspace."""

    token: ApiToken
    member: Member


def last_use_due(token: ApiToken, now: datetime) -> bool:
    """Whether a use at `now` is worth recording (none within LAST_USED_RESOLUTION)."""
    return token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION


@dataclass(frozen=True)
class Link:
    """A public delivery link to one export; valid while the export is and until revoked."""

    id: str
    export_id: str
    created_by: str
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None  # when it last served the file (to the minute)
    expires_at: datetime | None = None  # None: when its file expires

    def expired(self, now: datetime) -> bool:
        """Whether its own lifetime (a workspace policy's) is over."""
        return self.expires_at is not None and now >= self.expires_at


def may_share(role: Role | None, sharer: str, requested_by: str) -> bool:
    """Whether a member with `role` may link to an export `requested_by` someone: their own
    export at any role, someone else's as an admin (who sees the workspace's exports). A
    link works only while this still holds for its creator."""
    if role is None:
        return False
    return sharer == requested_by or role is Role.ADMIN


def link_cap_reached(live: int, cap: int) -> InvalidRequestError:
    """The refusal of one more link to an export that already has `cap` live ones."""
    return InvalidRequestError(
        f"this export already has {live} live links (at most {cap}); revoke one first",
        field="links",
    )


# ---------------------------------------------------------------- secrets

TOKEN_PREFIX = "qx_"  # noqa: S105 - a prefix that marks qexport tokens, not a secret
# Matched with fullmatch: `$` would also accept a trailing newline.
_TOKEN = re.compile(r"qx_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_LINK_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def new_secret() -> str:
    """256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    """SHA-256 of a 256-bit random secret: only this is stored. (A slow password hash adds
    nothing against guessing 2^256 values and would cost every request tens of ms.)"""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_api_token() -> tuple[str, str, str]:
    """(token id, the token as shown once to its owner, the hash to store)."""
    token_id = secrets.token_hex(8)
    secret = new_secret()
    return token_id, f"{TOKEN_PREFIX}{token_id}_{secret}", hash_secret(secret)


def parse_api_token(token: str) -> tuple[str, str] | None:
    """(token id, secret) of a well-formed token; None for anything else."""
    match = _TOKEN.fullmatch(token)
    return (match.group(1), match.group(2)) if match else None


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant-time comparison of a presented secret with a stored hash."""
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def valid_link_token(token: str) -> bool:
    return bool(_LINK_TOKEN.fullmatch(token))


_WORKSPACE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]{1,190}")


def check_workspace_id(workspace_id: str) -> str:
    if not _WORKSPACE.fullmatch(workspace_id):
        raise ValueError(
            f"invalid workspace {workspace_id!r}: use 1-63 lowercase letters, digits, - or _"
        )
    return workspace_id


def normalize_email(email: str) -> str:
    email = email.strip().lower()
    if not _EMAIL.fullmatch(email):
        raise ValueError(f"invalid email address {email!r}")
    return email
