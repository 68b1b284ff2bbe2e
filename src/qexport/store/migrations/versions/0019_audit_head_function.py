"""PostgreSQL: qexport_audit_head(workspace), a workspace's audit chain lock and its last hash
in one round trip (store/audit.py says why it must be a function).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# The lock's first key is the audit chains' own space, 0x41554454 ("AUDT"), as
# store/audit.py's _LOCK_SPACE. VOLATILE: the query after the lock takes a snapshot of its
# own, so it sees the event of whoever held the lock before.
_CREATE = """
CREATE OR REPLACE FUNCTION qexport_audit_head(workspace text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1096107092, hashtext(workspace));
    RETURN coalesce(
        (SELECT hash FROM audit_events WHERE workspace_id = workspace ORDER BY id DESC LIMIT 1),
        (SELECT anchor_hash FROM audit_anchors WHERE workspace_id = workspace)
    );
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS qexport_audit_head(text)")
