"""Accounts (workspaces, users, memberships, API tokens), public links, registered sources
and the append-only export events.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.base import UTCDateTime
from qexport.store.tables.exports import EVENTS_APPEND_ONLY_POSTGRESQL, EVENTS_APPEND_ONLY_SQLITE

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


# long: a revision's DDL in the order it runs, read top to bottom and never changed
def upgrade() -> None:
    op.create_table(
        "workspaces",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("email", sa.String(255), nullable=False, unique=True),
        sa.Column("password_hash", sa.String(200)),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "memberships",
        sa.Column("workspace_id", sa.String(200), sa.ForeignKey("workspaces.id"), primary_key=True),
        sa.Column("user_id", sa.String(200), sa.ForeignKey("users.id"), primary_key=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.CheckConstraint("role IN ('viewer', 'editor', 'admin')", name="role"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(200), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("workspace_id", sa.String(200), sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("last_used_at", UTCDateTime),
        sa.Column("revoked_at", UTCDateTime),
    )
    op.create_table(
        "links",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id"), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("revoked_at", UTCDateTime),
    )
    op.create_table(
        "sources",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "export_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("export_id", sa.String(36), nullable=False),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("worker_id", sa.String(200)),
        sa.Column("code", sa.String(40)),
        sa.Column("detail", sa.String(500)),
    )
    op.create_index("ix_export_events_export_id", "export_events", ["export_id", "id"])
    append_only = (
        EVENTS_APPEND_ONLY_POSTGRESQL
        if op.get_bind().dialect.name == "postgresql"
        else EVENTS_APPEND_ONLY_SQLITE
    )
    for statement in append_only:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER export_events_append_only ON export_events")
        op.execute("DROP FUNCTION export_events_append_only()")
    for table in ("export_events", "sources", "links", "api_tokens", "memberships"):
        op.drop_table(table)
    op.drop_table("users")
    op.drop_table("workspaces")
