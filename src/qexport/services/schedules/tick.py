"""Firing schedules: one scheduler tick, and "run now".

A fired due time becomes an export and one waiting delivery per recipient, written in one
transaction keyed by (schedule, due time). Access is not checked here: the export runs with
the owner's rights and the worker's pre-run check refuses it (`access_lost`) if the owner
may no longer read the subject, so the recipients hear about it instead of nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import structlog

from qexport.domain.audit import SCHEDULER, AuditEvent
from qexport.domain.audit import Actor as AuditActor
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.failures import TooManyRequestsError
from qexport.domain.queries import Query
from qexport.domain.reports import SUBJECT_REPORT, Report
from qexport.domain.schedules import NewDelivery, Schedule, Tick, plan_tick
from qexport.ports import AccountStore, Catalog, Clock, NewExport, ScheduleStore
from qexport.services.audit import export_requested
from qexport.services.requests import new_deliveries
from qexport.services.subjects import query_subject, report_subject
from qexport.services.subscribers import subscriber_deliveries

log = structlog.get_logger()


def schedule_export(store: Catalog, schedule: Schedule, now: datetime) -> NewExport:
    """The export a schedule asks for, with its owner as the requester (of a subject deleted
    since: named so, and failed by the worker as any export of a missing subject is)."""
    if schedule.subject_type == SUBJECT_REPORT:
        report = store.get_report(schedule.subject_id) or Report(
            id=schedule.subject_id, workspace_id=schedule.workspace_id, title="deleted report"
        )
        subject = report_subject(report, {})
    else:
        query = store.get_query(schedule.subject_id) or Query(
            id=schedule.subject_id,
            workspace_id=schedule.workspace_id,
            name="deleted query",
            sql="",
            source="",
        )
        subject = query_subject(query)
    return subject.new_export(
        Requester(schedule.owner, schedule.workspace_id),
        schedule.format,
        dict(schedule.parameters),
        neutralize_formulas=bool(schedule.options.get("neutralize_formulas", True)),
        now=now,
        filename_template=schedule.filename_template,
    )


def schedule_deliveries(
    store: Catalog, schedules: ScheduleStore, schedule: Schedule, accounts: AccountStore | None
) -> list[NewDelivery]:
    """Who hears about one run: the owner's recipients, then (with `accounts` to check them
    against) the subscribers who may receive it now (services/subscribers.py)."""
    found = new_deliveries(schedule.recipients, schedule.id)
    if accounts is not None:
        found += subscriber_deliveries(store, accounts, schedules, schedule)
    return found


def run_now(
    store: Catalog,
    schedules: ScheduleStore,
    clock: Clock,
    schedule: Schedule,
    *,
    max_unsettled: int | None = None,
    accounts: AccountStore | None = None,
    actor: AuditActor | None = None,
) -> ExportRecord:
    """Fire a schedule at once, outside its timetable (which is left as it is); counted
    toward the owner's unsettled cap like any request (TooManyRequestsError). Subscribers
    hear about it too when `accounts` is given."""
    now = clock.now()
    new = schedule_export(store, schedule, now)
    deliveries = schedule_deliveries(store, schedules, schedule, accounts)
    record = schedules.fire(
        schedule.id,
        due_at=now,
        new=new,
        deliveries=deliveries,
        max_unsettled=max_unsettled,
        audit=fired_event(clock, new, schedule, len(deliveries), actor=actor),
    )
    if record is None:  # only if the very same instant was fired already
        raise RuntimeError("the schedule was fired at this instant already; try again")
    return record


@dataclass(frozen=True)
class FiredRun:
    schedule_id: str
    due_at: datetime
    export: ExportRecord


@dataclass(frozen=True)
class TickResult:
    runs: list[FiredRun]
    skipped: int  # schedules whose missed due times were skipped

    @property
    def fired(self) -> list[ExportRecord]:
        return [run.export for run in self.runs]


def tick(
    store: Catalog,
    schedules: ScheduleStore,
    clock: Clock,
    *,
    grace: timedelta,
    limit: int = 100,
    max_unsettled: int | None = None,
    accounts: AccountStore | None = None,
) -> TickResult:
    """Fire every due schedule at most once. Safe to run in any number of processes at once:
    a due time that another scheduler fired first is left alone. A due time whose owner is
    at the unsettled cap stays due, and fires at a later pass (or is missed past `grace`).
    With `accounts`, each run's subscribers who may receive it hear about it too."""
    now = clock.now()
    runs: list[FiredRun] = []
    skipped = 0
    for schedule in schedules.due_schedules(now, limit=limit):
        assert schedule.next_due_at is not None  # stored schedules always have one
        plan = plan_tick(
            cron=schedule.cron,
            timezone=schedule.timezone,
            missed=schedule.missed,
            next_due_at=schedule.next_due_at,
            now=now,
            grace=grace,
        )
        if plan is None:
            continue
        if plan.due_at is None:
            if _skip(schedules, schedule, plan):
                skipped += 1
            continue
        deliveries = schedule_deliveries(store, schedules, schedule, accounts)
        new = schedule_export(store, schedule, now)
        try:
            record = schedules.fire(
                schedule.id,
                due_at=plan.due_at,
                new=new,
                deliveries=deliveries,
                expected=schedule.next_due_at,
                next_due_at=plan.next_due_at,
                max_unsettled=max_unsettled,
                audit=fired_event(clock, new, schedule, len(deliveries)),
            )
        except TooManyRequestsError:
            log.info("schedule_deferred", schedule_id=schedule.id, reason="unsettled_cap")
            continue
        if record is not None:
            runs.append(FiredRun(schedule.id, plan.due_at, record))
            log.info(
                "schedule_fired",
                schedule_id=schedule.id,
                export_id=record.id,
                due_at=plan.due_at.isoformat(),
                deliveries=len(deliveries),
            )
    return TickResult(runs, skipped)


def _skip(schedules: ScheduleStore, schedule: Schedule, plan: Tick) -> bool:
    """Move a schedule past the due times it missed (nothing fires): whether this scheduler
    did, and not another first."""
    assert schedule.next_due_at is not None  # stored schedules always have one
    if not schedules.advance(
        schedule.id, expected=schedule.next_due_at, next_due_at=plan.next_due_at
    ):
        return False
    log.info(
        "schedule_skipped",
        schedule_id=schedule.id,
        missed_from=schedule.next_due_at.isoformat(),
        next_due_at=plan.next_due_at.isoformat(),
    )
    return True


def fired_event(
    clock: Clock,
    new: NewExport,
    schedule: Schedule,
    recipients: int,
    *,
    actor: AuditActor | None = None,
) -> AuditEvent:
    """A schedule's export requested: by the scheduler, or by whoever said "run now"."""
    requested = export_requested(clock, new, recipients, actor=actor or SCHEDULER)
    return replace(requested, details={**requested.details, "schedule_id": schedule.id})
