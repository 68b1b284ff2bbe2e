"""Exports (also the queue) and saved queries.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.exports import SETTLED_IMMUTABLE_POSTGRESQL, SETTLED_IMMUTABLE_SQLITE

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


# long: a revision's DDL in the order it runs, read top to bottom and never changed
def upgrade() -> None:
    op.create_table(
        "queries",
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
        sa.CheckConstraint("visibility IN ('workspace', 'members')", name="visibility"),
    )
    op.create_index(
        "uq_queries_live_name",
        "queries",
        ["workspace_id", "name"],
        unique=True,
        sqlite_where=sa.text("deleted_at IS NULL"),
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    op.create_table(
        "exports",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("requested_by", sa.String(200), nullable=False),
        sa.Column("subject_type", sa.String(20), nullable=False),
        sa.Column("subject_id", sa.String(36), nullable=False),
        sa.Column("subject_name", sa.String(200), nullable=False),
        sa.Column("format", sa.String(20), nullable=False),
        sa.Column("parameters", sa.JSON, nullable=False),
        sa.Column("options", sa.JSON, nullable=False),
        sa.Column("filename", sa.String(200), nullable=False),
        sa.Column("storage_key", sa.String(600), nullable=False, unique=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("lease_token", sa.String(36)),
        sa.Column("lease_expires_at", UTCDateTime),
        sa.Column("worker_id", sa.String(200)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("started_at", UTCDateTime),
        sa.Column("completed_at", UTCDateTime),
        sa.Column("expires_at", UTCDateTime),
        sa.Column("size_bytes", sa.BigInteger),
        sa.Column("row_count", sa.BigInteger),
        sa.Column("sha256", sa.String(64)),
        sa.Column("progress_rows", sa.BigInteger, nullable=False),
        sa.Column("failure_code", sa.String(40)),
        sa.Column("failure_detail", sa.String(500)),
        sa.Column("last_error_code", sa.String(40)),
        sa.Column("last_error_detail", sa.String(500)),
        sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed')", name="status"),
        sa.CheckConstraint(
            "status <> 'succeeded' OR (size_bytes IS NOT NULL AND row_count IS NOT NULL"
            " AND sha256 IS NOT NULL AND completed_at IS NOT NULL AND expires_at IS NOT NULL"
            " AND failure_code IS NULL)",
            name="succeeded_complete",
        ),
        sa.CheckConstraint(
            "status <> 'failed' OR (failure_code IS NOT NULL AND failure_detail IS NOT NULL"
            " AND completed_at IS NOT NULL AND size_bytes IS NULL AND sha256 IS NULL)",
            name="failed_complete",
        ),
        sa.CheckConstraint(
            "status <> 'running' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL"
            " AND started_at IS NOT NULL AND attempt >= 1)",
            name="running_leased",
        ),
        sa.CheckConstraint(
            "status <> 'queued' OR (attempt = 0 AND lease_token IS NULL)", name="queued_fresh"
        ),
        sa.CheckConstraint("attempt >= 0 AND progress_rows >= 0", name="counters"),
    )
    op.create_index("ix_exports_claim", "exports", ["status", "created_at"])
    op.create_index(
        "ix_exports_requester", "exports", ["workspace_id", "requested_by", "created_at"]
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in SETTLED_IMMUTABLE_POSTGRESQL:
            op.execute(statement)
    else:
        op.execute(SETTLED_IMMUTABLE_SQLITE)


def downgrade() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS exports_settled_immutable"
        + (" ON exports" if op.get_bind().dialect.name == "postgresql" else "")
    )
    op.drop_table("exports")
    op.drop_index("uq_queries_live_name", table_name="queries")
    op.drop_table("queries")
