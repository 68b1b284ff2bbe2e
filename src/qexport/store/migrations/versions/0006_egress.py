"""Egress: a workspace's webhook host names, and a delivery's failure code.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("webhook_hosts", sa.JSON))
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(sa.Column("failure_code", sa.String(30)))


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("failure_code")
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("webhook_hosts")
