"""The audit trail: append-only events in one hash chain per workspace, the chains' anchors
after pruning, and the flag through which only `qexport audit prune` may delete events.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.audit import AUDIT_APPEND_ONLY_POSTGRESQL, AUDIT_APPEND_ONLY_SQLITE
from qexport.store.tables.base import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("workspace_id", sa.String(200), nullable=False),
        sa.Column("actor_kind", sa.String(20), nullable=False),
        sa.Column("actor_id", sa.String(200)),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("target_kind", sa.String(40)),
        sa.Column("target_id", sa.String(200)),
        sa.Column("outcome", sa.String(10), nullable=False),
        sa.Column("client_address", sa.String(64)),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.CheckConstraint(
            "actor_kind IN ('user', 'token', 'public_link', 'scheduler', 'operator', 'anonymous')",
            name="actor_kind",
        ),
        sa.CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="outcome"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_audit_events_workspace_id", "audit_events", ["workspace_id", "id"])
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_table(
        "audit_anchors",
        sa.Column("workspace_id", sa.String(200), primary_key=True),
        sa.Column("anchor_hash", sa.String(64), nullable=False),
        sa.Column("pruned_before", UTCDateTime, nullable=False),
    )
    flag = op.create_table(
        "audit_prune_flag",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.CheckConstraint("id = 1", name="one_row"),
    )
    op.bulk_insert(flag, [{"id": 1, "active": False}])
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in AUDIT_APPEND_ONLY_POSTGRESQL if postgresql else AUDIT_APPEND_ONLY_SQLITE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_events_append_only ON audit_events")
        op.execute("DROP FUNCTION audit_events_append_only()")
    op.drop_table("audit_prune_flag")
    op.drop_table("audit_anchors")
    op.drop_index("ix_audit_events_at", table_name="audit_events")
    op.drop_index("ix_audit_events_workspace_id", table_name="audit_events")
    op.drop_table("audit_events")
