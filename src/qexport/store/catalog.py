"""The catalog on SQLAlchemy Core: saved queries and reports of every workspace.

A name is unique among a workspace's live queries; a deleted query or report stays readable
by id, marked deleted, so that exports and schedules of it can still say what it was.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from qexport.domain.audit import AuditEvent
from qexport.domain.failures import (
    InvalidRequestError,
)
from qexport.domain.queries import Parameter, Query, ResultColumn, Visibility
from qexport.domain.reports import Report, Section
from qexport.domain.sensitivity import Relation, reads_from_json, reads_to_json
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.reads import OneRead
from qexport.store.tables.catalog import queries, reports

# Read on every download and every request of an export: prebuilt, as the export queue's are.
_GET_QUERY = OneRead(sa.select(queries).where(queries.c.id == sa.bindparam("id_")))
_LIVE_IN_WORKSPACE = sa.and_(
    queries.c.workspace_id == sa.bindparam("workspace_"), queries.c.deleted_at.is_(None)
)
_FIND_QUERY = OneRead(
    sa.select(queries).where(_LIVE_IN_WORKSPACE, queries.c.name == sa.bindparam("name_"))
)
_LIST_QUERIES = OneRead(sa.select(queries).where(_LIVE_IN_WORKSPACE).order_by(queries.c.name))

QUERY_KEYS = (
    "id",
    "workspace_id",
    "name",
    "sql",
    "source",
    "parameters",
    "visibility",
    "members",
    "owner",
    "deleted_at",
    "columns",
    "filename_template",
    "reads",
)


def to_query(row: Any, prefix: str = "") -> Query:
    """The query in `row` (a Row, or an OneRead's), whose keys may carry a prefix."""
    mapping = row._mapping
    m = {key: mapping[prefix + key] for key in QUERY_KEYS}
    return Query(
        id=m["id"],
        workspace_id=m["workspace_id"],
        name=m["name"],
        sql=m["sql"],
        source=m["source"],
        parameters=tuple(Parameter.from_json(p) for p in m["parameters"]),
        visibility=Visibility(m["visibility"]),
        members=frozenset(m["members"]),
        owner=m["owner"],
        deleted=m["deleted_at"] is not None,
        columns=None
        if m["columns"] is None
        else tuple(ResultColumn.from_json(c) for c in m["columns"]),
        filename_template=m["filename_template"],
        reads=reads_from_json(m["reads"]),
    )


def to_report(row: sa.Row[Any]) -> Report:
    return Report(
        id=row.id,
        workspace_id=row.workspace_id,
        title=row.title,
        description=row.description,
        sections=tuple(Section.from_json(s) for s in row.sections),
        visibility=Visibility(row.visibility),
        members=frozenset(row.members),
        owner=row.owner,
        deleted=row.deleted_at is not None,
    )


def _report_values(report: Report) -> dict[str, Any]:
    return {
        "title": report.title,
        "description": report.description,
        "sections": [s.to_json() for s in report.sections],
        "visibility": report.visibility.value,
        "members": sorted(report.members),
        "owner": report.owner,
    }


def _stored_reads(reads: frozenset[Relation] | None) -> Any:
    # SQL NULL, not JSON null, for unknown: `IS NULL` finds them either way.
    stored = reads_to_json(reads)
    return sa.null() if stored is None else stored


class SqlCatalog(OnEngine):
    """Catalog over any SQLAlchemy engine (SQLite by default, PostgreSQL to scale)."""

    # ------------------------------------------------------------ saved queries

    def add_query(self, query: Query, *, audit: AuditEvent | None = None) -> Query:
        try:
            with self._tx() as conn:
                conn.execute(queries.insert().values(**self._query_values(query)))
                append_if(conn, audit)
        except sa.exc.IntegrityError as exc:
            raise InvalidRequestError(
                f"a query named {query.name!r} already exists", field="name"
            ) from exc
        return query

    def _query_values(self, query: Query) -> dict[str, Any]:
        return {
            "id": query.id,
            "workspace_id": query.workspace_id,
            "name": query.name,
            "sql": query.sql,
            "source": query.source,
            "parameters": [p.to_json() for p in query.parameters],
            "visibility": query.visibility.value,
            "members": sorted(query.members),
            "owner": query.owner,
            "columns": None if query.columns is None else [c.to_json() for c in query.columns],
            "filename_template": query.filename_template,
            "reads": _stored_reads(query.reads),
            "created_at": sa.func.current_timestamp(),
        }

    def get_query(self, query_id: str) -> Query | None:
        row = _GET_QUERY.first(self._engine, {"id_": query_id})
        return to_query(row) if row else None

    def find_query(self, workspace_id: str, name: str) -> Query | None:
        row = _FIND_QUERY.first(self._engine, {"workspace_": workspace_id, "name_": name})
        return to_query(row) if row else None

    def list_queries(self, workspace_id: str) -> list[Query]:
        return [to_query(r) for r in _LIST_QUERIES.all(self._engine, {"workspace_": workspace_id})]

    def update_query(self, query: Query, *, audit: AuditEvent | None = None) -> bool:
        values = self._query_values(query)
        for fixed in ("id", "workspace_id", "created_at"):
            values.pop(fixed)
        guard = sa.and_(queries.c.id == query.id, queries.c.deleted_at.is_(None))
        try:
            with self._tx() as conn:
                if conn.execute(queries.update().where(guard).values(**values)).rowcount != 1:
                    return False
                append_if(conn, audit)
                return True
        except sa.exc.IntegrityError as exc:
            raise InvalidRequestError(
                f"a query named {query.name!r} already exists", field="name"
            ) from exc

    def record_reads(
        self, query_id: str, *, sql: str, source: str, reads: frozenset[Relation] | None
    ) -> bool:
        guard = sa.and_(
            queries.c.id == query_id,
            queries.c.deleted_at.is_(None),
            queries.c.sql == sql,
            queries.c.source == source,
        )
        with self._tx() as conn:
            stmt = queries.update().where(guard).values(reads=_stored_reads(reads))
            return bool(conn.execute(stmt).rowcount == 1)

    def delete_query(self, query_id: str, *, audit: AuditEvent | None = None) -> bool:
        guard = sa.and_(queries.c.id == query_id, queries.c.deleted_at.is_(None))
        with self._tx() as conn:
            result = conn.execute(
                queries.update().where(guard).values(deleted_at=sa.func.current_timestamp())
            )
            if result.rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    # ------------------------------------------------------------ reports

    def add_report(self, report: Report, *, audit: AuditEvent | None = None) -> Report:
        values = {
            "id": report.id,
            "workspace_id": report.workspace_id,
            "created_at": sa.func.current_timestamp(),
            **_report_values(report),
        }
        with self._tx() as conn:
            conn.execute(reports.insert().values(**values))
            append_if(conn, audit)
        return report

    def get_report(self, report_id: str) -> Report | None:
        with self._read() as conn:
            row = conn.execute(sa.select(reports).where(reports.c.id == report_id)).first()
        return to_report(row) if row else None

    def list_reports(self, workspace_id: str) -> list[Report]:
        stmt = (
            sa.select(reports)
            .where(reports.c.workspace_id == workspace_id, reports.c.deleted_at.is_(None))
            .order_by(reports.c.title, reports.c.id)
        )
        with self._read() as conn:
            return [to_report(r) for r in conn.execute(stmt)]

    def update_report(self, report: Report, *, audit: AuditEvent | None = None) -> bool:
        guard = sa.and_(reports.c.id == report.id, reports.c.deleted_at.is_(None))
        with self._tx() as conn:
            result = conn.execute(reports.update().where(guard).values(**_report_values(report)))
            if result.rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    def delete_report(self, report_id: str, *, audit: AuditEvent | None = None) -> bool:
        guard = sa.and_(reports.c.id == report_id, reports.c.deleted_at.is_(None))
        with self._tx() as conn:
            result = conn.execute(
                reports.update().where(guard).values(deleted_at=sa.func.current_timestamp())
            )
            if result.rowcount != 1:
                return False
            append_if(conn, audit)
            return True
