"""The export queue's reads: one export (with its query), its events, the lists (keyset
pages, a statement prebuilt per combination of filters), and whether any export is unsettled."""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.exports import EventKind, ExportEvent, ExportFilter, ExportRecord, Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.domain.reports import SUBJECT_REPORT
from qexport.store.catalog import to_query
from qexport.store.engine import read_transaction
from qexport.store.exports.records import QUERY_PREFIX, query_columns, to_record
from qexport.store.reads import OneRead
from qexport.store.tables.catalog import queries
from qexport.store.tables.exports import export_events, exports

# The first characters of an export id (a UUID) before its first hyphen: a range over them
# lets the primary key find an id prefix on both databases, whatever the collation.
_HEX_HEAD = 8
_HEX_RUN = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class _NarrowShape:
    """Which parts of an ExportFilter are given (the WHERE clauses `_narrowed` builds)."""

    format: bool
    subject: bool
    since: bool
    until: bool
    search: bool
    prefix: bool
    failure_code: bool
    id_range: bool  # the prefix starts with hex digits: a range over the primary key too


@dataclass(frozen=True)
class _ListShape:
    """Which of list_exports's filters are given: one prebuilt statement per combination."""

    by: bool
    status: bool
    before: bool
    after: bool
    expired: bool | None  # only expired exports, only unexpired ones, or (None) either
    narrow: _NarrowShape | None


def _narrow_params(narrow: ExportFilter, params: dict[str, Any]) -> _NarrowShape:
    """Put the filter's values into `params`; the shape of its WHERE clauses (what
    `_narrowed` builds for them)."""
    params["format_"] = narrow.format
    params["subject_"] = narrow.subject_id
    params["since_"] = narrow.since
    params["until_"] = narrow.until
    params["failure_code_"] = narrow.failure_code and narrow.failure_code.value
    if narrow.search:
        params["search_"] = "%" + re.sub(r"([\\%_])", r"\\\1", narrow.search.lower()) + "%"
    head = None
    if narrow.id_prefix:
        prefix = narrow.id_prefix
        params["prefix_"], params["prefix_len_"] = prefix, len(prefix)
        run = _HEX_RUN.match(prefix[:_HEX_HEAD])  # "abcd" of "abcd-12": the id's own range
        if run:
            head = run.group()
            last = head[-1]
            params["head_"] = head
            params["upper_"] = head[:-1] + ("a" if last == "9" else chr(ord(last) + 1))
    return _NarrowShape(
        format=narrow.format is not None,
        subject=narrow.subject_id is not None,
        since=narrow.since is not None,
        until=narrow.until is not None,
        search=bool(narrow.search),
        prefix=bool(narrow.id_prefix),
        failure_code=narrow.failure_code is not None,
        id_range=head is not None,
    )


def _narrowed(shape: _NarrowShape) -> list[sa.ColumnElement[bool]]:
    """The filter as WHERE clauses over _narrow_params's values (ExportFilter.matches says
    the same of one record)."""
    c, p = exports.c, sa.bindparam
    clauses: list[sa.ColumnElement[bool]] = []
    if shape.format:
        clauses.append(c.format == p("format_"))
    if shape.subject:
        clauses.append(c.subject_id == p("subject_"))
    if shape.since:
        clauses.append(c.created_at >= p("since_", type_=c.created_at.type))
    if shape.until:
        clauses.append(c.created_at < p("until_", type_=c.created_at.type))
    if shape.search:
        clauses.append(sa.func.lower(c.subject_name).like(p("search_"), escape="\\"))
    if shape.failure_code:
        clauses.append(c.failure_code == p("failure_code_"))
    if shape.id_range:
        clauses.extend([c.id >= p("head_"), c.id < p("upper_")])
    if shape.prefix:
        clauses.append(sa.func.substr(c.id, 1, p("prefix_len_", type_=sa.Integer)) == p("prefix_"))
    return clauses


@functools.cache
def _list_statement(shape: _ListShape) -> OneRead:
    """list_exports's statement for one combination of filters, built once: built per call
    it took more CPU than running it (GET /exports?limit=1 on PostgreSQL)."""
    c, p = exports.c, sa.bindparam
    stmt = sa.select(exports).where(c.workspace_id == p("workspace_"))
    if shape.by:
        stmt = stmt.where(c.requested_by == p("requested_by_"))
    if shape.status:
        stmt = stmt.where(c.status == p("status_"))
    key = sa.tuple_(c.created_at, c.id)
    if shape.before:
        stmt = stmt.where(key < _key_value("before"))
    if shape.after:
        stmt = stmt.where(key > _key_value("after"))
    if shape.expired is not None:
        past = sa.and_(
            c.expires_at.is_not(None), c.expires_at <= p("now_", type_=c.expires_at.type)
        )
        stmt = stmt.where(past if shape.expired else sa.not_(past))
    if shape.narrow is not None:
        stmt = stmt.where(*_narrowed(shape.narrow))
    if shape.after:  # the page just newer than `after`: read upwards
        return OneRead(stmt.order_by(c.created_at, c.id).limit(p("limit_", type_=sa.Integer)))
    newest_first = stmt.order_by(c.created_at.desc(), c.id.desc())
    return OneRead(newest_first.limit(p("limit_", type_=sa.Integer)))


