"""A schedule's checks: its subject read and bound as an export request's is, its format,
timetable, recipients, flags and file name template; every mistake gathered, in the form's
order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from qexport.domain.accounts import Principal
from qexport.domain.commands import ScheduleDraft, SubjectRef
from qexport.domain.exports import Requester
from qexport.domain.failures import InvalidRequestError, NotFoundError, Problems, in_field_order
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import check_filename_template, to_json_value
from qexport.domain.schedules import Missed, Schedule, check_cron, check_timezone
from qexport.ports import Catalog, WorkspaceStore
from qexport.services.deps import Deps
from qexport.services.recipients import RecipientRules, rules_for
from qexport.services.subjects import (
    check_allowed_format,
    check_any_format,
    check_kind_format,
    readable_subject,
)

# Changing any of these re-checks the subject and binds the parameters again.
SUBJECT_FIELDS = frozenset({"query_id", "report_id", "format", "parameters"})
_TIMETABLE_FIELDS = frozenset({"cron", "timezone"})


@dataclass(frozen=True)
class _Subject:
    type: str
    id: str
    format: str
    parameters: dict[str, Any]
    names: tuple[str, ...] = ()  # every parameter a file name template may use


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
IN_ORDER = in_field_order(SCHEDULE_FIELDS)


@dataclass(frozen=True)
class SubjectCheck:
    """The subject checked (None when refused), or why it is not found."""

    subject: _Subject | None = None
    missing: NotFoundError | None = None


def check_subject(
    store: Catalog,
    requester: Requester,
    draft: ScheduleDraft,
    problems: Problems,
    *,
    match_name: bool,
    policy: WorkspacePolicy | None = None,
) -> SubjectCheck:
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
        return SubjectCheck()
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
        return SubjectCheck(missing=exc)
    why = None if policy is None else subject.sensitivity(policy)
    if why is not None:
        problems.add(_sensitive(why, f"{ref.kind}_id"))
    with problems.check():
        values = subject.bind(draft.parameters)
        return SubjectCheck(
            _Subject(
                subject.kind,
                subject.id,
                draft.format,
                {k: to_json_value(v) for k, v in values.items()},
                subject.template_names(values),
            )
        )
    return SubjectCheck()


def _sensitive(why: str, field: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{why}: its exports each need an admin's approval, so no schedule may export it",
        field=field,
    )


def checked_template(draft: ScheduleDraft, subject: _Subject) -> str | None:
    """The draft's template, checked against its subject's parameters; blank means none."""
    given = draft.filename_template
    if given is None or (isinstance(given, str) and not given.strip()):
        return None
    if not isinstance(given, str):
        raise InvalidRequestError("filename_template must be text", field="filename_template")
    return check_filename_template(given, subject.names)


def changed_template(
    store: Catalog,
    actor: Principal,
    current: Schedule,
    draft: ScheduleDraft,
    problems: Problems,
    subject: SubjectCheck,
    *,
    checked: bool,
    given: Mapping[str, Any],
) -> tuple[str | None, SubjectCheck]:
    """A changed schedule's file name template, checked against the subject it will have (a
    subject's template may name parameters that another subject lacks), and that subject."""
    named = subject
    if "filename_template" in given and not checked:
        named = check_subject(store, actor.requester, draft, problems, match_name=False)
    if ("filename_template" not in given and not checked) or named.subject is None:
        return current.filename_template, named
    with problems.check():
        return checked_template(draft, named.subject), named
    return current.filename_template, named


def ownership_fields(schedule: Schedule) -> tuple[Any, ...]:
    """What a change of makes the changer the owner: where the exports go and what they hold."""
    return (
        schedule.subject_type,
        schedule.subject_id,
        schedule.format,
        schedule.parameters,
        schedule.recipients,
    )


def check_flags(draft: ScheduleDraft, problems: Problems) -> Missed:
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


def check_timetable(
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


def refuse_any(problems: Problems, subject: SubjectCheck) -> None:
    """Every problem at once, in the form's order; or, with none, a subject not found."""
    problems.raise_any(IN_ORDER)
    if subject.missing is not None:
        raise subject.missing


def recipient_rules(deps: Deps, actor: Principal) -> RecipientRules:
    requester = actor.requester
    egress = deps.settings.egress_policy()
    return rules_for(deps.accounts, requester.workspace_id, requester.user_id, actor.role, egress)


def _timezone(accounts: WorkspaceStore, workspace_id: str, given: str | None) -> str:
    zone = given if given is not None else accounts.workspace_timezone(workspace_id)
    check_timezone(zone)
    return zone
