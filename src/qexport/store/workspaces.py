"""Workspaces on SQLAlchemy Core: their time zone, webhook hosts and policy."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from qexport.domain.audit import AuditEvent
from qexport.domain.policies import WorkspacePolicy
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.reads import OneRead
from qexport.store.tables.accounts import workspaces
from qexport.store.tables.exports import links

# Read by every request of an export (the policy) and by every one that names recipients.
_POLICY = OneRead(
    sa.select(workspaces.c.policy).where(workspaces.c.id == sa.bindparam("workspace_"))
)


_WEBHOOK_HOSTS = OneRead(
    sa.select(workspaces.c.webhook_hosts).where(workspaces.c.id == sa.bindparam("workspace_"))
)


class SqlWorkspaceStore(OnEngine):
    """The WorkspaceStore port."""

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
