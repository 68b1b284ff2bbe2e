"""Export requests that wait for an admin's approval."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

# is never stored: a pending request past `expires_at` reads as expired.
_APPROVED_HAS_EXPORT = "(status = 'approved') = (export_id IS NOT NULL)"
_DECIDED_HAS_DECIDER = "(status = 'pending') = (decided_by IS NULL AND decided_at IS NULL)"
approval_requests = sa.Table(
    "approval_requests",
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
    sa.Column("notify", sa.JSON, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("decided_by", sa.String(200)),
    sa.Column("decided_at", UTCDateTime),
    sa.Column("reason", sa.String(500)),
    sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id")),
    sa.CheckConstraint("status IN ('pending', 'approved', 'denied')", name="status"),
    sa.CheckConstraint(_APPROVED_HAS_EXPORT, name="approved_has_export"),
    sa.CheckConstraint(_DECIDED_HAS_DECIDER, name="decided_has_decider"),
)
# A workspace's requests newest first (the pages, the API), and the pending ones (the metric).
sa.Index(
    "ix_approval_requests_workspace",
    approval_requests.c.workspace_id,
    approval_requests.c.created_at,
    approval_requests.c.id,
)
sa.Index("ix_approval_requests_status", approval_requests.c.status, approval_requests.c.expires_at)
