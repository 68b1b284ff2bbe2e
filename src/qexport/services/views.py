"""How exports, queries, reports, schedules and deliveries are shown to people and programs
(DESIGN section 5 field names): the API answers with these, and so does the local command
line."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from qexport.domain.accounts import Link
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.exports import ExportRecord, effective_status
from qexport.domain.failures import readable_detail
from qexport.domain.queries import DEFAULT_FILENAME, Query
from qexport.domain.reports import SUBJECT_REPORT, Report
from qexport.domain.schedules import Delivery, Schedule


def query_view(query: Query) -> dict[str, Any]:
    """A saved query: its statement, parameters, who reads it and the columns its source
    described when it was saved (None for one saved before queries were described)."""
    return {
        "id": query.id,
        "name": query.name,
        "sql": query.sql,
        "source": query.source,
        "parameters": [p.to_json() for p in query.parameters],
        "visibility": query.visibility.value,
        "members": sorted(query.members),
        "owner": query.owner,
        "columns": None if query.columns is None else [c.to_json() for c in query.columns],
        "filename_template": query.filename_template or DEFAULT_FILENAME,
    }


def report_view(report: Report) -> dict[str, Any]:
    """A saved report: its title, description, sections and who reads it."""
    return {
        "id": report.id,
        "title": report.title,
        "description": report.description,
        "sections": [s.to_json() for s in report.sections],
        "visibility": report.visibility.value,
        "members": sorted(report.members),
        "owner": report.owner,
    }


def iso_time(value: datetime | None) -> str | None:
    """UTC instants as the API writes them: `2026-12-01T10:41:00Z`."""
    return value.isoformat().replace("+00:00", "Z") if value else None


def approval_view(request: ApprovalRequest, now: datetime) -> dict[str, Any]:
    """An approval request as JSON (`kind: approval`: not yet an export); `status` is
    `expired` once a pending request's time is up."""
    return {
        "kind": "approval",
        "id": request.id,
        "status": request.effective_status(now).value,
        "subject": {
            "type": request.subject_type,
            "id": request.subject_id,
            "name": request.subject_name,
        },
        "format": request.format,
        "parameters": request.parameters,
        "notify": request.notify,
        "requested_by": request.requested_by,
        "created_at": iso_time(request.created_at),
        "expires_at": iso_time(request.expires_at),
        "decided_by": request.decided_by,
        "decided_at": iso_time(request.decided_at),
        "reason": request.reason,
        "export_id": request.export_id,
    }


def export_view(record: ExportRecord, now: datetime) -> dict[str, Any]:
    """The export as JSON; `status` is the effective one (`expired` when past expiry), the
    failure's detail the readable one (its events keep the engine's words)."""
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
        "created_at": iso_time(record.created_at),
        "started_at": iso_time(record.started_at),
        "completed_at": iso_time(record.completed_at),
        "expires_at": iso_time(record.expires_at),
        "size_bytes": record.size_bytes,
        "row_count": record.row_count,
        "sha256": record.sha256,
        "attempts": record.attempt,
        "progress": {"rows": record.progress_rows},
        "failure": (
            {"code": record.failure_code.value, "detail": readable_detail(record.failure_detail)}
            if record.failure_code
            else None
        ),
    }


def schedule_view(schedule: Schedule, *, full_recipients: bool = True) -> dict[str, Any]:
    """A schedule as JSON; `next_run_at` is null while it is paused. Without
    `full_recipients` (someone who neither owns it nor administers), recipients are masked."""
    is_report = schedule.subject_type == SUBJECT_REPORT
    return {
        "id": schedule.id,
        "query_id": None if is_report else schedule.subject_id,
        "report_id": schedule.subject_id if is_report else None,
        "format": schedule.format,
        "parameters": schedule.parameters,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "recipients": [
            (r if full_recipients else r.masked()).to_json() for r in schedule.recipients
        ],
        "missed": schedule.missed.value,
        "enabled": schedule.enabled,
        "options": {"neutralize_formulas": bool(schedule.options.get("neutralize_formulas", True))},
        "owner": schedule.owner,
        "next_run_at": iso_time(schedule.next_due_at) if schedule.enabled else None,
        "filename_template": schedule.filename_template,
        "created_at": iso_time(schedule.created_at),
    }


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    """A delivery as JSON: who it goes to and how far it got."""
    return {
        "id": delivery.id,
        "recipient": delivery.recipient.to_json(),
        "status": delivery.status.value,
        "attempts": delivery.attempt,
        "outcome": delivery.outcome.value if delivery.outcome else None,
        "last_error": delivery.last_error,
        "failure_code": delivery.failure_code.value if delivery.failure_code else None,
        "sent_at": iso_time(delivery.sent_at),
        "created_at": iso_time(delivery.created_at),
        "next_attempt_at": iso_time(delivery.next_attempt_at),
        "resent_at": iso_time(delivery.resent_at),
    }


def link_view(link: Link, record: ExportRecord) -> dict[str, Any]:
    """A live public link, without its URL (only its hash is kept): it ends when it expires,
    or with its export's file."""
    return {
        "id": link.id,
        "export_id": link.export_id,
        "created_by": link.created_by,
        "created_at": iso_time(link.created_at),
        "expires_at": iso_time(link.expires_at or record.expires_at),
        "last_used_at": iso_time(link.last_used_at),
    }
