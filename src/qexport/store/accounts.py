"""Accounts, API tokens, public links and registered sources on SQLAlchemy Core."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.accounts import (
    LAST_USED_RESOLUTION,
    ApiToken,
    Link,
    Member,
    Membership,
    Role,
    TokenHolder,
    User,
    link_cap_reached,
)
from qexport.domain.audit import AuditEvent, naming
from qexport.domain.failures import ConflictError, InvalidRequestError, NotFoundError
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.sign_in import FailureCounts, Failures
from qexport.domain.sources import RegisteredSource
from qexport.store.audit import append_if
from qexport.store.engine import read_transaction, transaction
from qexport.store.reads import OneRead
from qexport.store.tables import (
    api_tokens,
    links,
    memberships,
    sign_in_failures,
    source_shares,
    sources,
    users,
    workspaces,
)


def _user(row: sa.Row[Any]) -> User:
    return User(
        row.id, row.email, row.created_at, row.password_hash, row.session_epoch, row.disabled_at
    )


# Raising the epoch ends every session cookie issued before (they carry the old one).
_NEXT_EPOCH = {"session_epoch": users.c.session_epoch + 1}


# A user with their role in the workspace :workspace_ (NULL: not a member), one index lookup
# each; authenticating a request with it is one statement where it was three transactions.
_USER_AND_ROLE = sa.select(users, memberships.c.role.label("member_role")).outerjoin(
    memberships,
    sa.and_(
        memberships.c.user_id == users.c.id,
        memberships.c.workspace_id == sa.bindparam("workspace_"),
    ),
)
# Read by every request of an export (the policy) and by every one that names recipients.
_POLICY = OneRead(
    sa.select(workspaces.c.policy).where(workspaces.c.id == sa.bindparam("workspace_"))
)
_WEBHOOK_HOSTS = OneRead(
    sa.select(workspaces.c.webhook_hosts).where(workspaces.c.id == sa.bindparam("workspace_"))
)
_MEMBER = OneRead(_USER_AND_ROLE.where(users.c.id == sa.bindparam("user_")))
_TOKEN_HOLDER = OneRead(
    sa.select(
        *(c.label(f"token_{c.name}") for c in api_tokens.c),
        *users.c,
        memberships.c.role.label("member_role"),
    )
    .select_from(api_tokens)
    .join(users, users.c.id == api_tokens.c.user_id)
    .outerjoin(
        memberships,
        sa.and_(
            memberships.c.user_id == api_tokens.c.user_id,
            memberships.c.workspace_id == api_tokens.c.workspace_id,
        ),
    )
    .where(api_tokens.c.id == sa.bindparam("token_"))
)


def _member(row: Any) -> Member:  # a Row of _USER_AND_ROLE or _TOKEN_HOLDER
    return Member(_user(row), Role(row.member_role) if row.member_role else None)


def _token(row: sa.Row[Any]) -> ApiToken:
    return ApiToken(
        id=row.id,
        user_id=row.user_id,
        workspace_id=row.workspace_id,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        secret_hash=row.secret_hash,
    )


def _link(row: sa.Row[Any]) -> Link:
    return Link(
        row.id,
        row.export_id,
        row.created_by,
        row.created_at,
        row.revoked_at,
        row.last_used_at,
        row.expires_at,
    )


class SqlAccountStore:
    """Workspaces, users and their roles, API tokens, public links and registered sources."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def _tx(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return transaction(self._engine)

    def _read(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return read_transaction(self._engine)

    # ------------------------------------------------------------ workspaces and users

    def ensure_workspace(self, workspace_id: str, *, now: datetime) -> bool:
        """Create the workspace unless it exists; True when it was created."""
        with self._tx() as conn:
            if conn.execute(
                sa.select(workspaces.c.id).where(workspaces.c.id == workspace_id)
            ).first():
                return False
            conn.execute(workspaces.insert().values(id=workspace_id, created_at=now))
            return True

    def workspace_exists(self, workspace_id: str) -> bool:
        with self._read() as conn:
            stmt = sa.select(workspaces.c.id).where(workspaces.c.id == workspace_id)
            return conn.execute(stmt).first() is not None

    def workspace_timezone(self, workspace_id: str) -> str:
        with self._read() as conn:
            stmt = sa.select(workspaces.c.timezone).where(workspaces.c.id == workspace_id)
            zone = conn.execute(stmt).scalar_one_or_none()
        return zone or "UTC"

    def set_workspace_timezone(self, workspace_id: str, zone: str) -> bool:
        with self._tx() as conn:
            result = conn.execute(
                workspaces.update().where(workspaces.c.id == workspace_id).values(timezone=zone)
            )
            return result.rowcount == 1

    def workspace_webhook_hosts(self, workspace_id: str) -> tuple[str, ...] | None:
        hosts = _WEBHOOK_HOSTS.scalar(self._engine, {"workspace_": workspace_id})
        return None if hosts is None else tuple(str(h) for h in hosts)

    def set_workspace_webhook_hosts(self, workspace_id: str, hosts: tuple[str, ...] | None) -> bool:
        value = None if hosts is None else list(hosts)
        with self._tx() as conn:
            result = conn.execute(
                workspaces.update()
                .where(workspaces.c.id == workspace_id)
                .values(webhook_hosts=sa.null() if value is None else value)
            )
            return result.rowcount == 1

    def workspace_policy(self, workspace_id: str) -> WorkspacePolicy:
        stored = _POLICY.scalar(self._engine, {"workspace_": workspace_id})
        return WorkspacePolicy.from_json(stored)

    def set_workspace_policy(
        self,
        workspace_id: str,
        policy: WorkspacePolicy,
        *,
        audit: AuditEvent | None = None,
        revoke_links: Sequence[tuple[str, AuditEvent]] = (),
        now: datetime | None = None,
    ) -> bool:
        stored = policy.to_json()
        with self._tx() as conn:
            result = conn.execute(
                workspaces.update()
                .where(workspaces.c.id == workspace_id)
                .values(policy=stored or sa.null())
            )
            if result.rowcount != 1:
                return False
            append_if(conn, audit)
            for link_id, revoked in revoke_links:
                live = sa.and_(links.c.id == link_id, links.c.revoked_at.is_(None))
                if conn.execute(links.update().where(live).values(revoked_at=now)).rowcount:
                    append_if(conn, revoked)
            return True

    def create_user(
        self, email: str, *, password_hash: str | None, now: datetime, user_id: str | None = None
    ) -> User:
        user = User(user_id or str(uuid.uuid4()), email, now, password_hash)
        try:
            with self._tx() as conn:
                conn.execute(
                    users.insert().values(
                        id=user.id, email=email, password_hash=password_hash, created_at=now
                    )
                )
        except sa.exc.IntegrityError as exc:
            raise InvalidRequestError(f"a user {email!r} already exists", field="email") from exc
        return user

    def get_user(self, user_id: str) -> User | None:
        with self._read() as conn:
            row = conn.execute(sa.select(users).where(users.c.id == user_id)).first()
        return _user(row) if row else None

    def find_user(self, email: str) -> User | None:
        with self._read() as conn:
            row = conn.execute(sa.select(users).where(users.c.email == email)).first()
        return _user(row) if row else None

    def set_password(self, user_id: str, password_hash: str | None) -> bool:
        """Replace the hash and end the user's sessions, in one statement."""
        with self._tx() as conn:
            stmt = (
                users.update()
                .where(users.c.id == user_id)
                .values(password_hash=password_hash, **_NEXT_EPOCH)
            )
            return conn.execute(stmt).rowcount == 1

    def end_sessions(self, user_id: str) -> bool:
        with self._tx() as conn:
            stmt = users.update().where(users.c.id == user_id).values(**_NEXT_EPOCH)
            return conn.execute(stmt).rowcount == 1

    def set_disabled(self, user_id: str, *, disabled_at: datetime | None) -> bool:
        """Disable the user (ending their sessions) or, with None, enable them again; False
        when there is no such user or nothing changed."""
        stmt = users.update().where(users.c.id == user_id)
        if disabled_at is None:
            stmt = stmt.where(users.c.disabled_at.is_not(None)).values(disabled_at=None)
        else:
            stmt = stmt.where(users.c.disabled_at.is_(None)).values(
                disabled_at=disabled_at, **_NEXT_EPOCH
            )
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def set_role(
        self, workspace_id: str, user_id: str, role: Role, *, audit: AuditEvent | None = None
    ) -> None:
        """Make the user a member of the workspace with `role` (or change their role)."""
        key = sa.and_(memberships.c.workspace_id == workspace_id, memberships.c.user_id == user_id)
        with self._tx() as conn:
            append_if(conn, audit)
            if conn.execute(memberships.update().where(key).values(role=role.value)).rowcount:
                return
            conn.execute(
                memberships.insert().values(
                    workspace_id=workspace_id, user_id=user_id, role=role.value
                )
            )

    def remove_member(
        self,
        workspace_id: str,
        user_id: str,
        *,
        keep_an_admin: bool = False,
        audit: AuditEvent | None = None,
    ) -> bool:
        """End the membership and the user's sessions; False if there was none. With
        `keep_an_admin`, ConflictError instead of removing the workspace's last admin."""
        key = sa.and_(memberships.c.workspace_id == workspace_id, memberships.c.user_id == user_id)
        with self._tx() as conn:
            if keep_an_admin:
                # The workspace's row, locked: concurrent removals of its admins take turns.
                conn.execute(
                    sa.select(workspaces.c.id)
                    .where(workspaces.c.id == workspace_id)
                    .with_for_update()
                )
                admins = set(
                    conn.execute(
                        sa.select(memberships.c.user_id).where(
                            memberships.c.workspace_id == workspace_id,
                            memberships.c.role == Role.ADMIN.value,
                        )
                    ).scalars()
                )
                if admins == {user_id}:
                    raise ConflictError(
                        f"it would leave workspace {workspace_id!r} without an admin"
                    )
            if conn.execute(memberships.delete().where(key)).rowcount != 1:
                return False
            conn.execute(users.update().where(users.c.id == user_id).values(**_NEXT_EPOCH))
            append_if(conn, audit)
            return True

    def role_of(self, workspace_id: str, user_id: str) -> Role | None:
        stmt = sa.select(memberships.c.role).where(
            memberships.c.workspace_id == workspace_id, memberships.c.user_id == user_id
        )
        with self._read() as conn:
            role = conn.execute(stmt).scalar()
        return Role(role) if role else None

    def member(self, workspace_id: str, user_id: str) -> Member | None:
        row = _MEMBER.first(self._engine, {"workspace_": workspace_id, "user_": user_id})
        return _member(row) if row else None

    def memberships_of(self, user_id: str) -> list[Membership]:
        stmt = (
            sa.select(memberships)
            .where(memberships.c.user_id == user_id)
            .order_by(memberships.c.workspace_id)
        )
        with self._read() as conn:
            return [Membership(r.workspace_id, r.user_id, Role(r.role)) for r in conn.execute(stmt)]

    def members(self, workspace_id: str) -> list[Membership]:
        stmt = (
            sa.select(memberships)
            .where(memberships.c.workspace_id == workspace_id)
            .order_by(memberships.c.user_id)
        )
        with self._read() as conn:
            return [Membership(r.workspace_id, r.user_id, Role(r.role)) for r in conn.execute(stmt)]

    # ------------------------------------------------------------ API tokens

    def add_token(
        self,
        *,
        token_id: str,
        user_id: str,
        workspace_id: str,
        secret_hash: str,
        now: datetime,
        audit: AuditEvent | None = None,
    ) -> ApiToken:
        token = ApiToken(token_id, user_id, workspace_id, now, secret_hash=secret_hash)
        with self._tx() as conn:
            conn.execute(
                api_tokens.insert().values(
                    id=token_id,
                    user_id=user_id,
                    workspace_id=workspace_id,
                    secret_hash=secret_hash,
                    created_at=now,
                )
            )
            append_if(conn, audit)
        return token

    def get_token(self, token_id: str) -> ApiToken | None:
        with self._read() as conn:
            row = conn.execute(sa.select(api_tokens).where(api_tokens.c.id == token_id)).first()
        return _token(row) if row else None

    def token_holder(self, token_id: str) -> TokenHolder | None:
        row = _TOKEN_HOLDER.first(self._engine, {"token_": token_id})
        if row is None:
            return None
        token = ApiToken(
            id=row.token_id,
            user_id=row.token_user_id,
            workspace_id=row.token_workspace_id,
            created_at=row.token_created_at,
            last_used_at=row.token_last_used_at,
            revoked_at=row.token_revoked_at,
            secret_hash=row.token_secret_hash,
        )
        return TokenHolder(token, _member(row))

    def list_tokens(self, user_id: str) -> list[ApiToken]:
        stmt = (
            sa.select(api_tokens)
            .where(api_tokens.c.user_id == user_id)
            .order_by(api_tokens.c.created_at)
        )
        with self._read() as conn:
            return [_token(r) for r in conn.execute(stmt)]

    def touch_token(self, token_id: str, *, now: datetime) -> None:
        """Record a use, unless one was recorded within LAST_USED_RESOLUTION."""
        stale = sa.or_(
            api_tokens.c.last_used_at.is_(None),
            api_tokens.c.last_used_at < now - LAST_USED_RESOLUTION,
        )
        with self._tx() as conn:
            conn.execute(
                api_tokens.update()
                .where(api_tokens.c.id == token_id, stale)
                .values(last_used_at=now)
            )

    def revoke_token(
        self, token_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool:
        live = sa.and_(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
        with self._tx() as conn:
            if conn.execute(api_tokens.update().where(live).values(revoked_at=now)).rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    def revoke_tokens(self, user_id: str, *, workspace_id: str, now: datetime) -> int:
        """Revoke the user's live tokens for the workspace; how many there were."""
        live = sa.and_(
            api_tokens.c.user_id == user_id,
            api_tokens.c.workspace_id == workspace_id,
            api_tokens.c.revoked_at.is_(None),
        )
        with self._tx() as conn:
            return conn.execute(api_tokens.update().where(live).values(revoked_at=now)).rowcount

    # ------------------------------------------------------------ sign-in failures

    def sign_in_failures(self, email: str, address: str, *, since: datetime) -> FailureCounts:
        """Failures since `since` for the email (from this address, and from all) and for the
        address: two index range scans."""
        c = sign_in_failures.c
        from_here = c.address == address
        by_email = sa.select(
            sa.func.count(),
            sa.func.max(c.at),
            sa.func.count().filter(from_here),
            sa.func.max(c.at).filter(from_here),
        ).where(c.email == email, c.at > since)
        by_address = sa.select(sa.func.count(), sa.func.max(c.at)).where(from_here, c.at > since)
        with self._read() as conn:
            account, latest, pair, pair_latest = conn.execute(by_email).one()
            everywhere, address_latest = conn.execute(by_address).one()
        return FailureCounts(
            pair=Failures(pair, pair_latest),
            account=Failures(account, latest),
            address=Failures(everywhere, address_latest),
        )

    def record_sign_in_failure(
        self, email: str, address: str, *, now: datetime, forget_before: datetime
    ) -> None:
        """Record a failure, and forget every failure older than `forget_before`."""
        with self._tx() as conn:
            conn.execute(sign_in_failures.delete().where(sign_in_failures.c.at < forget_before))
            conn.execute(sign_in_failures.insert().values(email=email, address=address, at=now))

    def clear_sign_in_failures(self, email: str, address: str) -> None:
        """Forget the email's failures from `address`; they still count for the address."""
        c = sign_in_failures.c
        stmt = sign_in_failures.update().where(c.email == email, c.address == address)
        with self._tx() as conn:
            conn.execute(stmt.values(email=None))

    # ------------------------------------------------------------ public links

    def add_link(
        self,
        *,
        export_id: str,
        created_by: str,
        token_hash: str,
        now: datetime,
        max_live: int | None = None,
        expires_at: datetime | None = None,
        audit: AuditEvent | None = None,
    ) -> Link:
        """An `audit` event without a target id is given the new link's."""
        link = Link(str(uuid.uuid4()), export_id, created_by, now, expires_at=expires_at)
        with self._tx() as conn:
            if max_live is not None:
                if conn.dialect.name == "postgresql":  # serialise concurrent links to the export
                    key = f"qexport.links/{export_id}"
                    conn.execute(
                        sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtextextended(key, 0)))
                    )
                stmt = sa.select(sa.func.count()).where(
                    links.c.export_id == export_id, links.c.revoked_at.is_(None)
                )
                live = int(conn.execute(stmt).scalar_one())
                if live >= max_live:
                    raise link_cap_reached(live, max_live)
            conn.execute(
                links.insert().values(
                    id=link.id,
                    export_id=export_id,
                    token_hash=token_hash,
                    created_by=created_by,
                    created_at=now,
                    expires_at=expires_at,
                )
            )
            append_if(conn, audit and naming(audit, link.id))
        return link

    def get_link(self, link_id: str) -> Link | None:
        with self._read() as conn:
            row = conn.execute(sa.select(links).where(links.c.id == link_id)).first()
        return _link(row) if row else None

    def find_link(self, token_hash: str) -> Link | None:
        with self._read() as conn:
            row = conn.execute(sa.select(links).where(links.c.token_hash == token_hash)).first()
        return _link(row) if row else None

    def revoke_link(self, link_id: str, *, now: datetime, audit: AuditEvent | None = None) -> bool:
        live = sa.and_(links.c.id == link_id, links.c.revoked_at.is_(None))
        with self._tx() as conn:
            if conn.execute(links.update().where(live).values(revoked_at=now)).rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    def list_links(self, export_id: str) -> list[Link]:
        stmt = (
            sa.select(links)
            .where(links.c.export_id == export_id, links.c.revoked_at.is_(None))
            .order_by(links.c.created_at, links.c.id)
        )
        with self._read() as conn:
            return [_link(row) for row in conn.execute(stmt)]

    def touch_link(self, link_id: str, *, now: datetime, unless_since: datetime) -> bool:
        stale = sa.or_(links.c.last_used_at.is_(None), links.c.last_used_at < unless_since)
        stmt = links.update().where(links.c.id == link_id, stale).values(last_used_at=now)
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1

    # ------------------------------------------------------------ registered sources

    def add_source(self, source: RegisteredSource, *, audit: AuditEvent | None = None) -> None:
        owner, name = source.key
        try:
            with self._tx() as conn:
                conn.execute(
                    sources.insert().values(
                        workspace_id=owner,
                        name=name,
                        url=source.url,
                        created_at=source.created_at,
                        allow_privileged_role=source.allow_privileged_role,
                    )
                )
                for workspace_id in sorted(source.shared_with):
                    conn.execute(
                        source_shares.insert().values(
                            source_workspace_id=owner, source_name=name, workspace_id=workspace_id
                        )
                    )
                append_if(conn, audit)
        except sa.exc.IntegrityError as exc:
            raise InvalidRequestError(
                f"a source named {name!r} already exists in workspace {owner!r}", field="name"
            ) from exc

    def registered_sources(self) -> list[RegisteredSource]:
        with self._read() as conn:
            shares: dict[tuple[str, str], set[str]] = {}
            for row in conn.execute(sa.select(source_shares)):
                key = (row.source_workspace_id, row.source_name)
                shares.setdefault(key, set()).add(row.workspace_id)
            stmt = sa.select(sources).order_by(sources.c.name, sources.c.workspace_id)
            return [
                RegisteredSource(
                    name=r.name,
                    url=r.url,
                    workspace_id=r.workspace_id or None,
                    shared_with=frozenset(shares.get((r.workspace_id, r.name), ())),
                    allow_privileged_role=bool(r.allow_privileged_role),
                    created_at=r.created_at,
                )
                for r in conn.execute(stmt)
            ]

    def share_source(
        self,
        owner: str | None,
        name: str,
        workspace_id: str,
        *,
        shared: bool,
        audit: AuditEvent | None = None,
    ) -> bool:
        """Let `workspace_id` use the source (or stop it); False when nothing changed."""
        owner = owner or ""
        s, x = sources.c, source_shares.c
        key = sa.and_(
            x.source_workspace_id == owner, x.source_name == name, x.workspace_id == workspace_id
        )
        with self._tx() as conn:
            found = sa.select(s.name).where(s.workspace_id == owner, s.name == name)
            if conn.execute(found).first() is None:
                raise NotFoundError(f"no registered source {name!r} in workspace {owner!r}")
            present = conn.execute(sa.select(source_shares).where(key)).first() is not None
            if present == shared:
                return False
            if shared:
                conn.execute(
                    source_shares.insert().values(
                        source_workspace_id=owner, source_name=name, workspace_id=workspace_id
                    )
                )
            else:
                conn.execute(source_shares.delete().where(key))
            append_if(conn, audit)
            return True
