"""Small builders shared by the store tests."""

from __future__ import annotations

import uuid
from datetime import datetime

from qexport.ports import NewExport


def new_export(created_at: datetime, workspace: str = "w1") -> NewExport:
    """A request for a csv export of query q1 by alice, with a fresh id and key."""
    export_id = str(uuid.uuid4())
    return NewExport(
        id=export_id,
        workspace_id=workspace,
        requested_by="alice",
        subject_type="query",
        subject_id="q1",
        subject_name="orders",
        format="csv",
        parameters={"since": "2024-01-01"},
        options={"neutralize_formulas": True},
        filename="orders.csv",
        storage_key=f"exports/{workspace}/{export_id}/orders.csv",
        created_at=created_at,
    )
