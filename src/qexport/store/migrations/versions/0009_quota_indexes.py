"""Indexes for fair claiming and the quotas: a requester's unsettled exports in queue order,
when their exports last started,
live links per export, stored bytes per workspace.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.exports import SUCCEEDED, UNSETTLED

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_exports_requester_unsettled",
        "exports",
        ["workspace_id", "requested_by", "created_at", "id"],
        sqlite_where=sa.text(UNSETTLED),
        postgresql_where=sa.text(UNSETTLED),
    )
    op.create_index(
        "ix_exports_requester_started", "exports", ["workspace_id", "requested_by", "started_at"]
    )
    op.create_index("ix_links_export_id", "links", ["export_id"])
    op.create_index(
        "ix_exports_stored",
        "exports",
        ["workspace_id", "expires_at"],
        sqlite_where=sa.text(SUCCEEDED),
        postgresql_where=sa.text(SUCCEEDED),
    )


def downgrade() -> None:
    op.drop_index("ix_exports_stored", table_name="exports")
    op.drop_index("ix_links_export_id", table_name="links")
    op.drop_index("ix_exports_requester_started", table_name="exports")
    op.drop_index("ix_exports_requester_unsettled", table_name="exports")
