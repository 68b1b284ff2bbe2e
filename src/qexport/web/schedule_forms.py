"""A schedule as its form writes it (recipients one per line, one typed input per parameter
of its subject) and as its pages show it (the subject by name, the cron in words, the next
runs on the schedule's wall clock)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from qexport.config import Settings
from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import to_json_value
from qexport.domain.reports import SUBJECT_REPORT
from qexport.domain.schedules import (
    CHAT_CHANNELS,
    Channel,
    Recipient,
    Schedule,
    check_cron,
    check_timezone,
    describe_cron,
    next_runs,
)
from qexport.services.schedules import visibility
from qexport.services.subjects import Subject
from qexport.web.forms import GENERAL, email_of, field_of, numbered_lines, on_line
from qexport.web.subjects import given_parameters, param_field, typed_values

FIELDS = ("format", "cron", "timezone", "recipients", "missed", "parameters", "filename_template")
_SUBJECT_FIELDS = ("query_id", "report_id")
RUNS_SHOWN = 3
NO_SMTP = (
    "Email is not configured on this server (QEXPORT_SMTP_URL is not set): email recipients"
    " will not get anything until an operator sets it. Webhook, Slack and Teams recipients"
    " are not affected."
)


@dataclass(frozen=True)
class ScheduleForm:
    """The form's values, as typed; `subject` is `query:ID` or `report:ID`, `parameters` the
    subject's inputs by parameter name."""

    subject: str = ""
    format: str = "csv"
    cron: str = ""
    timezone: str = ""
    recipients: str = ""
    missed: str = "once"
    parameters: dict[str, str] = field(default_factory=dict)
    filename_template: str = ""

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleForm:
        return cls(
            subject=f"{schedule.subject_type}:{schedule.subject_id}",
            format=schedule.format,
            cron=schedule.cron,
            timezone=schedule.timezone,
            recipients="\n".join(recipient_line(r) for r in schedule.recipients),
            missed=schedule.missed.value,
            parameters={k: _text(v) for k, v in schedule.parameters.items() if v is not None},
            filename_template=schedule.filename_template or "",
        )

    @classmethod
    def read(cls, form: Mapping[str, str], subject: Subject | None) -> ScheduleForm:
        """The form's values from its fields; the parameters are the chosen subject's."""
        return cls(
            subject=form.get("subject", "")[:300],
            format=form.get("format", ""),
            cron=form.get("cron", ""),
            timezone=form.get("timezone", ""),
            recipients=form.get("recipients", ""),
            missed=form.get("missed", "once"),
            parameters=typed_values(subject, form),
            filename_template=form.get("filename_template", "")[:300],
        )


def recipient_line(recipient: Recipient) -> str:
    """A recipient as the form writes it: an address, a webhook's URL, or `slack URL`."""
    if recipient.channel in CHAT_CHANNELS:
        return f"{recipient.channel.value} {recipient.target}"
    return recipient.target


def recipient_of(line: str) -> dict[str, str]:
    """A recipient line read back: `slack URL` and `teams URL` (also `slack: URL`), a URL is
    a webhook, anything else an email address."""
    word, _, rest = line.partition(" ")
    channel = word.rstrip(":").lower()
    if rest.strip() and channel in {c.value for c in CHAT_CHANNELS}:
        return {channel: rest.strip()}
    return {"webhook": line} if "://" in line else {"email": line}


def _text(value: Any) -> str:
    shown = to_json_value(value)
    return str(shown).lower() if isinstance(shown, bool) else str(shown)


@dataclass(frozen=True)
class Parsed:
    """The form read into the service's terms, and the line number of each recipient."""

    settings: dict[str, Any]
    recipient_lines: list[int]


