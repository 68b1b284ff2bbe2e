"""Registered sources belong to a workspace, may be shared with others by the operator, and
may be allowed a privileged PostgreSQL role; a source registered before has no owner (no
workspace may use it until the operator shares it).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("workspace_id", sa.String(200)))
        batch.add_column(
            sa.Column(
                "allow_privileged_role", sa.Boolean, nullable=False, server_default=sa.false()
            )
        )
    op.create_table(
        "source_shares",
        sa.Column(
            "source_name",
            sa.String(200),
            sa.ForeignKey("sources.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("workspace_id", sa.String(200), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("source_shares")
    with op.batch_alter_table("sources") as batch:
        batch.drop_column("allow_privileged_role")
        batch.drop_column("workspace_id")
