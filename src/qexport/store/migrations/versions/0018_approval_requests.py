"""Approval requests: exports of sensitive queries that wait for a workspace admin.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approval_requests",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("requested_by", sa.String(200), nullable=False),
        sa.Column("subject_type", sa.String(20), nullable=False),
        sa.Column("subject_id", sa.String(36), nullable=False),
        sa.Column("subject_name", sa.String(200), nullable=False),
        sa.Column("format", sa.String(20), nullable=False),
        sa.Column("parameters", sa.JSON, nullable=False),
        sa.Column("options", sa.JSON, nullable=False),
        sa.Column("notify", sa.JSON, nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("decided_by", sa.String(200)),
        sa.Column("decided_at", UTCDateTime),
        sa.Column("reason", sa.String(500)),
        sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id")),
        sa.CheckConstraint("status IN ('pending', 'approved', 'denied')", name="status"),
        sa.CheckConstraint(
            "(status = 'approved') = (export_id IS NOT NULL)", name="approved_has_export"
        ),
        sa.CheckConstraint(
            "(status = 'pending') = (decided_by IS NULL AND decided_at IS NULL)",
            name="decided_has_decider",
        ),
    )
    op.create_index(
        "ix_approval_requests_workspace",
        "approval_requests",
        ["workspace_id", "created_at", "id"],
    )
    op.create_index("ix_approval_requests_status", "approval_requests", ["status", "expires_at"])


def downgrade() -> None:
    op.drop_index("ix_approval_requests_status", "approval_requests")
    op.drop_index("ix_approval_requests_workspace", "approval_requests")
    op.drop_table("approval_requests")
