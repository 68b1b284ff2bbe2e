"""Data sources registered in the database and the workspaces they are shared with."""

from __future__ import annotations

import sqlalchemy as sa

from qexport.store.tables.base import UTCDateTime, metadata

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
