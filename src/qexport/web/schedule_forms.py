"""A schedule as its form writes it (recipients and parameters one per line) and as its pages
show it (the subject by name, the next run on the schedule's wall clock)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from qexport.container import Container
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import to_json_value
from qexport.domain.reports import SUBJECT_REPORT
from qexport.domain.schedules import CHAT_CHANNELS, Recipient, Schedule
from qexport.schedules import catalog as service
from qexport.web.forms import GENERAL, email_of, field_of, numbered_lines, on_line

FIELDS = ("format", "cron", "timezone", "recipients", "missed", "parameters", "filename_template")
_SUBJECT_FIELDS = ("query_id", "report_id")


@dataclass(frozen=True)
class ScheduleForm:
    """The form's values, as typed; `subject` is `query:ID` or `report:ID`."""

    subject: str = ""
    format: str = "csv"
    cron: str = ""
    timezone: str = ""
    recipients: str = ""
    missed: str = "once"
    parameters: str = ""
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
            parameters="\n".join(f"{k}={_text(v)}" for k, v in schedule.parameters.items()),
            filename_template=schedule.filename_template or "",
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


def parse(form: ScheduleForm) -> Parsed:
    """Settings named as `ScheduleDraft`'s fields; a malformed parameter line is refused."""
    kind, _, ident = form.subject.partition(":")
    parameters: dict[str, str] = {}
    for number, line in numbered_lines(form.parameters):
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise InvalidRequestError(
                f"Line {number} expects NAME=VALUE, got {line[:80]!r}", field="parameters"
            )
        parameters[name.strip()] = value.strip()
    recipients = numbered_lines(form.recipients)
    settings = {
        "query_id": ident if kind == "query" and ident else None,
        "report_id": ident if kind == SUBJECT_REPORT and ident else None,
        "format": form.format,
        "parameters": parameters,
        "cron": form.cron,
        "timezone": form.timezone.strip() or None,
        "recipients": [recipient_of(r) for _, r in recipients],
        "missed": form.missed,
        "filename_template": form.filename_template.strip() or None,
    }
    return Parsed(settings, [n for n, _ in recipients])


def error_of(exc: InvalidRequestError, recipient_lines: list[int]) -> dict[str, str]:
    """Where the refusal is shown: the subject, the recipient's line, or its field."""
    if field_of(exc, _SUBJECT_FIELDS) != GENERAL:
        return {"subject": exc.detail}
    return {field_of(exc, FIELDS): on_line(exc, "recipients", recipient_lines)}


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


def schedule_row(context: Container, actor: service.Actor, schedule: Schedule) -> dict[str, Any]:
    """A schedule as the pages show it; `manage` says whether the person may change it."""
    return {
        "id": schedule.id,
        "subject": subject_name(context, schedule),
        "subject_type": schedule.subject_type,
        "subject_href": f"/{schedule.subject_type}s/{schedule.subject_id}",
        "format": schedule.format,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "next_run": next_run(schedule),
        "recipients": [
            f"{r.channel.value} {shown.target}"
            for r in schedule.recipients
            for shown in [r if service.sees_recipients(actor, schedule) else r.masked()]
        ],
        "state": "active" if schedule.enabled else "paused",
        "enabled": schedule.enabled,
        "missed": schedule.missed.value,
        "parameters": dict(schedule.parameters),
        "owner": email_of(context.accounts, schedule.owner),
        "manage": service.may_manage(actor, schedule),
    }
