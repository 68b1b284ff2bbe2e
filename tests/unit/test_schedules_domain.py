"""Schedule timetables as a person in the schedule's time zone expects them, across
daylight-saving changes; what a tick fires after downtime; and refused input naming its field."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from qexport.domain.failures import InvalidRequestError
from qexport.domain.schedules import (
    Channel,
    Missed,
    Recipient,
    Tick,
    check_cron,
    check_min_interval,
    check_timezone,
    next_due,
    parse_recipients,
    plan_tick,
)

GRACE = timedelta(minutes=1)
BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
SYDNEY = "Australia/Sydney"

# (zone, the day clocks go forward, the day clocks go back) in 2026
TRANSITIONS = [
    (BERLIN, date(2026, 3, 29), date(2026, 10, 25)),
    (NEW_YORK, date(2026, 3, 8), date(2026, 11, 1)),
    (SYDNEY, date(2026, 10, 4), date(2026, 4, 5)),
]
# A wall-clock time that does not exist on the spring-forward day, and one that occurs twice
# on the fall-back day, per zone.
SKIPPED_TIME = {BERLIN: "30 2 * * *", NEW_YORK: "30 2 * * *", SYDNEY: "30 2 * * *"}
REPEATED_TIME = {BERLIN: "02:30", NEW_YORK: "01:30", SYDNEY: "02:30"}


def _due_times(cron: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Every due time in (start, end], in UTC."""
    found = []
    at = next_due(cron, zone, start)
    while at <= end:
        found.append(at)
        at = next_due(cron, zone, at)
    return found


def _around(zone: str, day: date, days: int = 2) -> tuple[datetime, datetime]:
    """From local midnight `days` before `day` to local midnight `days` after it, in UTC."""
    tz = ZoneInfo(zone)
    start = datetime(day.year, day.month, day.day, tzinfo=tz) - timedelta(days=days)
    end = datetime(day.year, day.month, day.day, tzinfo=tz) + timedelta(days=days + 1)
    return start.astimezone(UTC), end.astimezone(UTC)


def _local(at: datetime, zone: str) -> datetime:
    return at.astimezone(ZoneInfo(zone))


# ---------------------------------------------------------------- daylight saving


@pytest.mark.parametrize(("zone", "forward", "back"), TRANSITIONS)
def test_a_daily_time_stays_on_the_local_clock_across_both_changes(
    zone: str, forward: date, back: date
) -> None:
    """The cron "0 8 * * *" is due at 08:00 local every day, before and after each change: one due
    time per day, and its UTC time moves by exactly one hour across the change."""
    for day in (forward, back):
        start, end = _around(zone, day)
        due = _due_times("0 8 * * *", zone, start, end)
        assert len(due) == 5
        assert [_local(d, zone).strftime("%H:%M") for d in due] == ["08:00"] * 5
        assert [_local(d, zone).date() for d in due] == [
            day + timedelta(days=n) for n in range(-2, 3)
        ]
        before, after = due[1], due[3]  # the days either side of the change
        assert {a - b for a, b in zip(due[1:], due, strict=False)} == {
            timedelta(days=1),
            timedelta(hours=23) if day == forward else timedelta(hours=25),
        }
        assert (after - before) in (timedelta(hours=47), timedelta(hours=49))


@pytest.mark.parametrize(("zone", "forward", "_back"), TRANSITIONS)
def test_a_time_skipped_by_spring_forward_fires_once_right_after_the_change(
    zone: str, forward: date, _back: date
) -> None:
    """02:30 does not exist on the spring-forward day: that day it fires once, at 03:00
    local, and on the days around it at 02:30 as usual."""
    start, end = _around(zone, forward, days=1)
    due = [_local(d, zone) for d in _due_times(SKIPPED_TIME[zone], zone, start, end)]
    assert [(d.date(), d.strftime("%H:%M")) for d in due] == [
        (forward - timedelta(days=1), "02:30"),
        (forward, "03:00"),
        (forward + timedelta(days=1), "02:30"),
    ]


