"""Registered sources and their shares on SQLAlchemy Core."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.domain.audit import AuditEvent
from qexport.domain.failures import InvalidRequestError, NotFoundError
from qexport.domain.sources import RegisteredSource
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.tables.sources import source_shares, sources


class SqlSourceRecordStore(OnEngine):
    """The SourceRecordStore port."""

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
