"""Saved queries and reports."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

queries = sa.Table(
    "queries",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workspace_id", sa.String(200), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("sql", sa.Text, nullable=False),
    sa.Column("source", sa.String(200), nullable=False),
    sa.Column("parameters", sa.JSON, nullable=False),
    sa.Column("visibility", sa.String(20), nullable=False),
    sa.Column("members", sa.JSON, nullable=False),
    sa.Column("owner", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    # [{"name", "type"}] as the source described the statement when it was saved; NULL for
    # queries saved before 0011 (unknown until saved again).
    sa.Column("columns", sa.JSON),
    # How its exports' files are named ("{name}_{since}_{date}"); NULL: "{name}_{date}".
    sa.Column("filename_template", sa.String(200)),
    # [{"schema", "table", "columns"?}]: the tables it reads as its source's planner reported
    # them when it was saved or last run (domain/sensitivity.py); NULL: unknown (a source that
    # cannot say, or saved before 0021), read by a sensitivity rule as every table.
    sa.Column("reads", sa.JSON),
    sa.CheckConstraint("visibility IN ('workspace', 'members')", name="visibility"),
)
# A name is unique among a workspace's live queries; a deleted name can be reused.
sa.Index(
    "uq_queries_live_name",
    queries.c.workspace_id,
    queries.c.name,
    unique=True,
    sqlite_where=queries.c.deleted_at.is_(None),
    postgresql_where=queries.c.deleted_at.is_(None),
)

reports = sa.Table(
    "reports",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workspace_id", sa.String(200), nullable=False),
    sa.Column("title", sa.String(200), nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("sections", sa.JSON, nullable=False),
    sa.Column("visibility", sa.String(20), nullable=False),
    sa.Column("members", sa.JSON, nullable=False),
    sa.Column("owner", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    sa.CheckConstraint("visibility IN ('workspace', 'members')", name="visibility"),
)
sa.Index("ix_reports_workspace_id", reports.c.workspace_id)
