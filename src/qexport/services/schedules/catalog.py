"""Schedules through the API and the CLI: validated like an export request (checks.py), read
by every member, written by editors and admins, and managed only by their owner or a workspace
admin (visibility.py); members subscribe in subscriptions.py.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from qexport.domain.accounts import Principal
from qexport.domain.audit import Action as AuditAction
from qexport.domain.audit import AuditEvent
from qexport.domain.audit import changes as audit_changes
from qexport.domain.commands import ScheduleDraft
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.failures import ConflictError, InvalidRequestError, NotFoundError, Problems
from qexport.domain.reports import SUBJECT_REPORT
from qexport.domain.schedules import Delivery, Recipient, Schedule, check_min_interval, next_due
from qexport.ports import AccountStore, Catalog, Clock, DeliveryStore, ExportQueue, ScheduleStore
from qexport.services.audit import actor_for, event, recipient_on_record
from qexport.services.deps import Deps
from qexport.services.exports import get_visible_export
from qexport.services.recipients import admit_recipients
from qexport.services.schedules.checks import (
    IN_ORDER,
    SUBJECT_FIELDS,
    SubjectCheck,
    changed_template,
    check_flags,
    check_subject,
    check_timetable,
    checked_template,
    ownership_fields,
    recipient_rules,
    refuse_any,
)
from qexport.services.schedules.tick import run_now
from qexport.services.schedules.visibility import (
    NO_SUCH_SCHEDULE,
    get_visible_schedule,
    require_manager,
    require_writer,
)


def check_new_schedule(
    deps: Deps,
    actor: Principal,
    draft: ScheduleDraft,
    *,
    match_name: bool = False,
    found: Sequence[InvalidRequestError] = (),
) -> Schedule:
    """The schedule a draft makes, checked as `create_schedule` checks it, nothing saved:
    every mistake at once (with those the caller `found` reading its form), in the form's
    order (subject, format, cron, time zone, recipients, missed runs, parameters)."""
    require_writer(actor)
    problems = Problems(found)
    accounts = deps.accounts
    policy = accounts.workspace_policy(actor.requester.workspace_id)
    subject = check_subject(
        deps.catalog, actor.requester, draft, problems, match_name=match_name, policy=policy
    )
    timetable = check_timetable(problems, accounts, actor.requester.workspace_id, draft)
    now = deps.clock.now()
    if timetable is not None:
        with problems.check():
            check_min_interval(*timetable, deps.settings.schedule_min_interval, now)
    recipients: tuple[Recipient, ...] = ()
    with problems.check():
        recipients = admit_recipients(draft.recipients, recipient_rules(deps, actor), "recipients")
    missed = check_flags(draft, problems)
    template: str | None = None
    if subject.subject is not None:
        with problems.check():
            template = checked_template(draft, subject.subject)
    refuse_any(problems, subject)
    assert subject.subject is not None
    assert timetable is not None
    cron, zone = timetable
    return Schedule(
        id=str(uuid.uuid4()),
        workspace_id=actor.requester.workspace_id,
        owner=actor.requester.user_id,
        subject_type=subject.subject.type,
        subject_id=subject.subject.id,
        format=subject.subject.format,
        parameters=subject.subject.parameters,
        cron=cron,
        timezone=zone,
        recipients=recipients,
        missed=missed,
        enabled=draft.enabled,
        next_due_at=next_due(cron, zone, now),
        created_at=now,
        options={"neutralize_formulas": draft.neutralize_formulas},
        filename_template=template,
    )


def create_schedule(
    deps: Deps,
    actor: Principal,
    draft: ScheduleDraft,
    *,
    match_name: bool = False,
    found: Sequence[InvalidRequestError] = (),
) -> Schedule:
    """Check and save a schedule owned by the caller (an editor or admin); with `match_name`
    the subject may also be named by its query name or report title. Webhooks are checked
    against the installation's egress policy (by default every internal address is
    refused)."""
    schedule = check_new_schedule(deps, actor, draft, match_name=match_name, found=found)
    return deps.schedules.add_schedule(
        schedule,
        max_per_workspace=deps.settings.max_schedules_per_workspace,
        audit=schedule_event(deps.clock, actor, AuditAction.SCHEDULE_CREATED, schedule),
    )


def draft_of(schedule: Schedule) -> ScheduleDraft:
    """A schedule's settings as a draft, for changing some of them."""
    is_report = schedule.subject_type == SUBJECT_REPORT
    return ScheduleDraft(
        format=schedule.format,
        cron=schedule.cron,
        query_id=None if is_report else schedule.subject_id,
        report_id=schedule.subject_id if is_report else None,
        parameters=dict(schedule.parameters),
        timezone=schedule.timezone,
        recipients=[r.to_json() for r in schedule.recipients],
        missed=schedule.missed.value,
        enabled=schedule.enabled,
        neutralize_formulas=bool(schedule.options.get("neutralize_formulas", True)),
        filename_template=schedule.filename_template,
    )


