"""How an export reads on a page: its status in words, sizes, progress and time left."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from qexport.domain.exports import (
    CANCELLED,
    SETTLED_STATUSES,
    STATUS_LABELS,
    UNSETTLED_STATUSES,
    ExportRecord,
    effective_status,
    shown_status,
)
from qexport.domain.failures import FailureCode, readable_detail
from qexport.domain.humanize import human_size

# The badge every page shows for a status (the exports list, an export, a schedule's runs) is
# the status people read (domain/exports.py: shown_status); a cancelled export's is neutral in
# colour, not the red of a failure.


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


def human_elapsed(delta: timedelta) -> str:
    """A stopwatch in words: `42 s`, `3 min 05 s`, `2 h 07 min`."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def badge_of(status: str, code: FailureCode | str | None) -> str:
    """The badge's key (its CSS class and STATUS_LABELS entry): the status, or `cancelled`."""
    return shown_status(status, code)


@dataclass(frozen=True)
class ExportRow:
    """One export as the pages show it."""

    id: str
    subject: str
    subject_type: str
    format: str
    status: str  # the effective status, as the API says it
    badge: str  # what its badge shows: the status, or `cancelled`
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
    started: str = ""
    elapsed: str = ""  # running: since it started; settled: how long it took
    rate: str = ""  # running: rows written per second so far
    cancelled_at: str = ""

    @property
    def unsettled(self) -> bool:
        return self.status in UNSETTLED_STATUSES

    @property
    def settled(self) -> bool:
        return self.status in SETTLED_STATUSES

    @property
    def downloadable(self) -> bool:
        return self.status == "succeeded"

    @property
    def label(self) -> str:
        return STATUS_LABELS.get(self.badge, self.badge)

    @property
    def cancelled(self) -> bool:
        return self.badge == CANCELLED


def _progress(record: ExportRecord, status: str, now: datetime) -> tuple[str, str]:
    """(elapsed, rate): while running, from `started_at` to now and the rows written so far;
    once settled, how long it ran (no rate)."""
    if record.started_at is None:
        return "", ""
    if status != "running":
        end = record.completed_at
        return (human_elapsed(end - record.started_at), "") if end else ("", "")
    elapsed = now - record.started_at
    seconds = elapsed.total_seconds()
    rate = f"{record.progress_rows / seconds:,.0f} rows/s" if seconds >= 1 else ""
    return human_elapsed(elapsed), rate


def export_row(record: ExportRecord, now: datetime) -> ExportRow:
    status = str(effective_status(record, now))
    expires = ""
    if record.expires_at is not None:
        if status == "expired":
            expires = f"expired {human_duration(now - record.expires_at)} ago"
        else:
            expires = f"expires in {human_duration(record.expires_at - now)}"
    code = record.failure_code.value if record.failure_code else None
    badge = badge_of(status, code)
    elapsed, rate = _progress(record, status, now)
    return ExportRow(
        id=record.id,
        subject=record.subject_name,
        subject_type=record.subject_type,
        format=record.format,
        status=status,
        badge=badge,
        created=when(record.created_at),
        rows=record.row_count,
        progress_rows=record.progress_rows or 0,
        size=human_size(record.size_bytes),
        expires=expires,
        failure_code=code,
        failure_reason=record.failure_code.reason if record.failure_code else "",
        failure_detail=readable_detail(record.failure_detail),
        filename=record.filename,
        parameters=dict(record.parameters),
        started=when(record.started_at),
        elapsed=elapsed,
        rate=rate,
        cancelled_at=when(record.completed_at) if badge == CANCELLED else "",
    )
