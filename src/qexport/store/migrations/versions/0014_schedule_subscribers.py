"""Members subscribe their own email address to a schedule: the subscribers, kept apart from
the owner's recipients, and which deliveries are a subscriber's (checked again when sent).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.schedules import UNSENT

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule_subscribers",
        sa.Column("schedule_id", sa.String(36), sa.ForeignKey("schedules.id"), primary_key=True),
        sa.Column("user_id", sa.String(200), sa.ForeignKey("users.id"), primary_key=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_schedule_subscribers_user_id", "schedule_subscribers", ["user_id"])
    # A nullable column is added in place on SQLite too: the table (and its partial index)
    # is not copied.
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(sa.Column("subscriber_id", sa.String(200), nullable=True))


def downgrade() -> None:
    # The older schema cannot tell a subscriber's delivery from another: those not yet sent
    # go (their exports stay), as do the subscriptions.
    op.execute(
        "DELETE FROM deliveries WHERE subscriber_id IS NOT NULL"
        " AND status IN ('waiting', 'sending')"
    )
    # SQLite drops a column by copying the table: its partial index is made again from its
    # declaration rather than trusted to reflection (as in 0010).
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.drop_index("ix_deliveries_unsent", table_name="deliveries")
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("subscriber_id")
    if sqlite:
        op.create_index(
            "ix_deliveries_unsent", "deliveries", ["created_at", "id"], sqlite_where=sa.text(UNSENT)
        )
    op.drop_index("ix_schedule_subscribers_user_id", table_name="schedule_subscribers")
    op.drop_table("schedule_subscribers")
