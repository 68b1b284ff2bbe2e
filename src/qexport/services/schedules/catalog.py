"""Schedules through the API and the CLI: validated like an export request, read by every
member, written by editors and admins, and managed only by their owner or a workspace admin.

A schedule the caller may not see (another workspace, deleted, or of a subject they cannot
read and do not own) answers exactly like a missing one (NotFoundError); one they see but may
not manage is ForbiddenError.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from qexport.domain.accounts import Principal, Role, at_least
from qexport.domain.audit import Action as AuditAction
from qexport.domain.audit import AuditEvent
from qexport.domain.audit import changes as audit_changes
from qexport.domain.commands import ScheduleDraft, SubjectRef
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.failures import (
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    Problems,
    in_field_order,
)
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import can_read, check_filename_template, to_json_value
from qexport.domain.reports import SUBJECT_REPORT, can_read_report
from qexport.domain.schedules import (
    Delivery,
    Missed,
    Recipient,
    Schedule,
    check_cron,
    check_min_interval,
    check_timezone,
    next_due,
)
from qexport.ports import (
    AccountStore,
    Catalog,
    Clock,
    DeliveryStore,
    ExportQueue,
    ScheduleStore,
    UserStore,
    WorkspaceStore,
)
from qexport.services.audit import actor_for, event, recipient_on_record
from qexport.services.deps import Deps
from qexport.services.exports import get_visible_export
from qexport.services.recipients import RecipientRules, admit_recipients, rules_for
from qexport.services.schedules.tick import run_now
from qexport.services.subjects import (
    check_allowed_format,
    check_any_format,
    check_kind_format,
    readable_subject,
)
from qexport.services.subscribers import PER_PERSON, Refusal, reading_refusal

MAX_ID_CHARS = 64  # schedule ids are UUIDs; anything much longer is not worth a lookup
NO_SUCH_SCHEDULE = "no schedule with this id that you can see"
# Changing any of these re-checks the subject and binds the parameters again.
_SUBJECT_FIELDS = frozenset({"query_id", "report_id", "format", "parameters"})
_TIMETABLE_FIELDS = frozenset({"cron", "timezone"})


@dataclass(frozen=True)
class _Subject:
    type: str
    id: str
    format: str
    parameters: dict[str, Any]
    names: tuple[str, ...] = ()  # every parameter a file name template may use


# ---------------------------------------------------------------- checks


def _writer(actor: Principal) -> None:
    if not at_least(actor.role, Role.EDITOR):
        raise ForbiddenError("only editors and admins may create schedules")


def may_manage(actor: Principal, schedule: Schedule) -> bool:
    """Whether the actor may change, pause, resume, delete or run the schedule."""
    return schedule.owner == actor.requester.user_id or actor.sees_workspace


def _manager(actor: Principal, schedule: Schedule) -> None:
    if not may_manage(actor, schedule):
        raise ForbiddenError(
            "only the schedule's owner or a workspace admin may change, pause, resume, delete"
            " or run it"
        )


# The order a schedule's problems are told in: the schedule form's, then the API's extras.
SCHEDULE_FIELDS = (
    "query_id",
    "report_id",
    "format",
    "cron",
    "timezone",
    "recipients",
    "missed",
    "parameters",
    "filename_template",
    "enabled",
    "options",
    "schedules",
)
_IN_ORDER = in_field_order(SCHEDULE_FIELDS)


@dataclass(frozen=True)
class _SubjectCheck:
    """The subject checked (None when refused), or why it is not found."""

    subject: _Subject | None = None
    missing: NotFoundError | None = None


def _check_subject(
    store: Catalog,
    requester: Requester,
    draft: ScheduleDraft,
    problems: Problems,
    *,
    match_name: bool,
    policy: WorkspacePolicy | None = None,
) -> _SubjectCheck:
    """The subject the requester may read, the format valid for it and the parameters bound
    exactly as an export request binds them; each mistake added to `problems`. A subject the
    requester cannot read is `missing` (NotFoundError, unless the request is refused anyway)."""
    with problems.check():
        check_allowed_format(policy, draft.format)
    if (draft.query_id is None) == (draft.report_id is None):
        problems.add(
            InvalidRequestError("give exactly one of query_id and report_id", field="query_id")
        )
        with problems.check():
            check_any_format(draft.format)
        return _SubjectCheck()
    ref = (
        SubjectRef("report", draft.report_id, by_name=match_name)
        if draft.report_id is not None
        else SubjectRef("query", str(draft.query_id), by_name=match_name)
    )
    try:
        with problems.check():
            check_kind_format(ref.kind, draft.format)
        subject = readable_subject(store, requester, ref)
    except NotFoundError as exc:
        return _SubjectCheck(missing=exc)
    why = None if policy is None else subject.sensitivity(policy)
    if why is not None:
        problems.add(_sensitive(why, f"{ref.kind}_id"))
    with problems.check():
        values = subject.bind(draft.parameters)
        return _SubjectCheck(
            _Subject(
                subject.kind,
                subject.id,
                draft.format,
                {k: to_json_value(v) for k, v in values.items()},
                subject.template_names(values),
            )
        )
    return _SubjectCheck()


def _sensitive(why: str, field: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{why}: its exports each need an admin's approval, so no schedule may export it",
        field=field,
    )


def _filename_template(draft: ScheduleDraft, subject: _Subject) -> str | None:
    """The draft's template, checked against its subject's parameters; blank means none."""
    given = draft.filename_template
    if given is None or (isinstance(given, str) and not given.strip()):
        return None
    if not isinstance(given, str):
        raise InvalidRequestError("filename_template must be text", field="filename_template")
    return check_filename_template(given, subject.names)


def _changed_template(
    store: Catalog,
    actor: Principal,
    current: Schedule,
    draft: ScheduleDraft,
    problems: Problems,
    subject: _SubjectCheck,
    *,
    checked: bool,
    given: Mapping[str, Any],
) -> tuple[str | None, _SubjectCheck]:
    """A changed schedule's file name template, checked against the subject it will have (a
    subject's template may name parameters that another subject lacks), and that subject."""
    named = subject
    if "filename_template" in given and not checked:
        named = _check_subject(store, actor.requester, draft, problems, match_name=False)
    if ("filename_template" not in given and not checked) or named.subject is None:
        return current.filename_template, named
    with problems.check():
        return _filename_template(draft, named.subject), named
    return current.filename_template, named


