"""The audit trail: its events, chain anchors, totals for /metrics, and the triggers that
keep it append-only except to a prune."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

# Who did what with which thing (domain/audit.py): one keyed hash chain per workspace,
# append-only.
audit_events = sa.Table(
    "audit_events",
    metadata,
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
    # Sorted-key compact JSON, as hashed: stored as text so that it reads back byte for byte.
    sa.Column("details", sa.Text, nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    # The event's place in its chain (1, 2, 3...; numbered by migration 0020 for the events
    # from before); its default only lets SQLite add the column to a table with rows.
    sa.Column("seq", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    # Which secret keyed its hash (domain/audit_keys.py); NULL: plain SHA-256, before keys.
    sa.Column("key_id", sa.String(16)),
    sa.CheckConstraint(
        "actor_kind IN ('user', 'token', 'public_link', 'scheduler', 'operator', 'anonymous')",
        name="actor_kind",
    ),
    sa.CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="outcome"),
    # Ids are never reused, even after a prune removed the newest rows (keyset cursors).
    sqlite_autoincrement=True,
)
# A workspace's trail newest first (the list, keyset by id) and its chain's last hash.
sa.Index("ix_audit_events_workspace_id", audit_events.c.workspace_id, audit_events.c.id)
sa.Index("ix_audit_events_at", audit_events.c.at)
# One event per place in a chain: a second writer can never fork it, and a checkpoint's
# sequence is found at once.
sa.Index("ux_audit_events_seq", audit_events.c.workspace_id, audit_events.c.seq, unique=True)

# Where each workspace's chain starts once pruning removed its oldest events: the hash and
# sequence of the last event pruned (the first kept event's prev_hash, its sequence - 1). No
# row: the chain starts at zeros. A prune since keys names the anchor in a signed
# `audit.pruned` event of the chain; sequence 0 is an anchor left by a prune from before.
audit_anchors = sa.Table(
    "audit_anchors",
    metadata,
    sa.Column("workspace_id", sa.String(200), primary_key=True),
    sa.Column("anchor_hash", sa.String(64), nullable=False),
    sa.Column("pruned_before", UTCDateTime, nullable=False),
    sa.Column("anchor_seq", sa.BigInteger, nullable=False, server_default=sa.text("0")),
)

# Each workspace's downloads, bytes sent and public-link uses over the events audit_events
# holds (domain/stats.py download_tally), for /metrics: kept in step in the transaction that
# appends a download's event and in the one that prunes events (store/audit/). Summing
# audit_events at each scrape grows with the retention: with 1M events it took 4.0 s on
# SQLite and 2.1 s on PostgreSQL (the bytes are in the details' JSON), and 265 / 571 ms for
# the counts alone over a partial index; reading this table, the whole scrape takes 12 /
# 11 ms, and recording a download's event costs no more than a sign-in's within the noise
# (bench/metrics_scrape.py).
audit_download_totals = sa.Table(
    "audit_download_totals",
    metadata,
    sa.Column("workspace_id", sa.String(200), primary_key=True),
    sa.Column("downloads", sa.BigInteger, nullable=False),
    sa.Column("bytes_sent", sa.BigInteger, nullable=False),
    sa.Column("public_link_uses", sa.BigInteger, nullable=False),
)

# Each workspace's previews and the rows they showed, over the `query.previewed` events
# audit_events holds (outcome ok), for /metrics. Kept by the database itself: a trigger adds
# each such event as it is inserted and takes it off as a prune deletes it, however the event
# was written (one at a time or in a group) and whatever writes it next, so the totals are
# always the sum over the trail. A trigger's WHEN clause costs every other event one
# comparison.
audit_preview_totals = sa.Table(
    "audit_preview_totals",
    metadata,
    sa.Column("workspace_id", sa.String(200), primary_key=True),
    sa.Column("previews", sa.BigInteger, nullable=False),
    sa.Column("rows_shown", sa.BigInteger, nullable=False),
)
PREVIEW_TOTALS_SQLITE = (
    """
CREATE TRIGGER audit_preview_totals_add AFTER INSERT ON audit_events
WHEN NEW.action = 'query.previewed' AND NEW.outcome = 'ok'
BEGIN
    INSERT INTO audit_preview_totals (workspace_id, previews, rows_shown)
    VALUES (NEW.workspace_id, 1, coalesce(CAST(json_extract(NEW.details, '$.rows') AS INTEGER), 0))
    ON CONFLICT (workspace_id) DO UPDATE SET
        previews = previews + 1, rows_shown = rows_shown + excluded.rows_shown;
END
""",
    """
CREATE TRIGGER audit_preview_totals_remove AFTER DELETE ON audit_events
WHEN OLD.action = 'query.previewed' AND OLD.outcome = 'ok'
BEGIN
    UPDATE audit_preview_totals SET
        previews = previews - 1,
        rows_shown = rows_shown
            - coalesce(CAST(json_extract(OLD.details, '$.rows') AS INTEGER), 0)
    WHERE workspace_id = OLD.workspace_id;
END
""",
)
PREVIEW_TOTALS_POSTGRESQL = (
    """
CREATE FUNCTION audit_preview_totals_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO audit_preview_totals AS t (workspace_id, previews, rows_shown)
        VALUES (NEW.workspace_id, 1, coalesce((NEW.details::jsonb ->> 'rows')::bigint, 0))
        ON CONFLICT (workspace_id) DO UPDATE SET
            previews = t.previews + 1, rows_shown = t.rows_shown + excluded.rows_shown;
        RETURN NEW;
    END IF;
    UPDATE audit_preview_totals SET
        previews = previews - 1,
        rows_shown = rows_shown - coalesce((OLD.details::jsonb ->> 'rows')::bigint, 0)
    WHERE workspace_id = OLD.workspace_id;
    RETURN OLD;
END $$
""",
    """
CREATE TRIGGER audit_preview_totals_add AFTER INSERT ON audit_events
FOR EACH ROW WHEN (NEW.action = 'query.previewed' AND NEW.outcome = 'ok')
EXECUTE FUNCTION audit_preview_totals_kept()
""",
    """
CREATE TRIGGER audit_preview_totals_remove AFTER DELETE ON audit_events
FOR EACH ROW WHEN (OLD.action = 'query.previewed' AND OLD.outcome = 'ok')
EXECUTE FUNCTION audit_preview_totals_kept()
""",
)

# SQLite's side of the prune path: a DELETE of audit events is allowed only while this
# one-row table says a prune is under way, which `qexport audit prune` sets and clears in its
# own transaction (store/audit/log.py). SQLite has no session variables; the flag's row is written
# inside the pruning transaction, so no other connection ever sees it set.
audit_prune_flag = sa.Table(
    "audit_prune_flag",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.CheckConstraint("id = 1", name="one_row"),
)

AUDIT_APPEND_ONLY_SQLITE = (
    """
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END
""",
    """
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
WHEN NOT EXISTS (SELECT 1 FROM audit_prune_flag WHERE id = 1 AND active)
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END
""",
)
# PostgreSQL's side: a DELETE is allowed only in a transaction that said
# `SET LOCAL qexport.audit_prune = 'on'` (the setting ends with the transaction).
AUDIT_APPEND_ONLY_POSTGRESQL = (
    """
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('qexport.audit_prune', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit events are append-only' USING ERRCODE = 'check_violation';
END $$
""",
    """
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()
""",
)
