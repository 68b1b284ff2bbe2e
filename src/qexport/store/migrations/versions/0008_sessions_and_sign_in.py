"""Revocable sessions, disabled users, and the recent sign-in failures that throttle guessing.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("session_epoch", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("disabled_at", UTCDateTime))
    op.create_table(
        "sign_in_failures",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("email", sa.String(320)),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_sign_in_failures_email", "sign_in_failures", ["email", "at"])
    op.create_index("ix_sign_in_failures_address", "sign_in_failures", ["address", "at"])
    op.create_index("ix_sign_in_failures_at", "sign_in_failures", ["at"])


def downgrade() -> None:
    op.drop_table("sign_in_failures")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled_at")
        batch.drop_column("session_epoch")