def _ownership_fields(schedule: Schedule) -> tuple[Any, ...]:
    """What a change of makes the changer the owner: where the exports go and what they hold."""
    return (
        schedule.subject_type,
        schedule.subject_id,
        schedule.format,
        schedule.parameters,
        schedule.recipients,
    )


def _reads_subject(store: Catalog, requester: Requester, kind: str, subject_id: str) -> bool:
    if kind == SUBJECT_REPORT:
        return can_read_report(requester, store.get_report(subject_id))
    return can_read(requester, store.get_query(subject_id))


def _check_flags(draft: ScheduleDraft, problems: Problems) -> Missed:
    """Missed runs, enabled and the formula option; each mistake added to `problems`."""
    missed = Missed.ONCE
    try:
        missed = Missed(draft.missed)
    except ValueError:
        problems.add(
            InvalidRequestError(
                f"unknown choice {str(draft.missed)[:20]!r} for missed runs; choose once or skip",
                field="missed",
            )
        )
    if not isinstance(draft.enabled, bool):
        problems.add(InvalidRequestError("enabled must be true or false", field="enabled"))
    if not isinstance(draft.neutralize_formulas, bool):
        problems.add(
            InvalidRequestError(
                "neutralize_formulas must be true or false", field="options.neutralize_formulas"
            )
        )
    return missed


def _timetable(
    problems: Problems,
    accounts: WorkspaceStore,
    workspace_id: str,
    draft: ScheduleDraft,
) -> tuple[str, str] | None:
    """The cron and time zone, checked (each mistake added to `problems`); None if refused."""
    cron = zone = None
    with problems.check():
        cron = check_cron(draft.cron)
    with problems.check():
        zone = _timezone(accounts, workspace_id, draft.timezone)
    return (cron, zone) if cron is not None and zone is not None else None


