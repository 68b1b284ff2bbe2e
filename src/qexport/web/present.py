"""How an export reads on a page: its status in words, sizes, and time left."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from qexport.domain.exports import ExportRecord, effective_status
from qexport.humanize import human_size

UNSETTLED = ("queued", "running")

# What a failure code means to a person; the record's detail follows it.
REASONS = {
    "access_lost": "You may no longer read what this export was made from.",
    "query_invalid": "The query could not run.",
    "query_timeout": "The query took longer than allowed.",
    "limit_exceeded": "The result was larger than allowed.",
    "render_failed": "The file could not be written.",
    "cancelled": "The export was cancelled.",
    "source_unavailable": "The data source could not be reached.",
    "storage_unavailable": "The file store could not be reached.",
    "attempts_exhausted": "The export was tried too many times.",
    "internal": "Something went wrong on our side.",
}


def human_duration(delta: timedelta) -> str:
    """The two largest units: `6 days, 23 hours`, `5 minutes`, `less than a minute`."""
    seconds = max(0, int(delta.total_seconds()))
    parts: list[str] = []
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        count, seconds = divmod(seconds, length)
        if count or parts:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    shown = [p for p in parts[:2] if not p.startswith("0 ")]
    return ", ".join(shown) or "less than a minute"


def when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if value else ""


@dataclass(frozen=True)
class ExportRow:
    """One export as the pages show it."""

    id: str
    subject: str
    subject_type: str
    format: str
    status: str
    created: str
    rows: int | None
    progress_rows: int
    size: str
    expires: str
    failure_code: str | None
    failure_reason: str
    failure_detail: str
    filename: str
    parameters: dict[str, object]

    @property
    def unsettled(self) -> bool:
        return self.status in UNSETTLED

    @property
    def downloadable(self) -> bool:
        return self.status == "succeeded"


def export_row(record: ExportRecord, now: datetime) -> ExportRow:
    status = str(effective_status(record, now))
    expires = ""
    if record.expires_at is not None:
        if status == "expired":
            expires = f"expired {human_duration(now - record.expires_at)} ago"
        else:
            expires = f"expires in {human_duration(record.expires_at - now)}"
    code = record.failure_code.value if record.failure_code else None
    return ExportRow(
        id=record.id,
        subject=record.subject_name,
        subject_type=record.subject_type,
        format=record.format,
        status=status,
        created=when(record.created_at),
        rows=record.row_count,
        progress_rows=record.progress_rows or 0,
        size=human_size(record.size_bytes),
        expires=expires,
        failure_code=code,
        failure_reason=REASONS.get(code or "", "The export failed."),
        failure_detail=record.failure_detail or "",
        filename=record.filename,
        parameters=dict(record.parameters),
    )
