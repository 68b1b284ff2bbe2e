"""The only schema definition. Migrations under `migrations/` create exactly this."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python on every backend; naive UTC text in SQLite.

    SQLite has no timestamp type: values are stored as ISO text, which compares correctly
    in guards such as `lease_expires_at < :now` because every value is UTC.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

queries = sa.Table(
    "queries",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workspace_id", sa.String(200), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("sql", sa.Text, nullable=False),
    sa.Column("source", sa.String(200), nullable=False),
    sa.Column("parameters", sa.JSON, nullable=False),
    sa.Column("visibility", sa.String(20), nullable=False),
    sa.Column("members", sa.JSON, nullable=False),
    sa.Column("owner", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    # [{"name", "type"}] as the source described the statement when it was saved; NULL for
    # queries saved before 0011 (unknown until saved again).
    sa.Column("columns", sa.JSON),
    # How its exports' files are named ("{name}_{since}_{date}"); NULL: "{name}_{date}".
    sa.Column("filename_template", sa.String(200)),
    # [{"schema", "table", "columns"?}]: the tables it reads as its source's planner reported
    # them when it was saved or last run (domain/sensitivity.py); NULL: unknown (a source that
    # cannot say, or saved before 0021), read by a sensitivity rule as every table.
    sa.Column("reads", sa.JSON),
    sa.CheckConstraint("visibility IN ('workspace', 'members')", name="visibility"),
)
# A name is unique among a workspace's live queries; a deleted name can be reused.
sa.Index(
    "uq_queries_live_name",
    queries.c.workspace_id,
    queries.c.name,
    unique=True,
    sqlite_where=queries.c.deleted_at.is_(None),
    postgresql_where=queries.c.deleted_at.is_(None),
)

reports = sa.Table(
    "reports",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("workspace_id", sa.String(200), nullable=False),
    sa.Column("title", sa.String(200), nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("sections", sa.JSON, nullable=False),
    sa.Column("visibility", sa.String(20), nullable=False),
    sa.Column("members", sa.JSON, nullable=False),
    sa.Column("owner", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("deleted_at", UTCDateTime),
    sa.CheckConstraint("visibility IN ('workspace', 'members')", name="visibility"),
)
sa.Index("ix_reports_workspace_id", reports.c.workspace_id)

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
# The fair claim's second read (store/exports.py): one requester's unsettled exports in queue
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
# The fair claim's turn-taking (store/exports.py): when a requester's exports last started, one
# seek per requester instead of their whole history.
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
# The storage quota's sum (store/exports.py): a workspace's succeeded exports by expiry, without
# its failed history.
SUCCEEDED = "status = 'succeeded'"
sa.Index(
    "ix_exports_stored",
    exports.c.workspace_id,
    exports.c.expires_at,
    sqlite_where=sa.text(SUCCEEDED),
    postgresql_where=sa.text(SUCCEEDED),
)

# ---------------------------------------------------------------- accounts

# A workspace's id is its name (a slug): queries and exports carry it as `workspace_id`.
workspaces = sa.Table(
    "workspaces",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # IANA name; reports show their generation time in it.
    sa.Column("timezone", sa.String(64), nullable=False, server_default="UTC"),
    # Host names webhooks may go to, set by a workspace admin (a JSON list); NULL: any host
    # the egress policy allows.
    sa.Column("webhook_hosts", sa.JSON),
    # The workspace's export policy (domain/policies.py): the rules that are set; NULL: none.
    sa.Column("policy", sa.JSON),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("email", sa.String(255), nullable=False, unique=True),
    sa.Column("password_hash", sa.String(200)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    # Signed into every session cookie; raising it ends all of the user's sessions at once.
    sa.Column("session_epoch", sa.Integer, nullable=False, server_default="0"),
    # Set by `qexport users disable`: no sign-in, session or token works while it is.
    sa.Column("disabled_at", UTCDateTime),
)

memberships = sa.Table(
    "memberships",
    metadata,
    sa.Column("workspace_id", sa.String(200), sa.ForeignKey("workspaces.id"), primary_key=True),
    sa.Column("user_id", sa.String(200), sa.ForeignKey("users.id"), primary_key=True),
    sa.Column("role", sa.String(20), nullable=False),
    sa.CheckConstraint("role IN ('viewer', 'editor', 'admin')", name="role"),
)

# Only a SHA-256 of each token's random secret is stored; the id is the token's public part.
api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("user_id", sa.String(200), sa.ForeignKey("users.id"), nullable=False),
    sa.Column("workspace_id", sa.String(200), sa.ForeignKey("workspaces.id"), nullable=False),
    sa.Column("secret_hash", sa.String(64), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("last_used_at", UTCDateTime),
    sa.Column("revoked_at", UTCDateTime),
)

# Failed sign-ins of the last window, counted per email and client address together, per
# email and per address (domain/sign_in.py) so that every server process sharing the database
# throttles guessing alike; older rows are pruned as new ones are written. A successful
# sign-in clears `email` (NULL) of the failures from its own address and keeps their count for
# the address; the email's failures from elsewhere stay.
sign_in_failures = sa.Table(
    "sign_in_failures",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("email", sa.String(320)),
    sa.Column("address", sa.String(64), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
)
sa.Index("ix_sign_in_failures_email", sign_in_failures.c.email, sign_in_failures.c.at)
sa.Index("ix_sign_in_failures_address", sign_in_failures.c.address, sign_in_failures.c.at)
sa.Index("ix_sign_in_failures_at", sign_in_failures.c.at)

# How often each key (a member's previews: `preview:<workspace>:<user>`) was used within its
# window: one row per use, the key's rows older than the window deleted as new ones are
# written (store/rates.py), so a key holds at most its limit.
rate_admissions = sa.Table(
    "rate_admissions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(300), nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
)
sa.Index("ix_rate_admissions_key", rate_admissions.c.key, rate_admissions.c.at)

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

# Data sources registered with `qexport sources add`, next to those of QEXPORT_SOURCE_*.
# `url` is sealed (`v1:`/`v2:...`) when QEXPORT_SECRET_KEY is set. A source is known by its
# workspace and its name: names are per workspace (domain/sources.py). `workspace_id` owns the
# source; '' for one registered before sources had owners (usable only where the operator
# shares it): a key column cannot be NULL.
sources = sa.Table(
    "sources",
    metadata,
    sa.Column("workspace_id", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("allow_privileged_role", sa.Boolean, nullable=False, server_default=sa.false()),
)

# Workspaces other than the owner that the operator lets use a registered source.
source_shares = sa.Table(
    "source_shares",
    metadata,
    sa.Column("source_workspace_id", sa.String(200), primary_key=True),
    sa.Column("source_name", sa.String(200), primary_key=True),
    sa.Column("workspace_id", sa.String(200), primary_key=True),
    sa.ForeignKeyConstraint(
        ["source_workspace_id", "source_name"],
        ["sources.workspace_id", "sources.name"],
        ondelete="CASCADE",
    ),
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

# ---------------------------------------------------------------- schedules and deliveries

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

# ---------------------------------------------------------------- the audit trail

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
# appends a download's event and in the one that prunes events (store/audit.py). Summing
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
# own transaction (store/audit.py). SQLite has no session variables; the flag's row is written
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

# Export requests of sensitive queries, waiting for an admin (domain/approvals.py). 'expired'
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
