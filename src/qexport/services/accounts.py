"""Administering accounts: users and their roles, API tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from qexport.domain.accounts import (
    OPERATOR_TOKEN_ID,
    ApiToken,
    Membership,
    Principal,
    Role,
    User,
    check_workspace_id,
    new_api_token,
    normalize_email,
    parse_api_token,
)
from qexport.domain.audit import OPERATOR, Action
from qexport.domain.exports import Requester
from qexport.domain.failures import ConflictError, InvalidRequestError, NotFoundError
from qexport.ports import AccountStore, Clock, ScheduleStore, TokenStore, UserStore
from qexport.services.audit import event

MAX_PASSWORD_CHARS = 1024  # argon2 takes any length; a bound keeps hashing cheap to refuse
_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_TOKEN_ID = re.compile(r"[0-9a-f]{16}")
_POSTGRES_SCHEMES = ("postgresql", "postgres")

_hasher = PasswordHasher()


def local_principal(accounts: UserStore, requester: Requester) -> Principal:
    """Who acts on the local database (the command line, the demo): in a workspace with
    accounts, the member `requester` names, with their role and email (the caller has checked
    they are one); in a workspace without, the operator administers their own. The audit
    trail names the operator acting for them (`OPERATOR_TOKEN_ID`)."""
    role = accounts.role_of(requester.workspace_id, requester.user_id)
    user = accounts.get_user(requester.user_id) if role is not None else None
    return Principal(
        requester.user_id,
        user.email if user is not None else "",
        requester.workspace_id,
        role or Role.ADMIN,
        OPERATOR_TOKEN_ID,
    )


# ---------------------------------------------------------------- passwords


def hash_password(password: str) -> str:
    """An argon2id hash of the password (with its own salt and parameters)."""
    if not password or len(password) > MAX_PASSWORD_CHARS:
        raise InvalidRequestError(
            f"a password must have 1 to {MAX_PASSWORD_CHARS} characters", field="password"
        )
    return _hasher.hash(password)


def password_matches(password_hash: str | None, password: str) -> bool:
    """Whether `password` is the one hashed; False for a user without a password."""
    if password_hash is None:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


# ---------------------------------------------------------------- users


def _email(email: str) -> str:
    try:
        return normalize_email(email)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), field="email") from None


def _workspace(workspace_id: str) -> str:
    # isprintable: the domain's pattern ends in `$`, which lets a final newline through.
    if not workspace_id.isprintable():
        raise InvalidRequestError(f"invalid workspace {workspace_id!r}", field="workspace")
    try:
        return check_workspace_id(workspace_id)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), field="workspace") from None


def _role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        choices = ", ".join(r.value for r in Role)
        raise InvalidRequestError(
            f"unknown role {role!r} (choose from {choices})", field="role"
        ) from None


@dataclass(frozen=True)
class UserAdded:
    """What `add_user` did: the user, and whether the user and the workspace are new."""

    user: User
    new_user: bool
    new_workspace: bool


def add_user(
    accounts: AccountStore,
    clock: Clock,
    email: str,
    *,
    workspace: str,
    role: str,
    password: str | None = None,
) -> UserAdded:
    """Make `email` a member of `workspace` with `role`, creating the user and the workspace
    when absent. A password can only be given to a new user; it is stored as an argon2 hash."""
    email, workspace, member_role = _email(email), _workspace(workspace), _role(role)
    existing = accounts.find_user(email)
    if existing is not None and password is not None:
        raise InvalidRequestError(
            f"a user {email!r} already exists; a password can only be set for a new user",
            field="password",
        )
    password_hash = hash_password(password) if password is not None else None
    now = clock.now()
    new_workspace = accounts.ensure_workspace(workspace, now=now)
    user = existing or accounts.create_user(email, password_hash=password_hash, now=now)
    before = accounts.role_of(workspace, user.id)
    role_set = event(
        clock,
        OPERATOR,
        Action.MEMBER_ROLE_SET,
        workspace_id=workspace,
        target=("user", user.id),
        details={
            "email": user.email,
            "role": member_role.value,
            "previous_role": before.value if before else None,
        },
    )
    accounts.set_role(workspace, user.id, member_role, audit=role_set)
    return UserAdded(user, existing is None, new_workspace)


def find_user(accounts: UserStore, email: str) -> User:
    user = accounts.find_user(_email(email))
    if user is None:
        raise NotFoundError(f"no user {email.strip().lower()!r}")
    return user


def list_members(accounts: AccountStore, workspace: str) -> list[tuple[User, Membership]]:
    """The workspace's members with their roles, by email."""
    if not accounts.workspace_exists(_workspace(workspace)):
        raise NotFoundError(f"no workspace {workspace!r}")
    found = []
    for membership in accounts.members(workspace):
        user = accounts.get_user(membership.user_id)
        if user is not None:
            found.append((user, membership))
    return sorted(found, key=lambda pair: pair[0].email)


def members_seen_by(accounts: AccountStore, principal: Principal) -> list[tuple[User, Membership]]:
    """The members of the caller's workspace that the caller may see, by email: every one
    for a workspace admin, the caller alone for anyone else (whose requests and links the
    lists show them: the workspace's, or their own); none without accounts."""
    if not accounts.workspace_exists(principal.workspace_id):
        return []
    members = list_members(accounts, principal.workspace_id)
    if principal.sees_workspace:
        return members
    return [(user, m) for user, m in members if user.id == principal.user_id]


def change_password(accounts: AccountStore, email: str, password: str) -> User:
    """Give the user a new password; every session they have ends."""
    user = find_user(accounts, email)
    accounts.set_password(user.id, hash_password(password))
    return user