def _key_value(side: str) -> sa.Tuple:
    """(created_at, id) of a keyset cursor as a row value: both databases seek an index to a
    row value, while the OR form made SQLite read every newer export first (a page 180k
    exports deep: 81 ms, 0.5 ms as a row value)."""
    return sa.tuple_(
        sa.bindparam(f"{side}_at_", type_=exports.c.created_at.type),
        sa.bindparam(f"{side}_id_", type_=exports.c.id.type),
    )


# The hottest read (every GET of an export, every download), prebuilt like the transitions.
_GET_EXPORT = OneRead(sa.select(exports).where(exports.c.id == sa.bindparam("id_")))
# A download's read: the export with its query (a report's export: none), one round trip
# instead of two. On PostgreSQL one client's 64 KiB ranges took 2.25-2.41 ms instead of
# 2.54-2.79 ms (the server's CPU: 2.04-2.11 ms instead of 2.19-2.33).
_GET_EXPORT_WITH_QUERY = OneRead(
    sa.select(exports, *query_columns())
    .select_from(
        exports.outerjoin(
            queries,
            sa.and_(queries.c.id == exports.c.subject_id, exports.c.subject_type != SUBJECT_REPORT),
        )
    )
    .where(exports.c.id == sa.bindparam("id_"))
)
_EVENTS = OneRead(
    sa.select(export_events)
    .where(export_events.c.export_id == sa.bindparam("id_"))
    .order_by(export_events.c.id)
)


class SqlExportReads:
    """The ExportQueue's reads over any SQLAlchemy engine; SqlExportQueue adds the writes."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def _read(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return read_transaction(self._engine)

    def get_export(self, export_id: str) -> ExportRecord | None:
        row = _GET_EXPORT.first(self._engine, {"id_": export_id})
        return to_record(row) if row else None

    def get_export_with_query(self, export_id: str) -> tuple[ExportRecord, Query | None] | None:
        row = _GET_EXPORT_WITH_QUERY.first(self._engine, {"id_": export_id})
        if row is None:
            return None
        query = to_query(row, QUERY_PREFIX) if row.query_id is not None else None
        return to_record(row), query

    def list_exports(
        self,
        *,
        workspace_id: str,
        requested_by: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
        expired_at: tuple[bool, datetime] | None = None,
        after: tuple[datetime, str] | None = None,
        narrow: ExportFilter | None = None,
    ) -> list[ExportRecord]:
        params: dict[str, Any] = {
            "workspace_": workspace_id,
            "limit_": limit,
            "requested_by_": requested_by,
            "status_": status.value if status is not None else None,
            "now_": expired_at[1] if expired_at else None,
        }
        if before is not None:
            params["before_at_"], params["before_id_"] = before
        if after is not None:
            params["after_at_"], params["after_id_"] = after
        shape = _ListShape(
            by=requested_by is not None,
            status=status is not None,
            before=before is not None,
            after=after is not None,
            expired=expired_at[0] if expired_at else None,
            narrow=_narrow_params(narrow, params) if narrow is not None else None,
        )
        found = [to_record(r) for r in _list_statement(shape).all(self._engine, params)]
        return found[::-1] if after is not None else found  # read upwards, shown newest first

    def has_unsettled(self) -> bool:
        stmt = sa.select(sa.literal(1)).where(
            exports.c.status.in_([Status.QUEUED.value, Status.RUNNING.value])
        )
        with self._read() as conn:
            return conn.execute(stmt.limit(1)).first() is not None

    def list_events(self, export_id: str) -> list[ExportEvent]:
        return [
            ExportEvent(
                export_id=r.export_id,
                at=r.at,
                kind=EventKind(r.kind),
                status=Status(r.status),
                attempt=r.attempt,
                worker_id=r.worker_id,
                code=FailureCode(r.code) if r.code else None,
                detail=r.detail,
            )
            for r in _EVENTS.all(self._engine, {"id_": export_id})
        ]
