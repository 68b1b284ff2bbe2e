"""Exports (the queue), their events and their public links; the triggers that keep
events append-only and settled exports unchanged."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

_SUCCEEDED_COMPLETE = (
    "status <> 'succeeded' OR (size_bytes IS NOT NULL AND row_count IS NOT NULL"
    " AND sha256 IS NOT NULL AND completed_at IS NOT NULL AND expires_at IS NOT NULL"
    " AND failure_code IS NULL)"
)
_FAILED_COMPLETE = (
    "status <> 'failed' OR (failure_code IS NOT NULL AND failure_detail IS NOT NULL"
    " AND completed_at IS NOT NULL AND size_bytes IS NULL AND sha256 IS NULL)"
)
_RUNNING_LEASED = (
    "status <> 'running' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL"
    " AND started_at IS NOT NULL AND attempt >= 1)"
)
_QUEUED_FRESH = "status <> 'queued' OR (attempt = 0 AND lease_token IS NULL)"

exports = sa.Table(
    "exports",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workspace_id", sa.String(200), nullable=False),
    sa.Column("requested_by", sa.String(200), nullable=False),
    sa.Column("subject_type", sa.String(20), nullable=False),
    sa.Column("subject_id", sa.String(36), nullable=False),
    sa.Column("subject_name", sa.String(200), nullable=False),
    sa.Column("format", sa.String(20), nullable=False),
    sa.Column("parameters", sa.JSON, nullable=False),
    sa.Column("options", sa.JSON, nullable=False),
    sa.Column("filename", sa.String(200), nullable=False),
    sa.Column("storage_key", sa.String(600), nullable=False, unique=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("lease_token", sa.String(36)),
    sa.Column("lease_expires_at", UTCDateTime),
    sa.Column("worker_id", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("started_at", UTCDateTime),
    sa.Column("completed_at", UTCDateTime),
    sa.Column("expires_at", UTCDateTime),
    sa.Column("size_bytes", sa.BigInteger),
    sa.Column("row_count", sa.BigInteger),
    sa.Column("sha256", sa.String(64)),
    sa.Column("progress_rows", sa.BigInteger, nullable=False),
    sa.Column("failure_code", sa.String(40)),
    sa.Column("failure_detail", sa.String(500)),
    sa.Column("last_error_code", sa.String(40)),
    sa.Column("last_error_detail", sa.String(500)),
    # [{"source", "reads": [{"schema", "table", "columns"?}] | null}]: what the run that made
    # the file read, as each source's planner reported it just before (null: that source
    # could not say); NULL: not on record (made before 0027, or adopted from an attempt that
    # died), which a sensitivity rule reads as every table it marks.
    sa.Column("reads", sa.JSON),
    sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed')", name="status"),
    sa.CheckConstraint(_SUCCEEDED_COMPLETE, name="succeeded_complete"),
    sa.CheckConstraint(_FAILED_COMPLETE, name="failed_complete"),
    sa.CheckConstraint(_RUNNING_LEASED, name="running_leased"),
    sa.CheckConstraint(_QUEUED_FRESH, name="queued_fresh"),
    sa.CheckConstraint("attempt >= 0 AND progress_rows >= 0", name="counters"),
)
sa.Index("ix_exports_claim", exports.c.status, exports.c.created_at)
# The claim's scan: only unsettled exports, in queue order, so that it stops at the first one it
# can take instead of reading (and on PostgreSQL sorting) every claimable row, or on SQLite the
# whole table with its settled history. Claiming from a queue of 1000 took 1.6 ms of
# PostgreSQL's CPU without it, 0.1 ms with it; on SQLite, behind 19000 settled exports,
# 1.8 ms without, 0.01 ms with.
UNSETTLED = "status IN ('queued', 'running')"
sa.Index(
    "ix_exports_unsettled",
    exports.c.created_at,
    exports.c.id,
    sqlite_where=sa.text(UNSETTLED),
    postgresql_where=sa.text(UNSETTLED),
)
# The fair claim's second read (store/exports/claims.py): one requester's unsettled exports in queue
# order, without their settled history.
sa.Index(
    "ix_exports_requester_unsettled",
    exports.c.workspace_id,
    exports.c.requested_by,
    exports.c.created_at,
    exports.c.id,
    sqlite_where=sa.text(UNSETTLED),
    postgresql_where=sa.text(UNSETTLED),
)
# The fair claim's turn-taking (store/exports/claims.py): when a requester's exports last
# started, one seek per requester instead of their whole history.
sa.Index(
    "ix_exports_requester_started",
    exports.c.workspace_id,
    exports.c.requested_by,
    exports.c.started_at,
)
# The exports list (services/exports.py), newest first in a workspace, a requester's, a
# subject's or a status's: every filter the list offers finds its first page by an index
# seek and reads on in order. Measured by bench/exports_list.py on 200k exports.
sa.Index("ix_exports_workspace_created", exports.c.workspace_id, exports.c.created_at, exports.c.id)
# A member's list; it also serves what 0001's ix_exports_requester (the same columns without
# `id`) did, which 0013 drops.
sa.Index(
    "ix_exports_requester_created",
    exports.c.workspace_id,
    exports.c.requested_by,
    exports.c.created_at,
    exports.c.id,
)
# A member's list by status: without it the page walked the member's whole history checking
# each row's status (10k exports and none failed: 20 ms on SQLite, 0.3 ms with it).
sa.Index(
    "ix_exports_requester_status_created",
    exports.c.workspace_id,
    exports.c.requested_by,
    exports.c.status,
    exports.c.created_at,
    exports.c.id,
)
sa.Index(
    "ix_exports_subject_created",
    exports.c.workspace_id,
    exports.c.subject_id,
    exports.c.created_at,
    exports.c.id,
)
sa.Index(
    "ix_exports_status_created",
    exports.c.workspace_id,
    exports.c.status,
    exports.c.created_at,
    exports.c.id,
)
# The storage quota's sum (store/exports/queue.py): a workspace's succeeded exports by expiry,
# without its failed history.
SUCCEEDED = "status = 'succeeded'"
sa.Index(
    "ix_exports_stored",
    exports.c.workspace_id,
    exports.c.expires_at,
    sqlite_where=sa.text(SUCCEEDED),
    postgresql_where=sa.text(SUCCEEDED),
)

# Every transition of an export, written in the transition's own transaction; append-only.
export_events = sa.Table(
    "export_events",
    metadata,
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
sa.Index("ix_export_events_export_id", export_events.c.export_id, export_events.c.id)

EVENTS_APPEND_ONLY_SQLITE = (
    """