def changed_schedule(
    deps: Deps,
    actor: Principal,
    schedule_id: str,
    changes: Mapping[str, Any],
    *,
    found: Sequence[InvalidRequestError] = (),
) -> Schedule:
    """The schedule as `update_schedule` would save it, nothing saved; every mistake at once
    (with those the caller `found`), in the form's order. A body refused as it was read is
    refused so even for a schedule the caller cannot see."""
    store, accounts, clock = deps.catalog, deps.accounts, deps.clock
    try:
        current = get_visible_schedule(store, deps.schedules, actor, schedule_id)
    except NotFoundError:
        Problems(found).raise_any(IN_ORDER)
        raise
    require_manager(actor, current)
    given = _given(changes)
    draft = replace(draft_of(current), **given)
    problems = Problems(found)
    recipients: tuple[Recipient, ...] | None = current.recipients
    if "recipients" in given:
        recipients = _admitted(deps, actor, draft, problems)
    subject = SubjectCheck()
    checks_subject = SUBJECT_FIELDS & set(given) or recipients != current.recipients
    if checks_subject:
        policy = accounts.workspace_policy(current.workspace_id)
        subject = check_subject(
            store, actor.requester, draft, problems, match_name=False, policy=policy
        )
    timetable = check_timetable(problems, accounts, current.workspace_id, draft)
    moved = timetable is not None and timetable != (current.cron, current.timezone)
    if timetable is not None and moved:
        minimum = deps.settings.schedule_min_interval
        with problems.check():
            check_min_interval(*timetable, minimum, clock.now())
    missed = check_flags(draft, problems)
    template, named = changed_template(
        store, actor, current, draft, problems, subject, checked=bool(checks_subject), given=given
    )
    refuse_any(problems, named)
    assert timetable is not None
    assert recipients is not None
    updated = _with_subject(
        replace(current, filename_template=template), current, subject, recipients, actor
    )
    cron, zone = timetable
    updated = replace(
        updated,
        cron=cron,
        timezone=zone,
        missed=missed,
        enabled=draft.enabled,
        options={**current.options, "neutralize_formulas": draft.neutralize_formulas},
    )
    resumed = updated.enabled and not current.enabled
    if resumed or moved:
        updated = replace(updated, next_due_at=next_due(cron, zone, clock.now()))
    return updated