def parse(form: ScheduleForm, subject: Subject | None) -> Parsed:
    """Settings named as `ScheduleDraft`'s fields."""
    kind, _, ident = form.subject.partition(":")
    recipients = numbered_lines(form.recipients)
    settings = {
        "query_id": ident if kind == "query" and ident else None,
        "report_id": ident if kind == SUBJECT_REPORT and ident else None,
        "format": form.format,
        "parameters": given_parameters(subject, form.parameters) if subject else {},
        "cron": form.cron,
        "timezone": form.timezone.strip() or None,
        "recipients": [recipient_of(r) for _, r in recipients],
        "missed": form.missed,
        "filename_template": form.filename_template.strip() or None,
    }
    return Parsed(settings, [n for n, _ in recipients])


def errors_of(
    exc: InvalidRequestError, recipient_lines: list[int], subject: Subject | None
) -> dict[str, str]:
    """Every refusal on its field, in the order found: the subject, each parameter's input,
    a recipient's line, or its field."""
    errors: dict[str, list[str]] = {}
    for problem in exc.problems:
        if field_of(problem, _SUBJECT_FIELDS) != GENERAL:
            chosen = subject is not None
            name, text = "subject", problem.detail if chosen else "Choose a query or a report."
        else:
            name = param_field(problem.field, subject) or field_of(problem, FIELDS)
            text = on_line(problem, "recipients", recipient_lines)
        errors.setdefault(name, []).append(text)
    return {name: " ".join(texts) for name, texts in errors.items()}


def timetable(cron: str, zone: str, now: datetime) -> dict[str, Any] | None:
    """The cron in words and its next runs on the zone's wall clock (`Mon 2026-01-12 08:00
    CET`), for a cron and zone that are valid; None otherwise."""
    try:
        checked = check_cron(cron)
        check_timezone(zone)
    except InvalidRequestError:
        return None
    return {
        "words": describe_cron(checked),
        "zone": zone,
        "runs": [f"{at:%a %Y-%m-%d %H:%M %Z}" for at in next_runs(checked, zone, now, RUNS_SHOWN)],
    }


def mails_without_smtp(settings: Settings, recipients: list[dict[str, str]]) -> bool:
    """Whether some recipient is an email address while the server cannot send mail."""
    return not settings.smtp_url and any(Channel.EMAIL.value in r for r in recipients)


def next_run(schedule: Schedule) -> str:
    """When it runs next on its own wall clock: `Mon 2026-12-07 08:00 CET`; paused: none."""
    if not schedule.enabled or schedule.next_due_at is None:
        return "none while paused"
    local = schedule.next_due_at.astimezone(ZoneInfo(schedule.timezone))
    return f"{local:%a %Y-%m-%d %H:%M %Z}"


def subject_name(context: Container, schedule: Schedule) -> str:
    if schedule.subject_type == SUBJECT_REPORT:
        report = context.catalog.get_report(schedule.subject_id)
        return report.title if report else schedule.subject_id
    query = context.catalog.get_query(schedule.subject_id)
    return query.name if query else schedule.subject_id


def schedule_row(context: Container, actor: Principal, schedule: Schedule) -> dict[str, Any]:
    """A schedule as the pages show it; `manage` says whether the person may change it."""
    return {
        "id": schedule.id,
        "subject": subject_name(context, schedule),
        "subject_type": schedule.subject_type,
        "subject_href": f"/{schedule.subject_type}s/{schedule.subject_id}",
        "format": schedule.format,
        "cron": schedule.cron,
        "cron_words": describe_cron(schedule.cron),
        "timezone": schedule.timezone,
        "next_run": next_run(schedule),
        "recipients": [
            f"{r.channel.value} {shown.target}"
            for r in schedule.recipients
            for shown in [r if visibility.sees_recipients(actor, schedule) else r.masked()]
        ],
        "no_smtp": mails_without_smtp(context.settings, [r.to_json() for r in schedule.recipients]),
        "state": "active" if schedule.enabled else "paused",
        "enabled": schedule.enabled,
        "missed": schedule.missed.value,
        "parameters": dict(schedule.parameters),
        "owner": email_of(context.accounts, schedule.owner),
        "manage": visibility.may_manage(actor, schedule),
    }
