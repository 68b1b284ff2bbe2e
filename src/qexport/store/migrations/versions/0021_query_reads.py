"""Saved queries keep the tables (and columns) they read, as their source's planner reported
them when they were saved, so that a workspace's policy can mark tables sensitive rather than
query ids (domain/sensitivity.py).

NULL for the queries saved before: unknown until they are saved again or run, which a
sensitivity rule reads as every table of their source (fails closed).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queries") as batch:
        batch.add_column(sa.Column("reads", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queries") as batch:
        batch.drop_column("reads")
