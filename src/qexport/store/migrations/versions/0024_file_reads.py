"""Each export keeps what its run read: the tables (and columns) its sources' planners
reported just before the run, per source, so that a file is judged by what it was made from
(revoking its links, refusing new ones, withholding its deliveries) rather than by what its
query reads now (domain/sensitivity.py: FileReads).

NULL for the exports made before: not on record, which a sensitivity rule reads as every
table it marks (fails closed), unless the file was made with an admin's approval.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN: SQLite does it in place, so the exports' trigger and partial
    # indexes stay as they are (a batch would copy the table without them).
    op.add_column("exports", sa.Column("reads", sa.JSON(), nullable=True))


def downgrade() -> None:
    # SQLite (3.35 and later) drops an unindexed column in place too.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE exports DROP COLUMN reads")
    else:
        op.drop_column("exports", "reads")