@pytest.mark.parametrize(("zone", "_forward", "back"), TRANSITIONS)
def test_a_time_repeated_by_fall_back_fires_once(zone: str, _forward: date, back: date) -> None:
    """The wall-clock time that occurs twice when clocks go back fires once that day, at its
    first occurrence (still on summer time)."""
    start, end = _around(zone, back, days=1)
    hour, minute = REPEATED_TIME[zone].split(":")
    cron = f"{int(minute)} {int(hour)} * * *"
    due = [_local(d, zone) for d in _due_times(cron, zone, start, end)]
    assert [(d.date(), d.strftime("%H:%M")) for d in due] == [
        (back + timedelta(days=n), REPEATED_TIME[zone]) for n in (-1, 0, 1)
    ]
    on_the_day = due[1]
    assert on_the_day.dst() == timedelta(hours=1)  # the first of the two, on summer time
    assert on_the_day.fold == 0


@pytest.mark.parametrize(
    ("zone", "monday_before", "monday_after", "utc_hours"),
    [
        (BERLIN, date(2026, 3, 23), date(2026, 3, 30), (7, 6)),
        (BERLIN, date(2026, 10, 19), date(2026, 10, 26), (6, 7)),
        (NEW_YORK, date(2026, 3, 2), date(2026, 3, 9), (13, 12)),
        (NEW_YORK, date(2026, 10, 26), date(2026, 11, 2), (12, 13)),
        (SYDNEY, date(2026, 3, 30), date(2026, 4, 6), (21, 22)),
    ],
)
def test_a_weekly_time_keeps_monday_0800_local_across_the_change(
    zone: str, monday_before: date, monday_after: date, utc_hours: tuple[int, int]
) -> None:
    """The cron "0 8 * * 1" is due on consecutive Mondays at 08:00 local; the UTC hour
    shifts."""
    first = next_due("0 8 * * 1", zone, _around(zone, monday_before, days=0)[0])
    second = next_due("0 8 * * 1", zone, first)
    for at, day in ((first, monday_before), (second, monday_after)):
        local = _local(at, zone)
        assert (local.date(), local.strftime("%a %H:%M")) == (day, "Mon 08:00")
    utc_day_shift = 1 if zone == SYDNEY else 0  # Monday 08:00 in Sydney is Sunday in UTC
    assert (first.hour, second.hour) == utc_hours
    assert first.date() == monday_before - timedelta(days=utc_day_shift)


# ---------------------------------------------------------------- ticks


def _plan(next_due_at: datetime, now: datetime, missed: Missed, **kw: Any) -> Tick | None:
    return plan_tick(
        cron=kw.get("cron", "0 8 * * *"),
        timezone=kw.get("timezone", BERLIN),
        missed=missed,
        next_due_at=next_due_at,
        now=now,
        grace=GRACE,
    )


def _fired_over_ticks(
    next_due_at: datetime, now: datetime, missed: Missed, **kw: Any
) -> tuple[list[datetime], datetime]:
    """What a scheduler does when it comes back at `now` and ticks until nothing is due."""
    fired = []
    for _ in range(100):
        plan = _plan(next_due_at, now, missed, **kw)
        if plan is None:
            return fired, next_due_at
        if plan.due_at is not None:
            fired.append(plan.due_at)
        next_due_at = plan.next_due_at
    raise AssertionError("the tick never settled")


MONDAY_0800 = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)  # 08:00 in Berlin


def test_nothing_fires_before_the_due_time() -> None:
    """A schedule whose next due time is still ahead is left alone."""
    assert _plan(MONDAY_0800, MONDAY_0800 - timedelta(seconds=1), Missed.ONCE) is None


