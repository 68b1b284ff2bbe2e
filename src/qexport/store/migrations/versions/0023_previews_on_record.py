"""Previews on the record: each workspace's preview totals beside the audit trail (for
/metrics), kept by triggers on audit_events; and the rate limits' admissions (a member's
previews per minute).

No preview event was recorded before this revision, so the totals start empty.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.audit import PREVIEW_TOTALS_POSTGRESQL, PREVIEW_TOTALS_SQLITE
from qexport.store.tables.base import UTCDateTime

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_preview_totals",
        sa.Column("workspace_id", sa.String(200), primary_key=True),
        sa.Column("previews", sa.BigInteger, nullable=False),
        sa.Column("rows_shown", sa.BigInteger, nullable=False),
    )
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in PREVIEW_TOTALS_POSTGRESQL if postgresql else PREVIEW_TOTALS_SQLITE:
        op.execute(statement)
    op.create_table(
        "rate_admissions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_rate_admissions_key", "rate_admissions", ["key", "at"])


def downgrade() -> None:
    op.drop_index("ix_rate_admissions_key", table_name="rate_admissions")
    op.drop_table("rate_admissions")
    postgresql = op.get_bind().dialect.name == "postgresql"
    for trigger in ("audit_preview_totals_remove", "audit_preview_totals_add"):
        op.execute(
            f"DROP TRIGGER {trigger} ON audit_events" if postgresql else f"DROP TRIGGER {trigger}"
        )
    if postgresql:
        op.execute("DROP FUNCTION audit_preview_totals_kept()")
    op.drop_table("audit_preview_totals")
