"""Schedules: their timetables, runs and subscriptions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.domain.audit import AuditEvent
    from qexport.domain.exports import ExportRecord
    from qexport.domain.schedules import NewDelivery, Schedule
    from qexport.ports.exports import NewExport


class ScheduleStore(Protocol):
    """Schedules, and the one transaction that fires a due time."""

    def add_schedule(
        self,
        schedule: Schedule,
        *,
        max_per_workspace: int | None = None,
        audit: AuditEvent | None = None,
    ) -> Schedule:
        """Save a new schedule; InvalidRequestError, with nothing written, when its workspace
        already has `max_per_workspace` live schedules (counted in the inserting transaction)."""
        ...

    def get_schedule(self, schedule_id: str) -> Schedule | None: ...
    def list_schedules(self, workspace_id: str) -> list[Schedule]: ...
    def update_schedule(self, schedule: Schedule, *, audit: AuditEvent | None = None) -> bool:
        """Replace a live schedule's settings (and its next due time)."""
        ...

    def delete_schedule(
        self, schedule_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool: ...
    def pause_owned(self, workspace_id: str, owner: str) -> int:
        """Pause the enabled live schedules `owner` owns in the workspace; how many."""
        ...

    def due_schedules(self, now: datetime, *, limit: int = 100) -> list[Schedule]:
        """Enabled live schedules whose next due time has come, oldest first."""
        ...

    def advance(self, schedule_id: str, *, expected: datetime, next_due_at: datetime) -> bool:
        """Move the next due time on without firing; False if another scheduler moved it."""
        ...

    def fire(
        self,
        schedule_id: str,
        *,
        due_at: datetime,
        new: NewExport,
        deliveries: Sequence[NewDelivery],
        expected: datetime | None = None,
        next_due_at: datetime | None = None,
        max_unsettled: int | None = None,
        audit: AuditEvent | None = None,
    ) -> ExportRecord | None:
        """In ONE transaction: move the next due time from `expected` to `next_due_at` (when
        given), record the run (schedule, due_at), the export and its deliveries. None, with
        nothing written, when another scheduler already did it for this due time.
        TooManyRequestsError, with nothing written, when the owner already has
        `max_unsettled` exports queued or running."""
        ...

    def instance_secret(self, name: str, generate: Callable[[], str], *, now: datetime) -> str:
        """A secret shared by every process of this installation, generated on first use."""
        ...

    def list_runs(self, schedule_id: str, *, limit: int = 10) -> list[ScheduleRun]:
        """The schedule's latest fired due times (run now included), newest first."""
        ...

    # subscribers: members who asked for each run's export at their own address
    def subscribe(self, schedule_id: str, user_id: str, *, now: datetime) -> bool:
        """Add the user to the schedule's subscribers; False when they already were."""
        ...

    def unsubscribe(self, schedule_id: str, user_id: str) -> bool:
        """Take the user off the schedule's subscribers; False when they were not on it."""
        ...

    def subscribers(self, schedule_id: str) -> list[str]:
        """The user ids subscribed to the schedule, in the order they subscribed."""
        ...

    def subscriptions(self, workspace_id: str, user_id: str) -> frozenset[str]:
        """The ids of the workspace's live schedules the user is subscribed to."""
        ...


@dataclass(frozen=True)
class ScheduleRun:
    """One fired due time of a schedule and the export it made."""

    due_at: datetime
    export: ExportRecord