@pytest.mark.parametrize("missed", list(Missed))
@pytest.mark.parametrize("late", [timedelta(0), timedelta(seconds=59), GRACE])
def test_a_due_time_within_grace_fires_whatever_the_missed_choice(
    missed: Missed, late: timedelta
) -> None:
    """A scheduler that ticks a little late (up to the grace) still fires the due time
    itself, then waits for the next day's 08:00."""
    plan = _plan(MONDAY_0800, MONDAY_0800 + late, missed)
    assert plan == Tick(MONDAY_0800, MONDAY_0800 + timedelta(days=1))


def test_missed_runs_after_downtime_fire_exactly_one_with_once() -> None:
    """Three days down: `once` fires one export (for the oldest missed due time), then the
    timetable resumes at the next 08:00 after now, not at any missed one."""
    now = MONDAY_0800 + timedelta(days=3, hours=4)  # Thursday 12:00 in Berlin
    fired, resumes = _fired_over_ticks(MONDAY_0800, now, Missed.ONCE)
    assert fired == [MONDAY_0800]
    assert resumes == MONDAY_0800 + timedelta(days=4)


def test_missed_runs_after_downtime_fire_nothing_with_skip() -> None:
    """Three days down: `skip` fires nothing and resumes at the next 08:00 after now."""
    now = MONDAY_0800 + timedelta(days=3, hours=4)
    fired, resumes = _fired_over_ticks(MONDAY_0800, now, Missed.SKIP)
    assert fired == []
    assert resumes == MONDAY_0800 + timedelta(days=4)


@pytest.mark.parametrize("missed", list(Missed))
def test_after_downtime_an_on_time_due_time_fires_and_stands_for_the_missed(
    missed: Missed,
) -> None:
    """Back up just after a due time (within grace) after hours down: that due time fires
    once, with either choice, and no older one fires as well."""
    every_15 = {"cron": "*/15 * * * *", "timezone": "UTC"}
    now = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)
    fired, resumes = _fired_over_ticks(now - timedelta(hours=5), now, missed, **every_15)
    assert fired == [datetime(2026, 3, 2, 12, 0, tzinfo=UTC)]
    assert resumes == datetime(2026, 3, 2, 12, 15, tzinfo=UTC)


def test_missed_runs_across_a_clock_change_resume_on_the_local_clock() -> None:
    """Down over the spring-forward weekend: `once` fires one, and the next due time is
    08:00 local on summer time (06:00 UTC), not 07:00 UTC."""
    saturday = datetime(2026, 3, 28, 7, 0, tzinfo=UTC)  # 08:00 CET
    now = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)
    fired, resumes = _fired_over_ticks(saturday, now, Missed.ONCE)
    assert fired == [saturday]
    assert resumes == datetime(2026, 3, 30, 6, 0, tzinfo=UTC)


# ---------------------------------------------------------------- refused input


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("0 8 * *", "must have 5 fields"),
        ("0 8 * * 1 2026", "must have 5 fields"),
        ("61 8 * * *", "invalid cron"),
        ("0 25 * * *", "invalid cron"),
        ("0 8 * * funday", "invalid cron"),
        (None, "5-field cron expression"),
        ("", "must have 5 fields"),
    ],
)
def test_a_bad_cron_expression_is_refused_naming_the_field(expression: Any, says: str) -> None:
    """The message says what is wrong and the error names the `cron` field."""
    with pytest.raises(InvalidRequestError, match=says) as caught:
        check_cron(expression)
    assert caught.value.field == "cron"