def _refuse_any(problems: Problems, subject: _SubjectCheck) -> None:
    """Every problem at once, in the form's order; or, with none, a subject not found."""
    problems.raise_any(_IN_ORDER)
    if subject.missing is not None:
        raise subject.missing


def _rules(deps: Deps, actor: Principal) -> RecipientRules:
    requester = actor.requester
    egress = deps.settings.egress_policy()
    return rules_for(deps.accounts, requester.workspace_id, requester.user_id, actor.role, egress)


def sees_recipients(actor: Principal, schedule: Schedule) -> bool:
    """Whether the actor sees the recipients in full (webhook URLs hold the receiver's secret,
    addresses are personal): its owner and admins; others see them masked."""
    return may_manage(actor, schedule)


def _timezone(accounts: WorkspaceStore, workspace_id: str, given: str | None) -> str:
    zone = given if given is not None else accounts.workspace_timezone(workspace_id)
    check_timezone(zone)
    return zone


# ---------------------------------------------------------------- use cases


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
    _writer(actor)
    problems = Problems(found)
    accounts = deps.accounts
    policy = accounts.workspace_policy(actor.requester.workspace_id)
    subject = _check_subject(
        deps.catalog, actor.requester, draft, problems, match_name=match_name, policy=policy
    )
    timetable = _timetable(problems, accounts, actor.requester.workspace_id, draft)
    now = deps.clock.now()
    if timetable is not None:
        with problems.check():
            check_min_interval(*timetable, deps.settings.schedule_min_interval, now)
    recipients: tuple[Recipient, ...] = ()
    with problems.check():
        recipients = admit_recipients(draft.recipients, _rules(deps, actor), "recipients")
    missed = _check_flags(draft, problems)
    template: str | None = None
    if subject.subject is not None:
        with problems.check():
            template = _filename_template(draft, subject.subject)
    _refuse_any(problems, subject)
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


def get_visible_schedule(
    store: Catalog, schedules: ScheduleStore, actor: Principal, schedule_id: str
) -> Schedule:
    """A live schedule of the caller's workspace that they own, administer or whose subject
    they may read; NotFoundError otherwise."""
    schedule = schedules.get_schedule(schedule_id) if len(schedule_id) <= MAX_ID_CHARS else None
    if schedule is None or not _sees(store, actor, schedule):
        raise NotFoundError(NO_SUCH_SCHEDULE)
    return schedule


def _sees(store: Catalog, actor: Principal, schedule: Schedule) -> bool:
    if schedule.deleted or schedule.workspace_id != actor.requester.workspace_id:
        return False
    if actor.sees_workspace or schedule.owner == actor.requester.user_id:
        return True
    return _reads_subject(store, actor.requester, schedule.subject_type, schedule.subject_id)


def list_visible_schedules(
    store: Catalog, schedules: ScheduleStore, actor: Principal
) -> list[Schedule]:
    """The workspace's live schedules the caller may see, oldest first."""
    return [
        s for s in schedules.list_schedules(actor.requester.workspace_id) if _sees(store, actor, s)
    ]


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
        Problems(found).raise_any(_IN_ORDER)
        raise
    _manager(actor, current)
    unknown = sorted(set(changes) - set(ScheduleDraft.__dataclass_fields__))
    if unknown:
        raise InvalidRequestError(f"unknown setting {unknown[0]!r}", field=unknown[0])
    given = dict(changes)
    if given.get("query_id") is not None and given.get("report_id") is None:
        given["report_id"] = None
    elif given.get("report_id") is not None and given.get("query_id") is None:
        given["query_id"] = None
    draft = replace(draft_of(current), **given)
    problems = Problems(found)
    recipients: tuple[Recipient, ...] | None = current.recipients
    if "recipients" in given:
        recipients = None
        with problems.check():
            recipients = admit_recipients(draft.recipients, _rules(deps, actor), "recipients")
    subject = _SubjectCheck()
    checks_subject = _SUBJECT_FIELDS & set(given) or recipients != current.recipients
    if checks_subject:
        policy = accounts.workspace_policy(current.workspace_id)
        subject = _check_subject(
            store, actor.requester, draft, problems, match_name=False, policy=policy
        )
    timetable = _timetable(problems, accounts, current.workspace_id, draft)
    moved = timetable is not None and timetable != (current.cron, current.timezone)
    if timetable is not None and moved:
        minimum = deps.settings.schedule_min_interval
        with problems.check():
            check_min_interval(*timetable, minimum, clock.now())
    missed = _check_flags(draft, problems)
    template, named = _changed_template(
        store, actor, current, draft, problems, subject, checked=bool(checks_subject), given=given
    )
    _refuse_any(problems, named)
    assert timetable is not None
    assert recipients is not None
    updated = replace(current, filename_template=template)
    if subject.subject is not None:
        updated = replace(
            updated,
            subject_type=subject.subject.type,
            subject_id=subject.subject.id,
            format=subject.subject.format,
            parameters=subject.subject.parameters,
            recipients=recipients,
        )
        if _ownership_fields(updated) != _ownership_fields(current):
            updated = replace(updated, owner=actor.requester.user_id)
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
    _manager(actor, schedule)
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
    _manager(actor, schedule)
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


