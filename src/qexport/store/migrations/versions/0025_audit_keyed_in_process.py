"""PostgreSQL: drop qexport_audit_append; audit events are keyed in qexport's process.

The function (migrations 0019 and 0020) was handed each workspace's event key, as HMAC's two
padded keys, with every append. Whoever holds qexport's database login owns the function and
could have put one in its place that kept them, then forged events after the newest
checkpoint. The events are now chained and keyed in Python under the same advisory lock
(store/audit/chain.py), and no function of the database takes key material. Both signatures go:
0020's keyed one and the one that refuses unkeyed appends.

A process of the version before still calls the function: its appends fail until it is
restarted with this version.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-10
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_KEYED = "qexport_audit_append(text, text, jsonb, bigint, bigint, bigint, text, bytea, bytea)"
_UNKEYED = "qexport_audit_append(text, text, jsonb, bigint, bigint, bigint)"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {_KEYED}")
        op.execute(f"DROP FUNCTION IF EXISTS {_UNKEYED}")


def downgrade() -> None:
    """Back to 0020's functions, which the version before calls (and hands the pads to)."""
    if op.get_bind().dialect.name == "postgresql":
        keyed = importlib.import_module("qexport.store.migrations.versions.0020_keyed_audit_chain")
        op.execute(keyed._REFUSE_UNKEYED)
        op.execute(keyed._CREATE)
