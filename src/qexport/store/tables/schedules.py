"""Schedules, their fired runs and subscribers; deliveries; the installation's secrets
(the key webhook signatures derive from)."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workspace_id", sa.String(200), nullable=False),
    sa.Column("owner", sa.String(200), nullable=False),
    sa.Column("subject_type", sa.String(20), nullable=False),
    sa.Column("subject_id", sa.String(36), nullable=False),
    sa.Column("format", sa.String(20), nullable=False),
    sa.Column("parameters", sa.JSON, nullable=False),
    sa.Column("options", sa.JSON, nullable=False),
    sa.Column("cron", sa.String(200), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=False),
    sa.Column("recipients", sa.JSON, nullable=False),
    sa.Column("missed", sa.String(10), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    # The next due time not yet fired (UTC); schedulers advance it with a guarded UPDATE.
    sa.Column("next_due_at", UTCDateTime, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    # Overrides its subject's file name template; NULL: the query's (or "{name}_{date}").
    sa.Column("filename_template", sa.String(200)),
    sa.CheckConstraint("missed IN ('once', 'skip')", name="missed"),
    sa.CheckConstraint("subject_type IN ('query', 'report')", name="subject_type"),
)
sa.Index("ix_schedules_workspace_id", schedules.c.workspace_id)
sa.Index("ix_schedules_next_due_at", schedules.c.next_due_at)

# One row per fired due time: the primary key makes firing idempotent, so that any number of
# schedulers may run at once and a due time still yields exactly one export.
schedule_runs = sa.Table(
    "schedule_runs",
    metadata,
    sa.Column("schedule_id", sa.String(36), sa.ForeignKey("schedules.id"), primary_key=True),
    sa.Column("due_at", UTCDateTime, primary_key=True),
    sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id"), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

# Members who subscribed their own email address to a schedule: kept apart from the owner's
# recipients, so that the owner's edits never drop them and subscribing changes nothing else.
schedule_subscribers = sa.Table(
    "schedule_subscribers",
    metadata,
    sa.Column("schedule_id", sa.String(36), sa.ForeignKey("schedules.id"), primary_key=True),
    sa.Column("user_id", sa.String(200), sa.ForeignKey("users.id"), primary_key=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
sa.Index("ix_schedule_subscribers_user_id", schedule_subscribers.c.user_id)

_SENDING_LEASED = (
    "status <> 'sending' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL"
    " AND attempt >= 1)"
)
_SENT_COMPLETE = "status <> 'sent' OR (sent_at IS NOT NULL AND outcome IS NOT NULL)"
_DELIVERY_FAILED_COMPLETE = "status <> 'failed' OR last_error IS NOT NULL"

CHANNELS = "channel IN ('email', 'webhook', 'slack', 'teams')"
# Who hears about an export, each recipient on its own: waiting -> sending -> sent | failed.
deliveries = sa.Table(
    "deliveries",
    metadata,
    # Also the idempotency key the recipient sees in a header: fixed for every attempt.
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("export_id", sa.String(36), sa.ForeignKey("exports.id"), nullable=False),
    sa.Column("schedule_id", sa.String(36)),
    sa.Column("channel", sa.String(10), nullable=False),
    sa.Column("target", sa.String(2000), nullable=False),
    sa.Column("status", sa.String(10), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", UTCDateTime),
    sa.Column("lease_token", sa.String(36)),
    sa.Column("lease_expires_at", UTCDateTime),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("sent_at", UTCDateTime),
    sa.Column("outcome", sa.String(10)),
    sa.Column("last_error", sa.String(500)),
    # Set when a delivery failed with a failure code (destination_refused); NULL otherwise.
    sa.Column("failure_code", sa.String(30)),
    # Sending a failed delivery again (store/deliveries.py): the attempts made before, so that
    # it gets a fresh budget while `attempt` keeps counting; and when and by whom.
    sa.Column("attempts_spent", sa.Integer, nullable=False, server_default="0"),
    sa.Column("resent_at", UTCDateTime),
    sa.Column("resent_by", sa.String(200)),
    # The member whose subscription this delivery is (their own address): checked again when
    # it is sent. NULL for the recipients the schedule's owner named.
    sa.Column("subscriber_id", sa.String(200)),
    sa.UniqueConstraint("export_id", "channel", "target"),
    sa.CheckConstraint(CHANNELS, name="channel"),
    sa.CheckConstraint("status IN ('waiting', 'sending', 'sent', 'failed')", name="status"),
    sa.CheckConstraint(
        "outcome IS NULL OR outcome IN ('file', 'failure', 'expired')", name="outcome"
    ),
    sa.CheckConstraint(_SENDING_LEASED, name="sending_leased"),
    sa.CheckConstraint(_SENT_COMPLETE, name="sent_complete"),
    sa.CheckConstraint(_DELIVERY_FAILED_COMPLETE, name="failed_complete"),
)
UNSENT = "status IN ('waiting', 'sending')"
sa.Index(
    "ix_deliveries_unsent",
    deliveries.c.created_at,
    deliveries.c.id,
    sqlite_where=sa.text(UNSENT),
    postgresql_where=sa.text(UNSENT),
)

# Secrets this installation generates once and shares through the database (such as the key
# that webhook signatures derive from when QEXPORT_SECRET_KEY is not set).
instance_secrets = sa.Table(
    "instance_secrets",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("value", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
