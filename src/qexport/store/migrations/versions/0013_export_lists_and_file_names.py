"""The exports list's filters find their pages by index; queries and schedules name their
exports' files from a template.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_INDEXES = {
    "ix_exports_workspace_created": ["workspace_id", "created_at", "id"],
    "ix_exports_requester_created": ["workspace_id", "requested_by", "created_at", "id"],
    "ix_exports_subject_created": ["workspace_id", "subject_id", "created_at", "id"],
    "ix_exports_status_created": ["workspace_id", "status", "created_at", "id"],
    "ix_exports_requester_status_created": [
        "workspace_id",
        "requested_by",
        "status",
        "created_at",
        "id",
    ],
}
# ix_exports_requester_created is 0001's ix_exports_requester with `id` added: it serves all
# the old one did, so the old one goes (one index fewer to write on every insert).
_SUPERSEDED = "ix_exports_requester"
_SUPERSEDED_COLUMNS = ["workspace_id", "requested_by", "created_at"]


def upgrade() -> None:
    for table in ("queries", "schedules"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("filename_template", sa.String(200), nullable=True))
    for name, columns in _INDEXES.items():
        op.create_index(name, "exports", columns)
    op.drop_index(_SUPERSEDED, table_name="exports")


def downgrade() -> None:
    op.create_index(_SUPERSEDED, "exports", _SUPERSEDED_COLUMNS)
    for name in _INDEXES:
        op.drop_index(name, table_name="exports")
    for table in ("schedules", "queries"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("filename_template")
