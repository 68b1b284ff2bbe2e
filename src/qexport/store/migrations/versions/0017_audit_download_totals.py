"""Each workspace's download totals beside the audit trail (for /metrics), filled from the
download events already recorded.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from qexport.store.audit.chain import add_to_download_totals, tally_downloads

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_download_totals",
        sa.Column("workspace_id", sa.String(200), primary_key=True),
        sa.Column("downloads", sa.BigInteger, nullable=False),
        sa.Column("bytes_sent", sa.BigInteger, nullable=False),
        sa.Column("public_link_uses", sa.BigInteger, nullable=False),
    )
    conn = op.get_bind()
    for workspace_id, tally in tally_downloads(conn).items():
        add_to_download_totals(conn, workspace_id, tally)


def downgrade() -> None:
    op.drop_table("audit_download_totals")
