"""How an export is shown to people and programs (DESIGN section 5 field names)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from qexport.domain.exports import ExportRecord, effective_status


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def export_view(record: ExportRecord, now: datetime) -> dict[str, Any]:
    """The export as JSON; `status` is the effective one (`expired` when past expiry)."""
    return {
        "id": record.id,
        "status": effective_status(record, now),
        "subject": {
            "type": record.subject_type,
            "id": record.subject_id,
            "name": record.subject_name,
        },
        "format": record.format,
        "parameters": record.parameters,
        "filename": record.filename,
        "requested_by": record.requested_by,
        "created_at": _iso(record.created_at),
        "started_at": _iso(record.started_at),
        "completed_at": _iso(record.completed_at),
        "expires_at": _iso(record.expires_at),
        "size_bytes": record.size_bytes,
        "row_count": record.row_count,
        "sha256": record.sha256,
        "attempts": record.attempt,
        "progress": {"rows": record.progress_rows},
        "failure": (
            {"code": record.failure_code.value, "detail": record.failure_detail}
            if record.failure_code
            else None
        ),
    }
