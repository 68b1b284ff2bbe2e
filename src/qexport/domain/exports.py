"""The export record, its persisted states and the read-time `expired` condition."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from qexport.domain.failures import FailureCode
from qexport.domain.sensitivity import FileReads


class Status(StrEnum):
    """Persisted status. `expired` is never stored: see `effective_status`."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


SETTLED = frozenset({Status.SUCCEEDED, Status.FAILED})
UNSETTLED = frozenset({Status.QUEUED, Status.RUNNING})
EXPIRED = "expired"
# What a person reads for an export settled failed/cancelled (stored so, and said so by the
# API, DESIGN section 5): they asked for it, so it is no failure to them.
CANCELLED = "cancelled"
# Every status a person reads, in the pages and the CLI: the effective status, a cancelled
# export apart (shown_status).
STATUS_LABELS = {
    "queued": "Queued",
    "running": "Running",
    "succeeded": "Succeeded",
    "expired": "Expired",
    "failed": "Failed",
    CANCELLED: "Cancelled",
}
UNSETTLED_STATUSES = ("queued", "running")
SETTLED_STATUSES = ("succeeded", "failed", EXPIRED)


def shown_status(status: str, code: str | None) -> str:
    """What a person reads for an export whose effective status is `status` and whose failure
    code is `code`: the status, or `cancelled` for one its requester cancelled."""
    return CANCELLED if status == Status.FAILED and code == FailureCode.CANCELLED else status


@dataclass(frozen=True)
class Requester:
    """Whose rights an export runs with."""

    user_id: str
    workspace_id: str


# Whose context a source's catalogue is read with (policy rules are checked on it): nobody's,
# no member's user or workspace (PostgreSQL's qexport.user_id is empty).
NO_MEMBER = Requester("", "")


@dataclass(frozen=True)
class ExportRecord:
    id: str
    workspace_id: str
    requested_by: str
    subject_type: str
    subject_id: str
    subject_name: str
    format: str
    parameters: dict[str, Any]
    options: dict[str, Any]
    filename: str
    storage_key: str
    status: Status
    attempt: int
    created_at: datetime
    lease_token: str | None = None
    lease_expires_at: datetime | None = None
    worker_id: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    expires_at: datetime | None = None
    size_bytes: int | None = None
    row_count: int | None = None
    sha256: str | None = None
    progress_rows: int = 0
    failure_code: FailureCode | None = None
    failure_detail: str | None = None
    last_error_code: FailureCode | None = None
    last_error_detail: str | None = None
    # What the run that made the file read (domain/sensitivity.py); None: not on record.
    reads: FileReads | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def requester(self) -> Requester:
        return Requester(self.requested_by, self.workspace_id)

    @property
    def settled(self) -> bool:
        return self.status in SETTLED


def effective_status(record: ExportRecord, now: datetime) -> str:
    """The status every reader shows: `expired` once a succeeded file is past its expiry."""
    if (
        record.status is Status.SUCCEEDED
        and record.expires_at is not None
        and now >= record.expires_at
    ):
        return EXPIRED
    return record.status.value


def is_downloadable(record: ExportRecord, now: datetime) -> bool:
    return effective_status(record, now) == Status.SUCCEEDED.value


@dataclass(frozen=True)
class ExportFilter:
    """What a list of exports is narrowed to, beyond who may see it (which no filter widens).

    `since` and `until` bound `created_at` (since <= created_at < until); `search` is found
    anywhere in the subject's name, ignoring ASCII case; `id_prefix` starts the id;
    `failure_code` is the code a failed export settled with (`cancelled`: those cancelled)."""

    format: str | None = None
    subject_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None
    id_prefix: str | None = None
    failure_code: FailureCode | None = None

    def matches(self, record: ExportRecord) -> bool:
        """The same narrowing, on one record (what the store's query compiles)."""
        return (
            (self.format is None or record.format == self.format)
            and (self.subject_id is None or record.subject_id == self.subject_id)
            and (self.since is None or record.created_at >= self.since)
            and (self.until is None or record.created_at < self.until)
            and (
                self.search is None
                or _ascii_lower(self.search) in _ascii_lower(record.subject_name)
            )
            and (self.id_prefix is None or record.id.startswith(self.id_prefix))
            and (self.failure_code is None or record.failure_code == self.failure_code)
        )


def _ascii_lower(text: str) -> str:
    """Lower case as SQLite's and PostgreSQL's `lower()` agree on it: ASCII letters only."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


_SEPARATORS = re.compile(r"[-._]{2,}")


def _one_separator(run: re.Match[str]) -> str:
    """A run of separators as the one that says most: `_` (a template's), else `-`, else `.`
    (`Ventes été 2024 !_2026-01-05` is `Ventes-ete-2024_2026-01-05`, not `...2024-_2026...`)."""
    text = run.group()
    return "_" if "_" in text else "-" if "-" in text else "."


def safe_filename(name: str, extension: str) -> str:
    """A file name that is safe on every OS and in a Content-Disposition header: ASCII
    letters, digits and single separators, never starting or ending with one."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    stem = _SEPARATORS.sub(_one_separator, _UNSAFE.sub("-", ascii_name)).strip("-._")
    return f"{stem[:80].rstrip('-._') or 'export'}.{extension}"


def storage_key(workspace_id: str, export_id: str, filename: str) -> str:
    """`exports/<workspace>/<export id>/<file name>`: fixed at request time, never changed."""
    workspace = _UNSAFE.sub("-", workspace_id).strip("-") or "workspace"
    return f"exports/{workspace}/{export_id}/{filename}"


class EventKind(StrEnum):
    """What happened to an export; one event per transition of the lifecycle."""

    REQUESTED = "requested"  # -> queued
    CLAIMED = "claimed"  # queued -> running
    REDELIVERED = "redelivered"  # running -> running, a new attempt
    RELEASED = "released"  # running, handed back with a backoff after a transient failure
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"  # queued -> failed by the pre-run check
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class ExportEvent:
    export_id: str
    at: datetime
    kind: EventKind
    status: Status
    attempt: int
    worker_id: str | None = None
    code: FailureCode | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Result:
    """What a finished attempt produced: it describes the object stored at the key."""

    size_bytes: int
    row_count: int
    sha256: str
    # What the run read, as its sources' planners reported it before it (None: not known,
    # as for a file adopted from an attempt that died before settling).
    reads: FileReads | None = None
