"""PostgreSQL: qexport_audit_append, which chains events onto a workspace's audit trail under
its lock in one statement (store/audit/chain.py says why).

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

# p_events: a JSON array of the events' columns but for prev_hash and hash, each with the
# text of its canonical form before and after its prev_hash (domain/audit.around_prev), so
# that the hash is SHA-256(before || prev || after) whatever prev turns out to be. The lock's
# first key is the audit chains' own space, 0x41554454 ("AUDT"), as store/audit/chain.py's
# _LOCK_SPACE. VOLATILE: each query after the lock takes a snapshot of its own, so the head
# read is that of whoever held the lock before. The download totals change with the events.
_CREATE = """
CREATE OR REPLACE FUNCTION qexport_audit_append(
    p_workspace text, p_genesis text, p_events jsonb,
    p_downloads bigint, p_bytes_sent bigint, p_link_uses bigint
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    prev text;
    e jsonb;
BEGIN
    PERFORM pg_advisory_xact_lock(1096107092, hashtext(p_workspace));
    prev := coalesce(
        (SELECT hash FROM audit_events WHERE workspace_id = p_workspace ORDER BY id DESC LIMIT 1),
        (SELECT anchor_hash FROM audit_anchors WHERE workspace_id = p_workspace),
        p_genesis
    );
    FOR e IN SELECT value FROM jsonb_array_elements(p_events) LOOP
        INSERT INTO audit_events (
            at, workspace_id, actor_kind, actor_id, action, target_kind, target_id,
            outcome, client_address, details, prev_hash, hash
        ) VALUES (
            (e->>'at')::timestamptz, p_workspace, e->>'actor_kind', e->>'actor_id',
            e->>'action', e->>'target_kind', e->>'target_id', e->>'outcome',
            e->>'client_address', e->>'details', prev,
            encode(sha256(convert_to((e->>'before') || prev || (e->>'after'), 'UTF8')), 'hex')
        ) RETURNING hash INTO prev;
    END LOOP;
    IF p_downloads <> 0 OR p_bytes_sent <> 0 OR p_link_uses <> 0 THEN
        INSERT INTO audit_download_totals AS t
            (workspace_id, downloads, bytes_sent, public_link_uses)
        VALUES (p_workspace, p_downloads, p_bytes_sent, p_link_uses)
        ON CONFLICT (workspace_id) DO UPDATE SET
            downloads = t.downloads + excluded.downloads,
            bytes_sent = t.bytes_sent + excluded.bytes_sent,
            public_link_uses = t.public_link_uses + excluded.public_link_uses;
    END IF;
    RETURN prev;
END
$$
"""


_ARGUMENTS = "text, text, jsonb, bigint, bigint, bigint"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS qexport_audit_append({_ARGUMENTS})")