CREATE TRIGGER export_events_no_update BEFORE UPDATE ON export_events
BEGIN
    SELECT RAISE(ABORT, 'export events are append-only');
END
""",
    """
CREATE TRIGGER export_events_no_delete BEFORE DELETE ON export_events
BEGIN
    SELECT RAISE(ABORT, 'export events are append-only');
END
""",
)
EVENTS_APPEND_ONLY_POSTGRESQL = (
    """
CREATE FUNCTION export_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'export events are append-only' USING ERRCODE = 'check_violation';
END $$
""",
    """
CREATE TRIGGER export_events_append_only BEFORE UPDATE OR DELETE ON export_events
FOR EACH ROW EXECUTE FUNCTION export_events_append_only()
""",
)

# Invariant 1 backed by the database itself: any UPDATE of a settled row is refused.
SETTLED_IMMUTABLE_SQLITE = """
CREATE TRIGGER exports_settled_immutable BEFORE UPDATE ON exports
WHEN OLD.status IN ('succeeded', 'failed')
BEGIN
    SELECT RAISE(ABORT, 'settled export is immutable');
END
"""
SETTLED_IMMUTABLE_POSTGRESQL = (
    """
CREATE FUNCTION exports_settled_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'settled export is immutable' USING ERRCODE = 'check_violation';
END $$
""",
    """
CREATE TRIGGER exports_settled_immutable BEFORE UPDATE ON exports
FOR EACH ROW WHEN (OLD.status IN ('succeeded', 'failed'))
EXECUTE FUNCTION exports_settled_immutable()
""",
)

links = sa.Table(
    "links",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id"), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_by", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("revoked_at", UTCDateTime),
    # When the link last served its file, written at most once a minute (services/links.py).
    sa.Column("last_used_at", UTCDateTime),
    # When the link stops working, sooner than its file by the workspace's policy; NULL: with
    # the file.
    sa.Column("expires_at", UTCDateTime),
)
sa.Index("ix_links_export_id", links.c.export_id)  # live links per export (the link limit)
