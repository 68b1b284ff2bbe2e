"""Chat channels: a delivery may go to a Slack or Microsoft Teams incoming webhook.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.schedules import UNSENT

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_BEFORE = "channel IN ('email', 'webhook')"
_AFTER = "channel IN ('email', 'webhook', 'slack', 'teams')"


def _channels(check: str) -> None:
    # SQLite cannot alter a CHECK: batch mode copies the table, and its partial index is
    # made again from its declaration rather than trusted to reflection. PostgreSQL alters
    # the constraint in place.
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.drop_index("ix_deliveries_unsent", table_name="deliveries")
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_constraint(op.f("ck_deliveries_channel"), type_="check")
        batch.create_check_constraint(op.f("ck_deliveries_channel"), check)
    if sqlite:
        op.create_index(
            "ix_deliveries_unsent",
            "deliveries",
            ["created_at", "id"],
            sqlite_where=sa.text(UNSENT),
        )


def upgrade() -> None:
    _channels(_AFTER)


def downgrade() -> None:
    # The older schema cannot hold them: their deliveries go (the exports stay).
    op.execute("DELETE FROM deliveries WHERE channel IN ('slack', 'teams')")
    _channels(_BEFORE)