def require_admin(actor: Principal) -> None:
    if not actor.sees_workspace:
        raise ForbiddenError("only workspace admins may read the webhook signing key")


# ---------------------------------------------------------------- subscribers


@dataclass(frozen=True)
class Subscription:
    """The caller's subscription to a schedule: where each run's export is mailed."""

    schedule_id: str
    subscribed: bool
    email: str | None


def subscription_refusal(
    store: Catalog, accounts: UserStore, actor: Principal, schedule: Schedule
) -> Refusal | None:
    """Why the caller may not subscribe to the (visible) schedule, or None."""
    if accounts.get_user(actor.requester.user_id) is None:
        return Refusal(
            "no email address is known for you: only members with an account may subscribe"
        )
    return reading_refusal(store, actor.requester, schedule.subject_type, schedule.subject_id)


def subscribe(
    store: Catalog,
    schedules: ScheduleStore,
    accounts: UserStore,
    clock: Clock,
    actor: Principal,
    schedule_id: str,
) -> Subscription:
    """Mail each run's export to the caller's own address too; any member who may read the
    schedule's subject may, without becoming its owner or changing anything else. Subscribing
    again changes nothing. NotFoundError for a schedule they cannot see; ForbiddenError when
    they see it (an admin, its owner) but may not read its subject; ConflictError for a
    subject whose rows depend on who runs it."""
    schedule = get_visible_schedule(store, schedules, actor, schedule_id)
    refusal = subscription_refusal(store, accounts, actor, schedule)
    if refusal is not None and refusal.per_person:
        raise ConflictError(f"this schedule cannot be subscribed to: {PER_PERSON}")
    if refusal is not None:
        reason = refusal.reason.replace("the subscriber may", "you may")
        raise ForbiddenError(f"you may not subscribe to this schedule: {reason}")
    user = accounts.get_user(actor.requester.user_id)
    assert user is not None  # subscription_refusal refused a caller without an account
    schedules.subscribe(schedule.id, user.id, now=clock.now())
    return Subscription(schedule.id, subscribed=True, email=user.email)


def unsubscribe(
    store: Catalog, schedules: ScheduleStore, actor: Principal, schedule_id: str
) -> Subscription:
    """Stop mailing the schedule's exports to the caller. Allowed even once they may no
    longer see the schedule (their subscription has stopped delivering, but is theirs to
    end); NotFoundError for a schedule they neither see nor are subscribed to."""
    schedule = schedules.get_schedule(schedule_id) if len(schedule_id) <= MAX_ID_CHARS else None
    if (
        schedule is None
        or schedule.deleted
        or schedule.workspace_id != actor.requester.workspace_id
    ):
        raise NotFoundError(NO_SUCH_SCHEDULE)
    ended = schedules.unsubscribe(schedule.id, actor.requester.user_id)
    if not ended and not _sees(store, actor, schedule):
        raise NotFoundError(NO_SUCH_SCHEDULE)
    return Subscription(schedule.id, subscribed=False, email=None)


def subscribed_ids(schedules: ScheduleStore, actor: Principal) -> frozenset[str]:
    """The ids of the workspace's schedules the caller is subscribed to."""
    return schedules.subscriptions(actor.requester.workspace_id, actor.requester.user_id)


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
