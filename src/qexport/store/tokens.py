"""API tokens and sign-in failures on SQLAlchemy Core."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.accounts import LAST_USED_RESOLUTION, ApiToken, TokenHolder
from qexport.domain.audit import AuditEvent
from qexport.domain.sign_in import FailureCounts, Failures
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.reads import OneRead
from qexport.store.tables.accounts import api_tokens, memberships, sign_in_failures, users
from qexport.store.users import member_of

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


class SqlTokenStore(OnEngine):
    """The TokenStore port."""

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
        return TokenHolder(token, member_of(row))

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
