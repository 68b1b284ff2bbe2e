"""Reports, and each workspace's time zone.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reports",
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
    op.create_index("ix_reports_workspace_id", "reports", ["workspace_id"])
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("timezone", sa.String(64), nullable=False, server_default="UTC"))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("timezone")
    op.drop_index("ix_reports_workspace_id", table_name="reports")
    op.drop_table("reports")