@dataclass(frozen=True)
class Disabling:
    """What `set_disabled` did: whether the user's state changed, and schedules paused."""

    user: User
    changed: bool
    schedules_paused: int = 0


def set_disabled(
    accounts: AccountStore, schedules: ScheduleStore, clock: Clock, email: str, *, disabled: bool
) -> Disabling:
    """Disable a user (no sign-in; their sessions end, their tokens stop working, the
    schedules they own are paused) or enable them again (schedules stay paused)."""
    user = find_user(accounts, email)
    changed = accounts.set_disabled(user.id, disabled_at=clock.now() if disabled else None)
    if not disabled:
        return Disabling(user, changed)
    # Work runs with its owner's rights, and a disabled user has none: paused, even when
    # already disabled, so that a run interrupted before this point finishes when repeated.
    paused = sum(
        schedules.pause_owned(m.workspace_id, user.id) for m in accounts.memberships_of(user.id)
    )
    return Disabling(user, changed, paused)


@dataclass(frozen=True)
class MemberRemoved:
    """What `remove_member` did besides ending the membership."""

    user: User
    tokens_revoked: int
    schedules_paused: int


def remove_member(
    accounts: AccountStore, schedules: ScheduleStore, clock: Clock, email: str, *, workspace: str
) -> MemberRemoved:
    """Remove a member from a workspace: their sessions end, their tokens for it are revoked
    and the schedules they own there are paused (not left to fail `access_lost` each time).
    Refused for the workspace's last admin. Run again after an interruption, it finishes."""
    user, workspace = find_user(accounts, email), _workspace(workspace)
    if not accounts.workspace_exists(workspace):
        raise NotFoundError(f"no workspace {workspace!r}")
    removed = event(
        clock,
        OPERATOR,
        Action.MEMBER_REMOVED,
        workspace_id=workspace,
        target=("user", user.id),
        details={"email": user.email},
    )
    try:
        was_member = accounts.remove_member(workspace, user.id, keep_an_admin=True, audit=removed)
    except ConflictError as exc:
        raise InvalidRequestError(
            f"{user.email} is the only admin of workspace {workspace!r}: removing them {exc};"
            f" make another member admin first (qexport users create EMAIL --workspace"
            f" {workspace} --role admin)",
            field="email",
        ) from None
    revoked = accounts.revoke_tokens(user.id, workspace_id=workspace, now=clock.now())
    paused = schedules.pause_owned(workspace, user.id)
    if not (was_member or revoked or paused):
        raise NotFoundError(f"{user.email} is not a member of workspace {workspace!r}")
    return MemberRemoved(user, revoked, paused)


# ---------------------------------------------------------------- API tokens


@dataclass(frozen=True)
class TokenIssued:
    """A new token: its record, and the token itself, shown once and never stored."""

    record: ApiToken
    token: str = field(repr=False)  # a credential: never in a repr or a log


def issue_token(
    accounts: AccountStore, clock: Clock, email: str, *, workspace: str | None = None
) -> TokenIssued:
    """A new API token for the user in `workspace` (default: the user's only workspace)."""
    user = find_user(accounts, email)
    if user.disabled:
        raise InvalidRequestError(
            f"{user.email} is disabled; enable them first (qexport users enable)", field="email"
        )
    workspaces = [m.workspace_id for m in accounts.memberships_of(user.id)]
    if workspace is None:
        if len(workspaces) != 1:
            listed = ", ".join(workspaces) if workspaces else "none"
            raise InvalidRequestError(
                f"{user.email} is a member of {len(workspaces)} workspaces ({listed});"
                " choose one with --workspace",
                field="workspace",
            )
        workspace = workspaces[0]
    elif _workspace(workspace) not in workspaces:
        raise InvalidRequestError(
            f"{user.email} is not a member of workspace {workspace!r}", field="workspace"
        )
    token_id, token, secret_hash = new_api_token()
    created = event(
        clock,
        OPERATOR,
        Action.TOKEN_CREATED,
        workspace_id=workspace,
        target=("token", token_id),  # the token's public id, never its secret
        details={"user_id": user.id, "email": user.email},
    )
    record = accounts.add_token(
        token_id=token_id,
        user_id=user.id,
        workspace_id=workspace,
        secret_hash=secret_hash,
        now=clock.now(),
        audit=created,
    )
    return TokenIssued(record, token)


def token_id_of(token_ref: str) -> str:
    """The id of a token given by its id or as the whole token."""
    parsed = parse_api_token(token_ref.strip())
    return parsed[0] if parsed else token_ref.strip()


def revoke_token(accounts: TokenStore, clock: Clock, token_ref: str) -> bool:
    """Revoke a token given by its id (or the whole token); False if it already was."""
    token_id = token_id_of(token_ref)
    # An id is 16 hex digits; anything else cannot name a token (and is not echoed whole,
    # in case it is a mistyped secret).
    stored = accounts.get_token(token_id) if _TOKEN_ID.fullmatch(token_id) else None
    if stored is None:
        raise NotFoundError(f"no token {token_id[:16]!r}")
    revoked = event(
        clock,
        OPERATOR,
        Action.TOKEN_REVOKED,
        workspace_id=stored.workspace_id,
        target=("token", stored.id),
        details={"user_id": stored.user_id},
    )
    return accounts.revoke_token(token_id, now=clock.now(), audit=revoked)


def list_tokens(accounts: AccountStore, email: str) -> list[ApiToken]:
    return accounts.list_tokens(find_user(accounts, email).id)
