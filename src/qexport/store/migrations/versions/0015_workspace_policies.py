"""Workspace export policies: the rules a workspace's admins set (a JSON object of the rules
that are set), and a public link's own expiry (a policy may give links a shorter life than
their file's).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable columns are added in place on SQLite too: no table is copied.
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("policy", sa.JSON, nullable=True))
    with op.batch_alter_table("links") as batch:
        batch.add_column(sa.Column("expires_at", UTCDateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("links") as batch:
        batch.drop_column("expires_at")
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("policy")
