"""A public link records when it last served its file; a failed delivery may be sent again.

`links.last_used_at`: NULL until the link first serves the file (and for links made before).
`deliveries.attempts_spent`: the attempts made before the delivery was last sent again (0
when it never was), so that sending again gives it a fresh budget while `attempt` keeps
counting every attempt; `resent_at` and `resent_by` say when and by whom.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.schedules import UNSENT

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs: SQLite does them in place, so the partial indexes stay as they are.
    op.add_column("links", sa.Column("last_used_at", UTCDateTime(), nullable=True))
    op.add_column(
        "deliveries",
        sa.Column("attempts_spent", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column("deliveries", sa.Column("resent_at", UTCDateTime(), nullable=True))
    op.add_column("deliveries", sa.Column("resent_by", sa.String(200), nullable=True))


def downgrade() -> None:
    # SQLite drops columns by copying the table: its partial index is made again from its
    # declaration rather than trusted to reflection (as in 0010).
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.drop_index("ix_deliveries_unsent", table_name="deliveries")
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("resent_by")
        batch.drop_column("resent_at")
        batch.drop_column("attempts_spent")
    if sqlite:
        op.create_index(
            "ix_deliveries_unsent", "deliveries", ["created_at", "id"], sqlite_where=sa.text(UNSENT)
        )
    with op.batch_alter_table("links") as batch:
        batch.drop_column("last_used_at")
