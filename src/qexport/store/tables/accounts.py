"""Workspaces, users and their roles, API tokens, failed sign-ins and rate admissions."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

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