def test_a_cron_expression_is_normalised() -> None:
    """Extra spaces are harmless; the stored expression is the tidy one."""
    assert check_cron("  0   8 * *  1 ") == "0 8 * * 1"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"),
        ("Berlin", "unknown time zone"),
        ("../../etc/passwd", "unknown time zone"),
        ("", "IANA name"),
        (42, "IANA name"),
    ],
)
def test_an_unknown_time_zone_is_refused_naming_the_field(name: Any, says: str) -> None:
    """Only IANA names are accepted; the error names the `timezone` field."""
    with pytest.raises(InvalidRequestError, match=says) as caught:
        check_timezone(name)
    assert caught.value.field == "timezone"
    assert check_timezone("Europe/Berlin") == ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        ("alice@example.com", "recipients", "must be a list"),
        ([{"sms": "+4912345"}], "recipients[0]", "a recipient is"),
        ([{"email": "a@example.com", "webhook": "https://x.example"}], "recipients[0]", "is"),
        ([{"email": "alice@example.com"}, {"email": "alice"}], "recipients[1].email", "alice"),
        ([{"email": 7}], "recipients[0]", "a recipient is"),
        ([{"webhook": "ftp://files.example.com/in"}], "recipients[0].webhook", "http"),
        ([{"webhook": "https://"}], "recipients[0].webhook", "with a host"),
        (
            [{"webhook": "https://user:secret@hooks.example.com/in"}],
            "recipients[0].webhook",
            "user name or password",
        ),
        ([{"webhook": "https://x.example/" + "a" * 2000}], "recipients[0].webhook", "at most"),
        ([{"email": f"u{i}@example.com"} for i in range(51)], "recipients", "at most 50"),
        ([{"slack": "http://hooks.slack.com/services/x"}], "recipients[0].slack", "not an https"),
        ([{"teams": "https://"}], "recipients[0].teams", "with a host"),
        ([{"teams": "https://u:p@a.webhook.office.com/"}], "recipients[0].teams", "password"),
        ([{}], "recipients[0]", "exactly one of"),
        ([{"slack": "https://a.test/", "teams": "https://b.test/"}], "recipients[0]", "not 2"),
    ],
)
def test_bad_recipients_are_refused_naming_the_field(data: Any, field: str, says: str) -> None:
    """Each refusal says what a recipient must be and points at the offending entry."""
    with pytest.raises(InvalidRequestError, match=says) as caught:
        parse_recipients(data)
    assert caught.value.field == field


def test_recipients_are_deduplicated_so_each_hears_once() -> None:
    """The same address twice (in any letter case) is one recipient; email and webhook mix."""
    found = parse_recipients(
        [
            {"email": "Alice@Example.com"},
            {"email": "alice@example.com"},
            {"webhook": "https://hooks.example.com/in"},
        ]
    )
    assert found == (
        Recipient(Channel.EMAIL, "Alice@Example.com"),
        Recipient(Channel.WEBHOOK, "https://hooks.example.com/in"),
    )


def test_a_chat_url_is_masked_to_its_host_and_never_echoed_when_refused() -> None:
    """A Slack or Teams URL is a secret: masked it is its host only, and a refusal of a bad
    one shows no more than that."""
    slack = Recipient(Channel.SLACK, "https://hooks.slack.com/services/T1/B2/s3cr3t")
    assert slack.masked() == Recipient(Channel.SLACK, "https://hooks.slack.com/***")
    with pytest.raises(InvalidRequestError) as caught:
        parse_recipients([{"slack": "http://hooks.slack.com/services/T1/B2/s3cr3t"}])
    assert "s3cr3t" not in str(caught.value)
    assert "'http://hooks.slack.com/***'" in str(caught.value)


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        ("* * * * *", "1m"),
        ("*/4 * * * *", "4m"),
        ("0,3 8 * * *", "3m"),  # twice a day, 3 minutes apart
        ("59 23 31 12 *", None),  # once a year
        ("*/5 * * * *", None),
        ("0 8,9 * * 1-5", None),
    ],
)
def test_a_timetable_firing_more_often_than_the_minimum_is_refused(
    cron: str, gap: str | None
) -> None:
    """Two consecutive due times closer than 5 minutes anywhere in the next fires are refused
    naming cron and the gap; every 5 minutes or more is accepted."""
    after = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    if gap is None:
        check_min_interval(cron, BERLIN, timedelta(minutes=5), after)
        return
    with pytest.raises(InvalidRequestError, match=f"fires {gap} apart") as refused:
        check_min_interval(cron, BERLIN, timedelta(minutes=5), after)
    assert refused.value.field == "cron"
