"""Who among a schedule's subscribers gets a run, on the in-memory fakes: members who may read
its subject, each once at their own address; not the removed, the disabled, those who lost
the query or report, nor anyone when the subject's rows depend on who runs it."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from qexport.domain.accounts import Role
from qexport.domain.exports import Requester
from qexport.domain.queries import Query, Visibility
from qexport.domain.reports import SUBJECT_REPORT, Report, Section
from qexport.domain.schedules import Channel, Missed, Recipient, Schedule
from qexport.services.subscribers import reading_refusal, subscriber_deliveries
from tests.fakes import InMemoryAccountStore, InMemoryMetadataStore, InMemoryScheduleStore

NOW = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)


class World:
    def __init__(self) -> None:
        self.catalog = InMemoryMetadataStore()
        self.accounts = InMemoryAccountStore()
        self.schedules = InMemoryScheduleStore(self.catalog)
        self.accounts.ensure_workspace("acme", now=NOW)
        self.catalog.add_query(Query("q1", "acme", "orders", "SELECT 1 AS one", "shop"))

    def member(self, email: str, role: Role = Role.VIEWER) -> str:
        user = self.accounts.create_user(email, password_hash=None, now=NOW)
        self.accounts.set_role("acme", user.id, role)
        return user.id

    def schedule(
        self, *recipients: Recipient, subject: tuple[str, str] = ("query", "q1")
    ) -> Schedule:
        schedule = Schedule(
            id=str(uuid.uuid4()),
            workspace_id="acme",
            owner=self.member(f"owner-{uuid.uuid4().hex[:6]}@acme.test", Role.EDITOR),
            subject_type=subject[0],
            subject_id=subject[1],
            format="csv",
            parameters={},
            cron="0 8 * * 1",
            timezone="UTC",
            recipients=recipients,
            missed=Missed.ONCE,
            next_due_at=NOW,
            created_at=NOW,
        )
        return self.schedules.add_schedule(schedule)

    def heard(self, schedule: Schedule) -> list[tuple[str, str | None]]:
        found = subscriber_deliveries(self.catalog, self.accounts, self.schedules, schedule)
        return [(d.recipient.target, d.subscriber) for d in found]


@pytest.fixture
def subscribers_world() -> World:
    return World()


def test_each_subscriber_who_may_read_it_gets_a_delivery(subscribers_world: World) -> None:
    """In the order they subscribed, to their own address, marked as theirs."""
    schedule = subscribers_world.schedule()
    vera, ann = (
        subscribers_world.member("vera@acme.test"),
        subscribers_world.member("ann@acme.test"),
    )
    subscribers_world.schedules.subscribe(schedule.id, vera, now=NOW)
    subscribers_world.schedules.subscribe(schedule.id, ann, now=NOW.replace(minute=1))
    assert subscribers_world.heard(schedule) == [("vera@acme.test", vera), ("ann@acme.test", ann)]


def test_an_address_the_owner_already_names_is_heard_once(subscribers_world: World) -> None:
    """Compared without letter case, as recipients are."""
    schedule = subscribers_world.schedule(Recipient(Channel.EMAIL, "Vera@ACME.test"))
    subscribers_world.schedules.subscribe(
        schedule.id, subscribers_world.member("vera@acme.test"), now=NOW
    )
    assert subscribers_world.heard(schedule) == []


def test_removed_and_disabled_subscribers_are_left_out(subscribers_world: World) -> None:
    """No longer a member, or disabled: nothing for them."""
    schedule = subscribers_world.schedule()
    gone, off = (
        subscribers_world.member("gone@acme.test"),
        subscribers_world.member("off@acme.test"),
    )
    for user_id in (gone, off):
        subscribers_world.schedules.subscribe(schedule.id, user_id, now=NOW)
    subscribers_world.accounts.remove_member("acme", gone)
    subscribers_world.accounts.set_disabled(off, disabled_at=NOW)
    assert subscribers_world.heard(schedule) == []


def test_a_subscriber_who_may_not_read_the_query_is_left_out(subscribers_world: World) -> None:
    """The query made members-only without them: nothing; listed among its members: again."""
    schedule = subscribers_world.schedule()
    vera = subscribers_world.member("vera@acme.test")
    subscribers_world.schedules.subscribe(schedule.id, vera, now=NOW)
    query = subscribers_world.catalog.get_query("q1")
    assert query is not None
    subscribers_world.catalog.update_query(replace(query, visibility=Visibility.MEMBERS))
    assert subscribers_world.heard(schedule) == []
    subscribers_world.catalog.update_query(
        replace(query, visibility=Visibility.MEMBERS, members=frozenset({vera}))
    )
    assert subscribers_world.heard(schedule) == [("vera@acme.test", vera)]


def test_a_query_reading_user_id_is_nobodys_to_subscribe_to(subscribers_world: World) -> None:
    """Its rows are the owner's: whatever the spelling of $user_id, a refusal that says so,
    and no subscriber hears of a run (say it was edited after they subscribed)."""
    schedule = subscribers_world.schedule()
    vera = subscribers_world.member("vera@acme.test")
    subscribers_world.schedules.subscribe(schedule.id, vera, now=NOW)
    query = subscribers_world.catalog.get_query("q1")
    assert query is not None
    for sql in ("SELECT * FROM t WHERE o = $user_id", "SELECT $USER_ID AS me"):
        subscribers_world.catalog.update_query(replace(query, sql=sql))
        refusal = reading_refusal(subscribers_world.catalog, Requester(vera, "acme"), "query", "q1")
        assert refusal is not None
        assert refusal.per_person
        assert subscribers_world.heard(schedule) == []
    subscribers_world.catalog.update_query(replace(query, sql="SELECT $user_idx AS other"))
    assert (
        reading_refusal(subscribers_world.catalog, Requester(vera, "acme"), "query", "q1") is None
    )


def test_a_report_needs_every_section_readable(subscribers_world: World) -> None:
    """A report's subscriber must read the report and each section's query."""
    subscribers_world.catalog.add_query(
        Query("q2", "acme", "secret", "SELECT 2", "shop", visibility=Visibility.MEMBERS)
    )
    sections = (Section("One", "q1"), Section("Two", "q2"))
    subscribers_world.catalog.add_report(Report("r1", "acme", "Review", sections=sections))
    schedule = subscribers_world.schedule(subject=(SUBJECT_REPORT, "r1"))
    vera = subscribers_world.member("vera@acme.test")
    subscribers_world.schedules.subscribe(schedule.id, vera, now=NOW)
    assert subscribers_world.heard(schedule) == []
    refusal = reading_refusal(
        subscribers_world.catalog, Requester(vera, "acme"), SUBJECT_REPORT, "r1"
    )
    assert refusal is not None
    assert not refusal.per_person
