"""Schedules in memory; firing a due time writes the export and its deliveries through the
in-memory export queue, all or nothing, once per (schedule, due time)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from qexport.domain.audit import AuditEvent
from qexport.domain.exports import ExportRecord
from qexport.domain.schedules import NewDelivery, Schedule, schedule_cap_reached
from qexport.ports import NewExport, ScheduleRun
from tests.fakes.audit import InMemoryAuditLog
from tests.fakes.exports import InMemoryMetadataStore


def _checked(schedule: Schedule) -> Schedule:
    if schedule.next_due_at is None:
        raise ValueError("a stored schedule has a next due time")
    return replace(schedule, parameters=dict(schedule.parameters), options=dict(schedule.options))


class InMemoryScheduleStore:
    """The ScheduleStore contract on dicts; `fire` inserts into `exports`."""

    def __init__(self, exports: InMemoryMetadataStore) -> None:
        self._exports = exports
        self._schedules: dict[str, Schedule] = {}
        self._runs: dict[tuple[str, datetime], str] = {}  # (schedule, due time) -> export id
        self._secrets: dict[str, str] = {}
        # (schedule, user) -> when they subscribed; a dict keeps the order of subscribing.
        self._subscribers: dict[tuple[str, str], datetime] = {}
        self._lock = threading.RLock()
        self.audit_log = InMemoryAuditLog()  # the container's, when it builds one

    def _add_schedule_unaudited(
        self, schedule: Schedule, *, max_per_workspace: int | None = None
    ) -> Schedule:
        stored = replace(_checked(schedule), deleted=False)
        with self._lock:
            if schedule.id in self._schedules:
                raise ValueError("duplicate schedule id")
            if max_per_workspace is not None:
                live = len(self._live(schedule.workspace_id))
                if live >= max_per_workspace:
                    raise schedule_cap_reached(live, max_per_workspace)
            self._schedules[schedule.id] = stored
        return schedule

    def _live(self, workspace_id: str) -> list[Schedule]:
        return [
            s for s in self._schedules.values() if s.workspace_id == workspace_id and not s.deleted
        ]

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        with self._lock:
            return self._schedules.get(schedule_id)

    def list_schedules(self, workspace_id: str) -> list[Schedule]:
        with self._lock:
            live = self._live(workspace_id)
        return sorted(live, key=lambda s: (s.created_at, s.id))

    def _update_schedule_unaudited(self, schedule: Schedule) -> bool:
        new = _checked(schedule)
        with self._lock:
            current = self._schedules.get(schedule.id)
            if current is None or current.deleted:
                return False
            # Settings only: the workspace, creation time and deletion stay as stored.
            self._schedules[schedule.id] = replace(
                new,
                workspace_id=current.workspace_id,
                created_at=current.created_at,
                deleted=False,
            )
            return True

    def _delete_schedule_unaudited(self, schedule_id: str, *, now: datetime) -> bool:
        with self._lock:
            current = self._schedules.get(schedule_id)
            if current is None or current.deleted:
                return False
            self._schedules[schedule_id] = replace(current, deleted=True)
            return True

    def pause_owned(self, workspace_id: str, owner: str) -> int:
        with self._lock:
            owned = [s for s in self._live(workspace_id) if s.owner == owner and s.enabled]
            for s in owned:
                self._schedules[s.id] = replace(s, enabled=False)
            return len(owned)

    def due_schedules(self, now: datetime, *, limit: int = 100) -> list[Schedule]:
        with self._lock:
            due = [
                s
                for s in self._schedules.values()
                if s.enabled
                and not s.deleted
                and s.next_due_at is not None
                and s.next_due_at <= now
            ]
        due.sort(key=lambda s: (s.next_due_at, s.id))
        return due[:limit]

    def _may_advance(self, schedule_id: str, expected: datetime) -> bool:
        current = self._schedules.get(schedule_id)
        return (
            current is not None
            and current.enabled
            and not current.deleted
            and current.next_due_at == expected
        )

    def advance(self, schedule_id: str, *, expected: datetime, next_due_at: datetime) -> bool:
        with self._lock:
            if not self._may_advance(schedule_id, expected):
                return False
            current = self._schedules[schedule_id]
            self._schedules[schedule_id] = replace(current, next_due_at=next_due_at)
            return True

    def _fire_unaudited(
        self,
        schedule_id: str,
        *,
        due_at: datetime,
        new: NewExport,
        deliveries: Sequence[NewDelivery],
        expected: datetime | None = None,
        next_due_at: datetime | None = None,
        max_unsettled: int | None = None,
    ) -> ExportRecord | None:
        with self._lock:
            move = (
                (expected, next_due_at)
                if expected is not None and next_due_at is not None
                else None
            )
            if move is not None and not self._may_advance(schedule_id, move[0]):
                return None
            if schedule_id not in self._schedules or (schedule_id, due_at) in self._runs:
                return None  # the run refers to a schedule; its due time fires once
            try:
                # Checks the cap before it writes anything (TooManyRequestsError goes out).
                record = self._exports.insert_export(new, deliveries, max_unsettled=max_unsettled)
            except ValueError:
                return None  # a taken export id or key: the database refuses it the same way
            self._runs[(schedule_id, due_at)] = new.id
            if move is not None:
                current = self._schedules[schedule_id]
                self._schedules[schedule_id] = replace(current, next_due_at=move[1])
            return record

    def instance_secret(self, name: str, generate: Callable[[], str], *, now: datetime) -> str:
        with self._lock:
            if name not in self._secrets:
                self._secrets[name] = generate()
            return self._secrets[name]

    def list_runs(self, schedule_id: str, *, limit: int = 10) -> list[ScheduleRun]:
        with self._lock:
            runs = sorted(
                (
                    (due, export_id)
                    for (sid, due), export_id in self._runs.items()
                    if sid == schedule_id
                ),
                reverse=True,
            )[:limit]
        found = [(due, self._exports.get_export(export_id)) for due, export_id in runs]
        return [ScheduleRun(due, record) for due, record in found if record is not None]

    def subscribe(self, schedule_id: str, user_id: str, *, now: datetime) -> bool:
        with self._lock:
            key = (schedule_id, user_id)
            if schedule_id not in self._schedules or key in self._subscribers:
                return False  # the database refuses both (a foreign key, the primary key)
            self._subscribers[key] = now
            return True

    def unsubscribe(self, schedule_id: str, user_id: str) -> bool:
        with self._lock:
            return self._subscribers.pop((schedule_id, user_id), None) is not None

    def subscribers(self, schedule_id: str) -> list[str]:
        with self._lock:
            found = [
                (at, user) for (sid, user), at in self._subscribers.items() if sid == schedule_id
            ]
        return [user for _, user in sorted(found)]

    def subscriptions(self, workspace_id: str, user_id: str) -> frozenset[str]:
        with self._lock:
            live = {s.id for s in self._live(workspace_id)}
            return frozenset(
                sid for sid, user in self._subscribers if user == user_id and sid in live
            )

    # the audited writes: each appends its `audit` event when the change is made
    def add_schedule(
        self,
        schedule: Schedule,
        *,
        max_per_workspace: int | None = None,
        audit: AuditEvent | None = None,
    ) -> Schedule:
        done = self._add_schedule_unaudited(schedule, max_per_workspace=max_per_workspace)
        self.audit_log.append(audit)
        return done

    def update_schedule(self, schedule: Schedule, *, audit: AuditEvent | None = None) -> bool:
        done = self._update_schedule_unaudited(schedule)
        if done:
            self.audit_log.append(audit)
        return done

    def delete_schedule(
        self, schedule_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool:
        done = self._delete_schedule_unaudited(schedule_id, now=now)
        if done:
            self.audit_log.append(audit)
        return done

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
        done = self._fire_unaudited(
            schedule_id,
            due_at=due_at,
            new=new,
            deliveries=deliveries,
            expected=expected,
            next_due_at=next_due_at,
            max_unsettled=max_unsettled,
        )
        if done is not None:
            self.audit_log.append(audit)
        return done
