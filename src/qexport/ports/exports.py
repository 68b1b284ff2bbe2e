"""The export queue: exports are their own queue (requests, reads and the lifecycle's
transitions), and the lease an attempt holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from qexport.domain.accounts import Standing
    from qexport.domain.audit import AuditEvent
    from qexport.domain.exports import (
        ExportEvent,
        ExportFilter,
        ExportRecord,
        Result,
        Status,
    )
    from qexport.domain.failures import FailureCode
    from qexport.domain.queries import Query
    from qexport.domain.reports import ReportSubject
    from qexport.domain.schedules import NewDelivery


@dataclass(frozen=True)
class NewExport:
    """Everything fixed at request time, including the storage key."""

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
    created_at: datetime


@dataclass(frozen=True)
class ClaimResult:
    """What `claim_next` did: claimed one export, refused one before it ran, or neither."""

    claimed: ExportRecord | None = None
    refused: ExportRecord | None = None
    # The claimed export's subject, its query (or its report with the sections' queries), as
    # read in the claiming transaction (None: not found).
    subject: Query | ReportSubject | None = None


# Decides whether a queued export may start, from its query (None: missing) and its
# requester's standing in the workspace: None to claim it, or the reason it may not.
Admission = Callable[["ExportRecord", "Query | ReportSubject | None", "Standing"], "str | None"]


class ExportQueue(Protocol):
    """Exports, which are also the queue: requests, reads and the lifecycle's transitions.

    Every transition is one conditional write; a method returns False (or None)
    when its guard matched no row, and never changes a settled record.
    """

    # requests and reads
    def insert_export(
        self,
        new: NewExport,
        deliveries: Sequence[NewDelivery] = (),
        *,
        max_unsettled: int | None = None,
        audit: AuditEvent | None = None,
    ) -> ExportRecord:
        """Record and queue the export, with its deliveries (and its `audit` event), in one
        transaction.

        With `max_unsettled`, a requester who already has that many exports queued or
        running is refused (TooManyRequestsError) in the same transaction: concurrent
        requests cannot overshoot the cap.
        """
        ...

    def get_export(self, export_id: str) -> ExportRecord | None: ...
    def get_export_with_query(self, export_id: str) -> tuple[ExportRecord, Query | None] | None:
        """The export with the query it was made from, as `Catalog.get_query` reads it (None
        for a report's export, or a query that is not there), read together."""
        ...

    def list_exports(
        self,
        *,
        workspace_id: str,
        requested_by: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
        expired_at: tuple[bool, datetime] | None = None,
        after: tuple[datetime, str] | None = None,
        narrow: ExportFilter | None = None,
    ) -> list[ExportRecord]:
        """Newest first; `before` (created_at, id) continues after that export, `after`
        gives the `limit` exports just newer than that one (still newest first).

        `expired_at` (expired, now) keeps only exports whose expiry has (True) or has not
        (False, incl. those without one) passed at `now`; `narrow` keeps those it matches.
        """
        ...

    def has_unsettled(self) -> bool: ...
    def list_events(self, export_id: str) -> list[ExportEvent]:
        """Every transition of the export, oldest first (written with the transition)."""
        ...

    # the queue
    def claim_next(
        self,
        *,
        worker_id: str,
        now: datetime,
        lease_seconds: float,
        admit: Admission,
        max_running_per_user: int | None = None,
    ) -> ClaimResult:
        """Claim the oldest claimable export of the requester with the fewest running ones
        (domain/fairness.py; none of a requester already running `max_running_per_user`), in
        one transaction that locks it.

        A queued export is first shown to `admit` with its query (None if missing) and its
        requester's standing; if
        refused it settles queued -> failed/access_lost instead. Concurrent callers never
        take the same export (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: one writer).
        """
        ...

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool: ...
    def record_progress(self, export_id: str, token: str, *, rows: int) -> bool:
        """Rows written so far, fenced by the lease token, the lease itself untouched and no
        event written; False when the lease is lost (the same as a heartbeat's)."""
        ...

    def release_with_backoff(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        delay_seconds: float,
        code: FailureCode,
        detail: str,
    ) -> bool: ...
    def succeed(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        result: Result,
        expires_at: datetime,
        quota_bytes: int | None = None,
    ) -> bool:
        """running -> succeeded under the lease. With `quota_bytes`: LimitExceededError,
        nothing written, when the file would take its workspace's unexpired succeeded
        exports past that many bytes (summed in the settling transaction)."""
        ...

    def fail(
        self, export_id: str, token: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool: ...
    def cancel(self, export_id: str, *, now: datetime, audit: AuditEvent | None = None) -> bool: ...


class AttemptLease(Protocol):
    """What a producer sees of the attempt's lease: stop when it is lost, report progress."""

    progress_rows: int

    def check(self) -> None:
        """Raise when the lease is lost or the worker is shutting down."""
        ...

    def on_stop(self, hook: Callable[[], None]) -> None:
        """Call `hook` (from any thread) when the attempt must stop."""
        ...
