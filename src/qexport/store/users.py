"""Users, their sessions and their roles in workspaces, on SQLAlchemy Core."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.accounts import Member, Membership, Role, User
from qexport.domain.audit import AuditEvent
from qexport.domain.failures import ConflictError, InvalidRequestError
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.reads import OneRead
from qexport.store.tables.accounts import memberships, users, workspaces


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


_MEMBER = OneRead(_USER_AND_ROLE.where(users.c.id == sa.bindparam("user_")))


def member_of(row: Any) -> Member:  # a Row of _USER_AND_ROLE or store.tokens._TOKEN_HOLDER
    return Member(_user(row), Role(row.member_role) if row.member_role else None)


class SqlUserStore(OnEngine):
    """The UserStore port."""

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
        return member_of(row) if row else None

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
