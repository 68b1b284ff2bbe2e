"""Schedules, their fired due times, deliveries, and the installation's own secrets.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.schedules import UNSENT

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


# long: a revision's DDL in the order it runs, read top to bottom and never changed
def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("subject_type", sa.String(20), nullable=False),
        sa.Column("subject_id", sa.String(36), nullable=False),
        sa.Column("format", sa.String(20), nullable=False),
        sa.Column("parameters", sa.JSON, nullable=False),
        sa.Column("options", sa.JSON, nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("recipients", sa.JSON, nullable=False),
        sa.Column("missed", sa.String(10), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("next_due_at", UTCDateTime, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("deleted_at", UTCDateTime),
        sa.CheckConstraint("missed IN ('once', 'skip')", name="missed"),
        sa.CheckConstraint("subject_type IN ('query', 'report')", name="subject_type"),
    )
    op.create_index("ix_schedules_workspace_id", "schedules", ["workspace_id"])
    op.create_index("ix_schedules_next_due_at", "schedules", ["next_due_at"])
    op.create_table(
        "schedule_runs",
        sa.Column("schedule_id", sa.String(36), sa.ForeignKey("schedules.id"), primary_key=True),
        sa.Column("due_at", UTCDateTime, primary_key=True),
        sa.Column(
            "export_id", sa.String(36), sa.ForeignKey("exports.id"), nullable=False, unique=True
        ),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id"), nullable=False),
        sa.Column("schedule_id", sa.String(36)),
        sa.Column("channel", sa.String(10), nullable=False),
        sa.Column("target", sa.String(2000), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", UTCDateTime),
        sa.Column("lease_token", sa.String(36)),
        sa.Column("lease_expires_at", UTCDateTime),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("sent_at", UTCDateTime),
        sa.Column("outcome", sa.String(10)),
        sa.Column("last_error", sa.String(500)),
        sa.UniqueConstraint("export_id", "channel", "target"),
        sa.CheckConstraint("channel IN ('email', 'webhook')", name="channel"),
        sa.CheckConstraint("status IN ('waiting', 'sending', 'sent', 'failed')", name="status"),
        sa.CheckConstraint(
            "outcome IS NULL OR outcome IN ('file', 'failure', 'expired')", name="outcome"
        ),
        sa.CheckConstraint(
            "status <> 'sending' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL"
            " AND attempt >= 1)",
            name="sending_leased",
        ),
        sa.CheckConstraint(
            "status <> 'sent' OR (sent_at IS NOT NULL AND outcome IS NOT NULL)",
            name="sent_complete",
        ),
        sa.CheckConstraint("status <> 'failed' OR last_error IS NOT NULL", name="failed_complete"),
    )
    op.create_index(
        "ix_deliveries_unsent",
        "deliveries",
        ["created_at", "id"],
        sqlite_where=sa.text(UNSENT),
        postgresql_where=sa.text(UNSENT),
    )
    op.create_table(
        "instance_secrets",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("value", sa.String(200), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("instance_secrets")
    op.drop_index("ix_deliveries_unsent", table_name="deliveries")
    op.drop_table("deliveries")
    op.drop_table("schedule_runs")
    op.drop_index("ix_schedules_next_due_at", table_name="schedules")
    op.drop_index("ix_schedules_workspace_id", table_name="schedules")
    op.drop_table("schedules")
