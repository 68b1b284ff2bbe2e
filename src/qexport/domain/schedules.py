"""Schedules (an export on a cron timetable) and deliveries (who hears about an export).

Pure: cron arithmetic in the schedule's IANA time zone, the decision of what one scheduler
tick fires, recipients and the delivery lifecycle (waiting -> sending -> sent | failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import ExpressionDescriptor
from cron_descriptor.Exception import FormatException, MissingFieldException
from cronsim import CronSim, CronSimError

from qexport.domain.failures import FailureCode, InvalidRequestError, Problems

MAX_RECIPIENTS = 50
MAX_URL_CHARS = 2000
MAX_CRON_CHARS = 200
_EMAIL = re.compile(r"^[^@\s<>,;\"]{1,64}@[A-Za-z0-9.-]{1,189}\.[A-Za-z0-9-]{1,63}$")


class Missed(StrEnum):
    """What a schedule does about due times that passed while no scheduler ran."""

    ONCE = "once"  # fire one export for all of them
    SKIP = "skip"  # fire none; wait for the next due time


class Channel(StrEnum):
    EMAIL = "email"
    WEBHOOK = "webhook"  # a signed JSON POST of qexport's own payload
    SLACK = "slack"  # a Slack incoming webhook: a Block Kit message
    TEAMS = "teams"  # a Microsoft Teams incoming webhook or workflow: an Adaptive Card


# Channels whose target is an incoming-webhook URL of a chat service. Such a URL is itself the
# credential (anyone holding it may post), so it is https only and masked like a webhook's.
CHAT_CHANNELS = frozenset({Channel.SLACK, Channel.TEAMS})
_CHANNELS = {channel.value: channel for channel in Channel}
RECIPIENT_SHAPES = (
    '{"email": ADDRESS}, {"webhook": URL}, {"slack": URL} or {"teams": URL}'  # in refusals
)


@dataclass(frozen=True)
class Recipient:
    channel: Channel
    target: str  # an email address, or a webhook's (Slack's, Teams') URL

    @property
    def posts(self) -> bool:
        """Whether the recipient is an HTTP POST to a URL (a webhook, Slack or Teams)."""
        return self.channel is not Channel.EMAIL

    def to_json(self) -> dict[str, str]:
        return {self.channel.value: self.target}

    def masked(self) -> Recipient:
        """As shown to members who neither own the schedule nor administer the workspace: a
        URL's host name only (its path and query often hold the receiver's secret; a Slack or
        Teams URL is nothing but a secret), an email address with its local part hidden."""
        if self.channel is Channel.EMAIL:
            local, _, domain = self.target.rpartition("@")
            return Recipient(self.channel, f"{local[:1]}***@{domain}")
        parts = urlsplit(self.target)
        return Recipient(self.channel, f"{parts.scheme}://{parts.hostname or ''}/***")


def parse_recipient(data: Any, field_name: str = "recipients") -> Recipient:
    """`{"email": ADDRESS}`, `{"webhook": URL}`, `{"slack": URL}` or `{"teams": URL}`;
    InvalidRequestError naming the field (`recipients[0].slack`)."""
    if not isinstance(data, dict) or len(data) != 1:
        raise InvalidRequestError(
            f"a recipient is exactly one of {RECIPIENT_SHAPES}"
            + (f", not {len(data)} of them" if isinstance(data, dict) and data else ""),
            field=field_name,
        )
    ((key, value),) = data.items()
    channel = _CHANNELS.get(key) if isinstance(key, str) else None
    if channel is None or not isinstance(value, str):
        raise InvalidRequestError(f"a recipient is one of {RECIPIENT_SHAPES}", field=field_name)
    where = f"{field_name}.{channel.value}"
    if channel is Channel.EMAIL:
        address = value.strip()
        if len(address) > 254 or not _EMAIL.match(address):
            raise InvalidRequestError(f"{address[:80]!r} is not an email address", field=where)
        return Recipient(Channel.EMAIL, address)
    return Recipient(channel, _check_url(value, channel, where))


def _check_url(url: str, channel: Channel, field_name: str) -> str:
    """A webhook's URL: http(s) with a host and no credentials; a chat service's: https only.
    Any host is taken (Slack Enterprise Grid and Teams' workflows use several): where the
    URL may lead is the egress policy's and the workspace's webhook hosts' decision."""
    what = {Channel.SLACK: "a Slack URL", Channel.TEAMS: "a Teams URL"}.get(
        channel, "a webhook URL"
    )
    url = url.strip()
    if len(url) > MAX_URL_CHARS:
        raise InvalidRequestError(
            f"{what} has at most {MAX_URL_CHARS} characters", field=field_name
        )
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    schemes = ("https",) if channel in CHAT_CHANNELS else ("http", "https")
    if parts is None or parts.scheme not in schemes or not parts.hostname:
        # A chat URL is a secret: even a refused one is not echoed whole.
        shown = _masked_url(url) if channel in CHAT_CHANNELS else repr(url[:80])
        kind = "an https URL" if channel in CHAT_CHANNELS else "an http(s) URL"
        raise InvalidRequestError(f"{shown} is not {kind} with a host", field=field_name)
    if parts.username or parts.password:
        raise InvalidRequestError(f"{what} may not carry a user name or password", field=field_name)
    return url


def _masked_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return "'***'"
    return repr(f"{parts.scheme}://{host}/***" if parts.scheme else "***")


def parse_recipients(data: Any, field_name: str = "recipients") -> tuple[Recipient, ...]:
    """A list of recipients, duplicates removed (each recipient hears once per export); every
    malformed one is refused at once."""
    if not isinstance(data, list):
        raise InvalidRequestError("recipients must be a list", field=field_name)
    if len(data) > MAX_RECIPIENTS:
        raise InvalidRequestError(
            f"at most {MAX_RECIPIENTS} recipients may be given", field=field_name
        )
    problems = Problems()
    found: dict[tuple[Channel, str], Recipient] = {}
    for index, item in enumerate(data):
        with problems.check():
            recipient = parse_recipient(item, f"{field_name}[{index}]")
            found.setdefault((recipient.channel, recipient.target.lower()), recipient)
    problems.raise_any()
    return tuple(found.values())


# ---------------------------------------------------------------- timetable


def check_timezone(name: Any, field_name: str = "timezone") -> ZoneInfo:
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidRequestError(
            "timezone must be an IANA name such as Europe/Berlin", field=field_name
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidRequestError(
            f"unknown time zone {name[:64]!r} (expected an IANA name such as Europe/Berlin)",
            field=field_name,
        ) from None


def check_cron(expression: Any, field_name: str = "cron") -> str:
    """A 5-field cron expression (minute hour day-of-month month day-of-week)."""
    if not isinstance(expression, str) or len(expression) > MAX_CRON_CHARS:
        raise InvalidRequestError("cron must be a 5-field cron expression", field=field_name)
    normalized = " ".join(expression.split())
    if len(normalized.split(" ")) != 5:
        raise InvalidRequestError(
            f"cron {normalized[:80]!r} must have 5 fields: minute hour day-of-month month"
            " day-of-week (e.g. '0 8 * * 1' for Mondays at 08:00)",
            field=field_name,
        )
    try:
        CronSim(normalized, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidRequestError(
            f"invalid cron {normalized[:80]!r}: {exc}", field=field_name
        ) from None
    return normalized


def next_due(cron: str, timezone: str, after: datetime) -> datetime:
    """The first due time strictly after `after`, in UTC.

    Evaluated on the wall clock of `timezone` with Debian cron's rules across daylight-saving
    changes: a time skipped when clocks go forward fires right after the change, a time that
    occurs twice when clocks go back fires once.
    """
    local = after.astimezone(ZoneInfo(timezone))
    return next(iter(CronSim(cron, local))).astimezone(UTC)


def next_runs(cron: str, timezone: str, after: datetime, count: int = 3) -> list[datetime]:
    """The next `count` due times after `after`, on the wall clock of `timezone` (aware)."""
    zone = ZoneInfo(timezone)
    found, at = [], after
    for _ in range(count):
        at = next_due(cron, timezone, at)
        found.append(at.astimezone(zone))
    return found


def describe_cron(cron: str) -> str:
    """A checked cron expression in words: `0 8 * * 1` -> "At 08:00, only on Monday"; ""
    if it cannot be told.

    cron-descriptor reads the expression with the same rules as cronsim (day-of-week 0 and 7
    are Sunday; a restricted day of the month and day of the week fire on either: "on day 1
    of the month, or on Monday"); its words are English, with a 24-hour clock.
    """
    try:
        descriptor = ExpressionDescriptor(
            cron, use_24hour_time_format=True, verbose=False, day_of_week_start_index_zero=True
        )
        return str(descriptor.get_description())
    except (FormatException, MissingFieldException):
        return ""  # none seen for an expression cronsim takes; the expression is shown anyway


def schedule_cap_reached(live: int, cap: int) -> InvalidRequestError:
    """The refusal of a new schedule in a workspace that already has `cap` of them."""
    return InvalidRequestError(
        f"this workspace already has {live} schedules (at most {cap}); delete one first",
        field="schedules",
    )


INTERVAL_CHECK_FIRES = 200  # due times looked at by check_min_interval


def check_min_interval(
    cron: str, timezone: str, minimum: timedelta, after: datetime, field_name: str = "cron"
) -> None:
    """Refuse a timetable with two consecutive due times closer than `minimum`, among the
    next INTERVAL_CHECK_FIRES after `after`, on the wall clock of `timezone` (a gap within
    a day shows up within a day's fires; 200 cover every pattern finer than hourly)."""
    if minimum <= timedelta(0):
        return
    fires = iter(CronSim(cron, after.astimezone(ZoneInfo(timezone))))
    previous = next(fires)
    for _ in range(INTERVAL_CHECK_FIRES - 1):
        current = next(fires, None)
        if current is None:
            return
        gap = current.astimezone(UTC) - previous.astimezone(UTC)
        if gap < minimum:
            raise InvalidRequestError(
                f"cron {cron[:80]!r} fires {_human(gap)} apart (at {previous:%Y-%m-%d %H:%M}"
                f" and {current:%H:%M} {timezone}); schedules may fire at most once every"
                f" {_human(minimum)}",
                field=field_name,
            )
        previous = current


def _human(gap: timedelta) -> str:
    seconds = int(gap.total_seconds())
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


@dataclass(frozen=True)
class Tick:
    """What one scheduler tick does for a schedule: fire an export for `due_at` (or nothing),
    then wait for `next_due_at`."""

    due_at: datetime | None
    next_due_at: datetime


def plan_tick(
    *,
    cron: str,
    timezone: str,
    missed: Missed,
    next_due_at: datetime,
    now: datetime,
    grace: timedelta,
) -> Tick | None:
    """None while the schedule is not due; otherwise at most ONE due time to fire.

    A due time up to `grace` old is on time and fires. Older ones were missed (no scheduler
    ran): they collapse into one export (`once`) or none (`skip`), and the timetable resumes
    after `now`, so that a long outage never releases a storm of exports.
    """
    if next_due_at > now:
        return None
    if next_due_at >= now - grace:
        return Tick(next_due_at, next_due(cron, timezone, next_due_at))
    recent = next_due(cron, timezone, now - grace - timedelta(microseconds=1))
    if recent <= now:  # an on-time due time: it fires and stands for the missed ones
        return Tick(recent, next_due(cron, timezone, recent))
    return Tick(next_due_at if missed is Missed.ONCE else None, recent)


# ---------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Schedule:
    id: str
    workspace_id: str
    owner: str  # whose rights the exports run with
    subject_type: str  # "query" or "report"
    subject_id: str
    format: str
    parameters: dict[str, Any]
    cron: str
    timezone: str
    recipients: tuple[Recipient, ...]
    missed: Missed = Missed.ONCE
    enabled: bool = True
    next_due_at: datetime | None = None
    created_at: datetime | None = None
    options: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False
    filename_template: str | None = None  # None: its subject's (see domain/queries.py)


# ---------------------------------------------------------------- deliveries


class DeliveryStatus(StrEnum):
    WAITING = "waiting"  # for its export to settle, or for its next attempt
    SENDING = "sending"  # claimed by a sender (leased)
    SENT = "sent"
    FAILED = "failed"


class Outcome(StrEnum):
    """What a delivery told its recipient."""

    FILE = "file"  # the export succeeded: its link (and maybe the file)
    FAILURE = "failure"  # the export failed: the code and the reason
    EXPIRED = "expired"  # the file expired before it could be delivered


@dataclass(frozen=True)
class NewDelivery:
    id: str  # also the idempotency key the recipient sees
    recipient: Recipient
    schedule_id: str | None = None
    # The member who subscribed their own address to the schedule (schedules/subscriptions.py):
    # checked again when it is sent. None for the recipients the schedule's owner named.
    subscriber: str | None = None


@dataclass(frozen=True)
class Delivery:
    id: str
    export_id: str
    recipient: Recipient
    status: DeliveryStatus
    attempt: int
    created_at: datetime
    schedule_id: str | None = None
    next_attempt_at: datetime | None = None
    lease_token: str | None = None
    lease_expires_at: datetime | None = None
    sent_at: datetime | None = None
    outcome: Outcome | None = None
    last_error: str | None = None
    failure_code: FailureCode | None = None
    attempts_spent: int = 0  # attempts made before it was last sent again
    resent_at: datetime | None = None
    resent_by: str | None = None
    subscriber: str | None = None  # see NewDelivery

    @property
    def idempotency_key(self) -> str:
        return self.id

    @property
    def tries(self) -> int:
        """Attempts since it was last sent again (all of them if it never was): what the
        attempt limit and the backoff count."""
        return self.attempt - self.attempts_spent