def _given(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes as a draft takes them (an unknown setting refused): naming a query
    replaces a report, and the other way round."""
    unknown = sorted(set(changes) - set(ScheduleDraft.__dataclass_fields__))
    if unknown:
        raise InvalidRequestError(f"unknown setting {unknown[0]!r}", field=unknown[0])
    given = dict(changes)
    if given.get("query_id") is not None and given.get("report_id") is None:
        given["report_id"] = None
    elif given.get("report_id") is not None and given.get("query_id") is None:
        given["query_id"] = None
    return given


def _admitted(
    deps: Deps, actor: Principal, draft: ScheduleDraft, problems: Problems
) -> tuple[Recipient, ...] | None:
    """The draft's recipients as the actor's role admits them; None, its mistake added to
    `problems`, when refused."""
    with problems.check():
        return admit_recipients(draft.recipients, recipient_rules(deps, actor), "recipients")
    return None


def _with_subject(
    updated: Schedule,
    current: Schedule,
    subject: SubjectCheck,
    recipients: tuple[Recipient, ...],
    actor: Principal,
) -> Schedule:
    """`updated` with the subject checked anew (if it was) and its recipients; whoever changes
    where the exports go or what they hold becomes the owner."""
    if subject.subject is None:
        return updated
    updated = replace(
        updated,
        subject_type=subject.subject.type,
        subject_id=subject.subject.id,
        format=subject.subject.format,
        parameters=subject.subject.parameters,
        recipients=recipients,
    )
    if ownership_fields(updated) != ownership_fields(current):
        updated = replace(updated, owner=actor.requester.user_id)
    return updated


def update_schedule(
    deps: Deps,
    actor: Principal,
    schedule_id: str,
    changes: Mapping[str, Any],
    *,
    found: Sequence[InvalidRequestError] = (),
) -> Schedule:
    """Change the given settings (ScheduleDraft field names) of a schedule the caller owns or
    administers.

    Exports run with the owner's rights, so whoever changes where they go or what they hold
    (recipients, subject, format, parameters) becomes the owner, and must be able to read
    the subject now (NotFoundError otherwise, as for reading it): nobody receives data
    through someone else's rights. Naming a query replaces a report and the other way
    round. Changing the cron or time zone, or resuming, moves the next run to the first due
    time after now: due times that passed while a schedule was paused never fire.
    """
    updated = changed_schedule(deps, actor, schedule_id, changes, found=found)
    current = deps.schedules.get_schedule(schedule_id)
    changed = schedule_event(
        deps.clock, actor, AuditAction.SCHEDULE_CHANGED, updated, before=current
    )
    if not deps.schedules.update_schedule(updated, audit=changed):  # deleted in the meantime
        raise NotFoundError(NO_SUCH_SCHEDULE)
    return updated


def set_enabled(deps: Deps, actor: Principal, schedule_id: str, *, enabled: bool) -> Schedule:
    """Pause (False) or resume (True) a schedule."""
    return update_schedule(deps, actor, schedule_id, {"enabled": enabled})


def delete_schedule(
    store: Catalog, schedules: ScheduleStore, clock: Clock, actor: Principal, schedule_id: str
) -> None:
    """Delete a schedule the caller owns or administers; exports it made stay as they are."""
    schedule = get_visible_schedule(store, schedules, actor, schedule_id)
    require_manager(actor, schedule)
    deleted = schedule_event(clock, actor, AuditAction.SCHEDULE_DELETED, schedule)
    if not schedules.delete_schedule(schedule.id, now=clock.now(), audit=deleted):
        raise NotFoundError(NO_SUCH_SCHEDULE)


def run_schedule(
    store: Catalog,
    schedules: ScheduleStore,
    clock: Clock,
    actor: Principal,
    schedule_id: str,
    *,
    max_unsettled: int | None = None,
    accounts: AccountStore | None = None,
) -> ExportRecord:
    """Fire a schedule now (paused or not): an export with the owner's rights and a waiting
    delivery per recipient (and, with `accounts`, per subscriber who may receive it), counted
    toward the owner's unsettled cap (TooManyRequestsError). Its timetable is left as it is."""
    schedule = get_visible_schedule(store, schedules, actor, schedule_id)
    require_manager(actor, schedule)
    try:
        return run_now(
            store,
            schedules,
            clock,
            schedule,
            max_unsettled=max_unsettled,
            accounts=accounts,
            actor=actor_for(actor.requester.user_id),
        )
    except RuntimeError as exc:
        raise ConflictError(str(exc)) from None


def list_visible_deliveries(
    store: ExportQueue,
    deliveries: DeliveryStore,
    requester: Requester,
    export_id: str,
    *,
    whole_workspace: bool = False,
) -> list[Delivery]:
    """The deliveries of an export the requester may see (NotFoundError otherwise)."""
    record = get_visible_export(store, requester, export_id, whole_workspace=whole_workspace)
    return deliveries.list_deliveries(record.id)


def _audited_fields(schedule: Schedule) -> dict[str, Any]:
    """What the trail keeps of a schedule: a webhook's host, never its URL (which may be its
    secret), and its parameters' names and a digest of their values, never the values."""
    return {
        "subject": [schedule.subject_type, schedule.subject_id],
        "format": schedule.format,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "owner": schedule.owner,
        "enabled": schedule.enabled,
        "parameters": {
            "names": sorted(schedule.parameters),
            "sha256": hashlib.sha256(
                json.dumps(schedule.parameters, sort_keys=True, default=str).encode()
            ).hexdigest(),
        },
        "recipients": [recipient_on_record(r) for r in schedule.recipients],
        "filename_template": schedule.filename_template,
    }


def schedule_event(
    clock: Clock,
    actor: Principal,
    action: AuditAction,
    schedule: Schedule,
    *,
    before: Schedule | None = None,
) -> AuditEvent:
    """A schedule created, changed (`before` it was) or deleted, by `actor`."""
    fields = _audited_fields(schedule)
    details = fields if before is None else audit_changes(_audited_fields(before), fields)
    if before is not None:
        details = {
            **details,
            **{k: fields[k] for k in details["changed"] if k not in ("parameters",)},
        }
    return event(
        clock,
        actor_for(actor.requester.user_id),
        action,
        workspace_id=schedule.workspace_id,
        target=("schedule", schedule.id),
        details=details,
    )
