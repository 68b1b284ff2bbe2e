"""Saved queries keep the columns their source described when they were saved.

NULL for the queries saved before: they still run and export; their columns are unknown
until they are saved again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queries") as batch:
        batch.add_column(sa.Column("columns", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queries") as batch:
        batch.drop_column("columns")
