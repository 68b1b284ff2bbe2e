"""Public links to exports' files on SQLAlchemy Core."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.accounts import Link, link_cap_reached
from qexport.domain.audit import AuditEvent, naming
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.tables.exports import links


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


class SqlLinkStore(OnEngine):
    """The LinkStore port."""

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

    def links_starting(self, prefix: str) -> list[Link]:
        # The caller checks `prefix` (hex and dashes, 4 or more): 1 link in 65,536 or fewer,
        # across workspaces, so no workspace's are crowded out by a limit here.
        stmt = (
            sa.select(links)
            .where(links.c.id.startswith(prefix, autoescape=True), links.c.revoked_at.is_(None))
            .order_by(links.c.id)
        )
        with self._read() as conn:
            return [_link(row) for row in conn.execute(stmt)]

    def touch_link(self, link_id: str, *, now: datetime, unless_since: datetime) -> bool:
        stale = sa.or_(links.c.last_used_at.is_(None), links.c.last_used_at < unless_since)
        stmt = links.update().where(links.c.id == link_id, stale).values(last_used_at=now)
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1
