"""An index of unsettled exports in queue order, for the claim.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.exports import UNSETTLED

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_exports_unsettled",
        "exports",
        ["created_at", "id"],
        sqlite_where=sa.text(UNSETTLED),
        postgresql_where=sa.text(UNSETTLED),
    )


def downgrade() -> None:
    op.drop_index("ix_exports_unsettled", table_name="exports")
