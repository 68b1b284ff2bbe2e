"""Schedules on SQLAlchemy Core, and firing a due time in one idempotent transaction."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.audit import AuditEvent
from qexport.domain.exports import ExportRecord
from qexport.domain.schedules import (
    Missed,
    NewDelivery,
    Schedule,
    parse_recipient,
    schedule_cap_reached,
)
from qexport.ports import NewExport, ScheduleRun
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.exports.records import to_record
from qexport.store.exports.requests import finish_request_in, insert_export_in
from qexport.store.tables.exports import exports
from qexport.store.tables.schedules import (
    instance_secrets,
    schedule_runs,
    schedule_subscribers,
    schedules,
)

_LIVE = schedules.c.deleted_at.is_(None)


def _to_schedule(row: sa.Row[Any]) -> Schedule:
    return Schedule(
        id=row.id,
        workspace_id=row.workspace_id,
        owner=row.owner,
        subject_type=row.subject_type,
        subject_id=row.subject_id,
        format=row.format,
        parameters=row.parameters,
        options=row.options,
        cron=row.cron,
        timezone=row.timezone,
        recipients=tuple(parse_recipient(r) for r in row.recipients),
        missed=Missed(row.missed),
        enabled=row.enabled,
        next_due_at=row.next_due_at,
        created_at=row.created_at,
        deleted=row.deleted_at is not None,
        filename_template=row.filename_template,
    )


def _values(schedule: Schedule) -> dict[str, Any]:
    if schedule.next_due_at is None:
        raise ValueError("a stored schedule has a next due time")
    return {
        "owner": schedule.owner,
        "subject_type": schedule.subject_type,
        "subject_id": schedule.subject_id,
        "format": schedule.format,
        "parameters": schedule.parameters,
        "options": schedule.options,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "recipients": [r.to_json() for r in schedule.recipients],
        "missed": schedule.missed.value,
        "enabled": schedule.enabled,
        "next_due_at": schedule.next_due_at,
        "filename_template": schedule.filename_template,
    }


class SqlScheduleStore(OnEngine):
    """ScheduleStore over the metadata database's engine."""

    def __init__(self, engine: sa.Engine, *, notify: bool = True) -> None:
        super().__init__(engine)
        self._notify = notify and engine.dialect.name == "postgresql"

    def add_schedule(
        self,
        schedule: Schedule,
        *,
        max_per_workspace: int | None = None,
        audit: AuditEvent | None = None,
    ) -> Schedule:
        values = {
            "id": schedule.id,
            "workspace_id": schedule.workspace_id,
            "created_at": schedule.created_at,
            **_values(schedule),
        }
        with self._tx() as conn:
            if max_per_workspace is not None:
                self._check_count(conn, schedule.workspace_id, max_per_workspace)
            conn.execute(schedules.insert().values(**values))
            append_if(conn, audit)
        return schedule

    @staticmethod
    def _check_count(conn: sa.Connection, workspace_id: str, cap: int) -> None:
        """Count the workspace's live schedules in the inserting transaction; on PostgreSQL
        an advisory lock per workspace serialises concurrent creations (SQLite's writers
        already are)."""
        if conn.dialect.name == "postgresql":
            key = f"qexport.services.schedules/{workspace_id}"
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtextextended(key, 0))))
        stmt = sa.select(sa.func.count()).where(schedules.c.workspace_id == workspace_id, _LIVE)
        live = int(conn.execute(stmt).scalar_one())
        if live >= cap:
            raise schedule_cap_reached(live, cap)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        with self._read() as conn:
            row = conn.execute(sa.select(schedules).where(schedules.c.id == schedule_id)).first()
        return _to_schedule(row) if row else None

    def list_schedules(self, workspace_id: str) -> list[Schedule]:
        stmt = (
            sa.select(schedules)
            .where(schedules.c.workspace_id == workspace_id, _LIVE)
            .order_by(schedules.c.created_at, schedules.c.id)
        )
        with self._read() as conn:
            return [_to_schedule(r) for r in conn.execute(stmt)]

    def update_schedule(self, schedule: Schedule, *, audit: AuditEvent | None = None) -> bool:
        stmt = schedules.update().where(schedules.c.id == schedule.id, _LIVE)
        with self._tx() as conn:
            if conn.execute(stmt.values(**_values(schedule))).rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    def delete_schedule(
        self, schedule_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool:
        stmt = schedules.update().where(schedules.c.id == schedule_id, _LIVE)
        with self._tx() as conn:
            if conn.execute(stmt.values(deleted_at=now)).rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    def pause_owned(self, workspace_id: str, owner: str) -> int:
        stmt = schedules.update().where(
            schedules.c.workspace_id == workspace_id,
            schedules.c.owner == owner,
            schedules.c.enabled.is_(True),
            _LIVE,
        )
        with self._tx() as conn:
            return conn.execute(stmt.values(enabled=False)).rowcount

    def due_schedules(self, now: datetime, *, limit: int = 100) -> list[Schedule]:
        stmt = (
            sa.select(schedules)
            .where(schedules.c.next_due_at <= now, schedules.c.enabled.is_(True), _LIVE)
            .order_by(schedules.c.next_due_at, schedules.c.id)
            .limit(limit)
        )
        with self._read() as conn:
            return [_to_schedule(r) for r in conn.execute(stmt)]

    def advance(self, schedule_id: str, *, expected: datetime, next_due_at: datetime) -> bool:
        with self._tx() as conn:
            return self._advance_in(conn, schedule_id, expected, next_due_at)

    @staticmethod
    def _advance_in(
        conn: sa.Connection, schedule_id: str, expected: datetime, next_due_at: datetime
    ) -> bool:
        stmt = (
            schedules.update()
            .where(
                schedules.c.id == schedule_id,
                schedules.c.next_due_at == expected,
                schedules.c.enabled.is_(True),
                _LIVE,
            )
            .values(next_due_at=next_due_at)
        )
        return conn.execute(stmt).rowcount == 1

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
        try:
            with self._tx() as conn:
                # First the guarded move of the timetable: on PostgreSQL it locks the schedule,
                # so a concurrent scheduler waits here, then finds the guard no longer matches.
                if (
                    expected is not None
                    and next_due_at is not None
                    and not self._advance_in(conn, schedule_id, expected, next_due_at)
                ):
                    return None
                record = insert_export_in(conn, new, deliveries, notify=self._notify)
                # The run refers to the export; a second run of this due time is refused here
                # and takes the export and its deliveries with it as the transaction rolls back.
                conn.execute(
                    schedule_runs.insert().values(
                        schedule_id=schedule_id,
                        due_at=due_at,
                        export_id=new.id,
                        created_at=new.created_at,
                    )
                )
                finish_request_in(conn, new, max_unsettled=max_unsettled, audit=audit)
                return record
        except sa.exc.IntegrityError:
            return None  # the (schedule, due time) was fired already: nothing was written

    def instance_secret(self, name: str, generate: Callable[[], str], *, now: datetime) -> str:
        stmt = sa.select(instance_secrets.c.value).where(instance_secrets.c.name == name)
        with self._read() as conn:
            found = conn.execute(stmt).scalar()
        if found is not None:  # every call but the installation's first
            return str(found)
        with contextlib.suppress(sa.exc.IntegrityError), self._tx() as conn:
            found = conn.execute(stmt).scalar()
            if found is not None:
                return str(found)
            conn.execute(
                instance_secrets.insert().values(name=name, value=generate(), created_at=now)
            )
        with self._read() as conn:
            return str(conn.execute(stmt).scalar_one())

    def list_runs(self, schedule_id: str, *, limit: int = 10) -> list[ScheduleRun]:
        # The primary key (schedule_id, due_at) serves the filter and the order.
        stmt = (
            sa.select(exports, schedule_runs.c.due_at.label("run_due_at"))
            .join(schedule_runs, schedule_runs.c.export_id == exports.c.id)
            .where(schedule_runs.c.schedule_id == schedule_id)
            .order_by(schedule_runs.c.due_at.desc())
            .limit(limit)
        )
        with self._read() as conn:
            return [ScheduleRun(row.run_due_at, to_record(row)) for row in conn.execute(stmt)]

    def subscribe(self, schedule_id: str, user_id: str, *, now: datetime) -> bool:
        row = {"schedule_id": schedule_id, "user_id": user_id, "created_at": now}
        try:
            with self._tx() as conn:
                conn.execute(schedule_subscribers.insert().values(**row))
        except sa.exc.IntegrityError:
            return False  # subscribed already (or, racing a delete, no such user or schedule)
        return True

    def unsubscribe(self, schedule_id: str, user_id: str) -> bool:
        stmt = schedule_subscribers.delete().where(
            schedule_subscribers.c.schedule_id == schedule_id,
            schedule_subscribers.c.user_id == user_id,
        )
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def subscribers(self, schedule_id: str) -> list[str]:
        stmt = (
            sa.select(schedule_subscribers.c.user_id)
            .where(schedule_subscribers.c.schedule_id == schedule_id)
            .order_by(schedule_subscribers.c.created_at, schedule_subscribers.c.user_id)
        )
        with self._read() as conn:
            return [str(user_id) for user_id in conn.execute(stmt).scalars()]

    def subscriptions(self, workspace_id: str, user_id: str) -> frozenset[str]:
        stmt = (
            sa.select(schedules.c.id)
            .join(schedule_subscribers, schedule_subscribers.c.schedule_id == schedules.c.id)
            .where(
                schedule_subscribers.c.user_id == user_id,
                schedules.c.workspace_id == workspace_id,
                _LIVE,
            )
        )
        with self._read() as conn:
            return frozenset(str(found) for found in conn.execute(stmt).scalars())
