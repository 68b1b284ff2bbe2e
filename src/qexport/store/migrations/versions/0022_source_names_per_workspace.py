"""Source names are per workspace: a registered source is known by its workspace and its name
(two workspaces may each have a `warehouse`), and a share names the source by both.

A source registered before sources had owners (workspace NULL) gets the workspace '' (no
owner): a key column cannot be NULL. Its shares are kept. The downgrade refuses while two
workspaces have a source of one name, since the old key could not hold both.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_NO_OWNER = ""


def upgrade() -> None:
    conn = op.get_bind()
    shares = conn.execute(
        sa.text(
            "SELECT s.workspace_id AS owner, x.source_name AS name, x.workspace_id AS shared"
            " FROM source_shares x JOIN sources s ON s.name = x.source_name"
        )
    ).all()
    op.drop_table("source_shares")
    conn.execute(
        sa.text("UPDATE sources SET workspace_id = :none WHERE workspace_id IS NULL"),
        {"none": _NO_OWNER},
    )
    with op.batch_alter_table("sources") as batch:
        batch.alter_column("workspace_id", existing_type=sa.String(200), nullable=False)
        batch.drop_constraint("pk_sources", type_="primary")
        batch.create_primary_key("pk_sources", ["workspace_id", "name"])
    table = op.create_table(
        "source_shares",
        sa.Column("source_workspace_id", sa.String(200), primary_key=True),
        sa.Column("source_name", sa.String(200), primary_key=True),
        sa.Column("workspace_id", sa.String(200), primary_key=True),
        sa.ForeignKeyConstraint(
            ["source_workspace_id", "source_name"],
            ["sources.workspace_id", "sources.name"],
            ondelete="CASCADE",
        ),
    )
    if shares:
        op.bulk_insert(
            table,
            [
                {
                    "source_workspace_id": row.owner or _NO_OWNER,
                    "source_name": row.name,
                    "workspace_id": row.shared,
                }
                for row in shares
            ],
        )


def downgrade() -> None:
    conn = op.get_bind()
    taken = conn.execute(
        sa.text("SELECT name FROM sources GROUP BY name HAVING count(*) > 1 ORDER BY name")
    ).all()
    if taken:
        names = ", ".join(row.name for row in taken)
        raise RuntimeError(
            f"cannot downgrade: several workspaces have a source named {names}; before 0022 a"
            " name was unique across the installation"
        )
    shares = conn.execute(
        sa.text("SELECT source_name AS name, workspace_id AS shared FROM source_shares")
    ).all()
    op.drop_table("source_shares")
    with op.batch_alter_table("sources") as batch:
        batch.drop_constraint("pk_sources", type_="primary")
        batch.create_primary_key("pk_sources", ["name"])
        batch.alter_column("workspace_id", existing_type=sa.String(200), nullable=True)
    conn.execute(
        sa.text("UPDATE sources SET workspace_id = NULL WHERE workspace_id = :none"),
        {"none": _NO_OWNER},
    )
    table = op.create_table(
        "source_shares",
        sa.Column(
            "source_name",
            sa.String(200),
            sa.ForeignKey("sources.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("workspace_id", sa.String(200), primary_key=True),
    )
    if shares:
        op.bulk_insert(table, [{"source_name": r.name, "workspace_id": r.shared} for r in shares])
