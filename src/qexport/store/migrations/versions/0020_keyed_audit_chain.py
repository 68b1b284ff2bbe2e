"""The keyed audit chain: each event's place in its chain (`seq`, numbered here for the events
already recorded) and the secret that keyed it (`key_id`), an anchor's sequence, and on
PostgreSQL qexport_audit_append keying each event with HMAC-SHA256 (store/audit/chain.py says how).

Events already recorded keep their plain SHA-256 hashes (key_id NULL) and verify as they
are; anchors left by earlier prunes get sequence 0, the numbering starting after them.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-08
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from alembic import op

from qexport.store.tables.audit import AUDIT_APPEND_ONLY_SQLITE

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# As 0019's, but: the head's sequence is read with its hash and each event takes the next
# one; each event's canonical text comes in three pieces around its prev_hash and its
# sequence (domain/audit.pieces); its hash is HMAC-SHA256 computed from the workspace's event
# key padded with HMAC's inner and outer pads (p_inner, p_outer: ChainKey.pads), which are
# parameters of each call and never stored.
_CREATE = """
CREATE FUNCTION qexport_audit_append(
    p_workspace text, p_genesis text, p_events jsonb,
    p_downloads bigint, p_bytes_sent bigint, p_link_uses bigint,
    p_key_id text, p_inner bytea, p_outer bytea
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    prev text;
    n bigint;
    e jsonb;
    message bytea;
BEGIN
    PERFORM pg_advisory_xact_lock(1096107092, hashtext(p_workspace));
    SELECT hash, seq INTO prev, n FROM audit_events
    WHERE workspace_id = p_workspace ORDER BY id DESC LIMIT 1;
    IF NOT FOUND THEN
        SELECT anchor_hash, anchor_seq INTO prev, n FROM audit_anchors
        WHERE workspace_id = p_workspace;
        IF NOT FOUND THEN
            prev := p_genesis;
            n := 0;
        END IF;
    END IF;
    FOR e IN SELECT value FROM jsonb_array_elements(p_events) LOOP
        n := n + 1;
        message := convert_to(
            (e->>'before') || prev || (e->>'between') || n::text || (e->>'after'), 'UTF8'
        );
        INSERT INTO audit_events (
            at, workspace_id, actor_kind, actor_id, action, target_kind, target_id,
            outcome, client_address, details, prev_hash, seq, key_id, hash
        ) VALUES (
            (e->>'at')::timestamptz, p_workspace, e->>'actor_kind', e->>'actor_id',
            e->>'action', e->>'target_kind', e->>'target_id', e->>'outcome',
            e->>'client_address', e->>'details', prev, n, p_key_id,
            encode(sha256(p_outer || sha256(p_inner || message)), 'hex')
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
_ARGUMENTS = "text, text, jsonb, bigint, bigint, bigint, text, bytea, bytea"
_UNKEYED_ARGUMENTS = "text, text, jsonb, bigint, bigint, bigint"
# A process of the version before, still running, would chain unkeyed events after keyed
# ones (which verify reports as a rewrite): its calls fail instead, saying why.
_REFUSE_UNKEYED = """
CREATE OR REPLACE FUNCTION qexport_audit_append(
    p_workspace text, p_genesis text, p_events jsonb,
    p_downloads bigint, p_bytes_sent bigint, p_link_uses bigint
) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit chain of this database is keyed since qexport migration 0020:'
        ' restart this process with the version that upgraded it';
END
$$
"""
# Each event's place in its chain, in id order (the chain's order), from 1.
_NUMBER = """
UPDATE audit_events SET seq = numbered.n
FROM (
    SELECT id, row_number() OVER (PARTITION BY workspace_id ORDER BY id) AS n
    FROM audit_events
) AS numbered
WHERE audit_events.id = numbered.id
"""


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.add_column(
        "audit_events",
        sa.Column("seq", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("audit_events", sa.Column("key_id", sa.String(16)))
    op.add_column(
        "audit_anchors",
        sa.Column("anchor_seq", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )
    # Numbering writes every event: past the append-only trigger, for this transaction only.
    if postgresql:
        op.execute("ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only")
        op.execute(_NUMBER)
        op.execute("ALTER TABLE audit_events ENABLE TRIGGER audit_events_append_only")
    else:
        op.execute("DROP TRIGGER audit_events_no_update")
        op.execute(_NUMBER)
        op.execute(AUDIT_APPEND_ONLY_SQLITE[0])
    op.create_index("ux_audit_events_seq", "audit_events", ["workspace_id", "seq"], unique=True)
    if postgresql:
        op.execute(_REFUSE_UNKEYED)
        op.execute(_CREATE)


def downgrade() -> None:
    """Back to unkeyed appends: the keyed events stay, and no longer verify."""
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute(f"DROP FUNCTION IF EXISTS qexport_audit_append({_ARGUMENTS})")
        previous = importlib.import_module(
            "qexport.store.migrations.versions.0019_audit_append_function"
        )
        op.execute(f"DROP FUNCTION IF EXISTS qexport_audit_append({_UNKEYED_ARGUMENTS})")
        op.execute(previous._CREATE)
    op.drop_index("ux_audit_events_seq", table_name="audit_events")
    op.drop_column("audit_anchors", "anchor_seq")
    op.drop_column("audit_events", "key_id")
    op.drop_column("audit_events", "seq")
