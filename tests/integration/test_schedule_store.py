"""The schedule and delivery stores on SQLite, PostgreSQL and in memory: firing a due time
is one idempotent transaction, and deliveries follow waiting -> sending -> sent | failed,
fenced. The `store` fixture is parametrised over the backends; the in-memory fakes keep the
same contract as the SQL stores."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from qexport.domain.exports import Result
from qexport.domain.failures import FailureCode, InvalidRequestError, TooManyRequestsError
from qexport.domain.schedules import (
    Channel,
    DeliveryStatus,
    Missed,
    NewDelivery,
    Outcome,
    Recipient,
    Schedule,
)
from qexport.ports import DeliveryStore, ScheduleStore
from qexport.store.accounts import SqlAccountStore
from qexport.store.deliveries import SqlDeliveryStore
from qexport.store.schedules import SqlScheduleStore
from tests.fakes import InMemoryDeliveryStore, InMemoryMetadataStore, InMemoryScheduleStore
from tests.support import queue_helpers
from tests.support.factories import new_export
from tests.support.stores import MetadataStore, SqlMetadataStore

NOW = datetime(2026, 3, 2, 7, 0, tzinfo=UTC)
LEASE = 30.0
ALICE = Recipient(Channel.EMAIL, "alice@example.com")
HOOK = Recipient(Channel.WEBHOOK, "https://hooks.example.com/qexport")


@pytest.fixture
def schedules(store: MetadataStore) -> ScheduleStore:
    if isinstance(store, InMemoryMetadataStore):
        return InMemoryScheduleStore(store)
    assert isinstance(store, SqlMetadataStore)
    return SqlScheduleStore(store.engine)


@pytest.fixture
def delivery_store(store: MetadataStore) -> DeliveryStore:
    if isinstance(store, InMemoryMetadataStore):
        return InMemoryDeliveryStore(store)
    assert isinstance(store, SqlMetadataStore)
    return SqlDeliveryStore(store.engine)


def _schedule(**changes: object) -> Schedule:
    schedule = Schedule(
        id=str(uuid.uuid4()),
        workspace_id="w1",
        owner="alice",
        subject_type="query",
        subject_id="q1",
        format="csv",
        parameters={"since": "2024-01-01"},
        cron="0 8 * * 1",
        timezone="Europe/Berlin",
        recipients=(ALICE, HOOK),
        missed=Missed.SKIP,
        next_due_at=NOW,
        created_at=NOW - timedelta(days=1),
    )
    return replace(schedule, **changes)  # type: ignore[arg-type]


def _deliveries(schedule_id: str | None = None) -> list[NewDelivery]:
    return [NewDelivery(str(uuid.uuid4()), r, schedule_id) for r in (ALICE, HOOK)]


def test_a_schedule_reads_back_whole_and_deletes_softly(schedules: ScheduleStore) -> None:
    """Every field survives the round trip; a deleted schedule is listed no more and is no
    longer due, but still reads by id, marked deleted."""
    schedule = schedules.add_schedule(_schedule())
    assert schedules.get_schedule(schedule.id) == schedule
    assert schedules.list_schedules("w1") == [schedule]
    assert schedules.due_schedules(NOW) == [schedule]
    assert schedules.delete_schedule(schedule.id, now=NOW)
    assert schedules.list_schedules("w1") == []
    assert schedules.due_schedules(NOW) == []
    assert schedules.get_schedule(schedule.id).deleted  # type: ignore[union-attr]


def test_firing_a_due_time_twice_records_one_export(
    store: MetadataStore, schedules: ScheduleStore, delivery_store: DeliveryStore
) -> None:
    """The second scheduler to fire the same due time writes nothing: not the export, not
    its deliveries, not the move of the timetable."""
    schedule = schedules.add_schedule(_schedule())
    later = NOW + timedelta(days=7)
    first = schedules.fire(
        schedule.id,
        due_at=NOW,
        new=new_export(NOW),
        deliveries=_deliveries(schedule.id),
        expected=NOW,
        next_due_at=later,
    )
    assert first is not None
    # A scheduler that read the schedule before the move: its guard no longer matches.
    assert (
        schedules.fire(
            schedule.id,
            due_at=NOW,
            new=new_export(NOW),
            deliveries=_deliveries(schedule.id),
            expected=NOW,
            next_due_at=later,
        )
        is None
    )
    # Without the guard (run-now racing a tick at the same instant) the run key refuses it.
    assert (
        schedules.fire(
            schedule.id, due_at=NOW, new=new_export(NOW), deliveries=_deliveries(schedule.id)
        )
        is None
    )
    assert len(store.list_exports(workspace_id="w1")) == 1
    assert [d.recipient for d in delivery_store.list_deliveries(first.id)] == [ALICE, HOOK]
    assert schedules.get_schedule(schedule.id).next_due_at == later  # type: ignore[union-attr]


def test_deliveries_wait_for_their_export_then_go_out_once(
    store: MetadataStore, delivery_store: DeliveryStore
) -> None:
    """Nothing is claimable while the export is unsettled; then each delivery is claimed by
    one sender, and only the lease holder may settle it."""
    record = store.insert_export(new_export(NOW), _deliveries())
    assert delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE) is None
    claimed = queue_helpers.claim(store, record.id, worker_id="w", now=NOW, lease_seconds=LEASE)
    assert claimed is not None
    assert claimed.lease_token is not None
    result = Result(size_bytes=10, row_count=2, sha256="a" * 64)
    assert store.succeed(
        record.id, claimed.lease_token, now=NOW, result=result, expires_at=NOW + timedelta(days=7)
    )
    first = delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE)
    second = delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE)
    assert first is not None
    assert second is not None
    assert first.delivery.id != second.delivery.id
    assert delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE) is None
    assert first.export.row_count == 2
    assert first.delivery.status is DeliveryStatus.SENDING
    assert first.delivery.attempt == 1
    assert not delivery_store.mark_sent(
        first.delivery.id, "not-the-lease", now=NOW, outcome=Outcome.FILE
    )
    token = first.delivery.lease_token
    assert token is not None
    assert delivery_store.mark_sent(first.delivery.id, token, now=NOW, outcome=Outcome.FILE)
    assert not delivery_store.mark_failed(first.delivery.id, token, now=NOW, error="late")
    # The other is retried later, then claimed again by whoever comes after its retry time.
    token2 = second.delivery.lease_token
    assert token2 is not None
    retry_at = NOW + timedelta(seconds=60)
    assert delivery_store.release_delivery(
        second.delivery.id, token2, retry_at=retry_at, error="503"
    )
    assert delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE) is None
    again = delivery_store.claim_delivery(now=retry_at, lease_seconds=LEASE)
    assert again is not None
    assert again.delivery.attempt == 2
    assert again.delivery.last_error == "503"
    by_id = {d.id: d for d in delivery_store.list_deliveries(record.id)}
    assert by_id[first.delivery.id].status is DeliveryStatus.SENT
    assert by_id[first.delivery.id].outcome is Outcome.FILE


def test_a_sender_that_died_has_its_delivery_taken_over(
    store: MetadataStore, delivery_store: DeliveryStore
) -> None:
    """A delivery left `sending` past its lease is claimed again with a new lease; the dead
    sender's token no longer settles it. A failed export's deliveries go out too."""
    record = store.insert_export(new_export(NOW), _deliveries()[:1])
    assert queue_helpers.fail_before_run(
        store, record.id, now=NOW, code=FailureCode.ACCESS_LOST, detail="x"
    )
    first = delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE)
    assert first is not None
    assert first.export.failure_code is FailureCode.ACCESS_LOST
    later = NOW + timedelta(seconds=LEASE + 1)
    taken = delivery_store.claim_delivery(now=later, lease_seconds=LEASE)
    assert taken is not None
    assert taken.delivery.attempt == 2
    assert first.delivery.lease_token is not None
    assert not delivery_store.mark_sent(
        first.delivery.id, first.delivery.lease_token, now=later, outcome=Outcome.FAILURE
    )
    assert taken.delivery.lease_token is not None
    assert delivery_store.mark_failed(
        taken.delivery.id, taken.delivery.lease_token, now=later, error="mailbox unknown"
    )
    assert not delivery_store.has_unsent()


def test_a_failed_delivery_sent_again_waits_with_a_fresh_budget_and_one_claim(
    store: MetadataStore, delivery_store: DeliveryStore
) -> None:
    """send_again moves only a failed delivery (of that export) back to waiting, due now,
    with `tries` from 0 while `attempt` keeps counting, and who and when recorded; the next
    claim takes it once, under a new lease, and the old lease settles nothing."""
    record = store.insert_export(new_export(NOW), _deliveries()[:1])
    assert queue_helpers.fail_before_run(
        store, record.id, now=NOW, code=FailureCode.ACCESS_LOST, detail="x"
    )
    claimed = delivery_store.claim_delivery(now=NOW, lease_seconds=LEASE)
    assert claimed is not None
    delivery, old_token = claimed.delivery, claimed.delivery.lease_token
    assert old_token is not None
    assert not delivery_store.send_again(record.id, delivery.id, now=NOW, by="ann")  # sending
    assert delivery_store.mark_failed(
        delivery.id, old_token, now=NOW, error="refused", code=FailureCode.DESTINATION_REFUSED
    )
    later = NOW + timedelta(minutes=5)
    assert not delivery_store.send_again("another-export", delivery.id, now=later, by="ann")
    assert delivery_store.send_again(record.id, delivery.id, now=later, by="ann")
    assert not delivery_store.send_again(record.id, delivery.id, now=later, by="ann")  # waiting
    (waiting,) = delivery_store.list_deliveries(record.id)
    assert waiting.status is DeliveryStatus.WAITING
    assert (waiting.attempt, waiting.attempts_spent, waiting.tries) == (1, 1, 0)
    assert (waiting.resent_at, waiting.resent_by) == (later, "ann")
    assert waiting.failure_code is None
    assert waiting.last_error == "refused"  # why it failed, until the next attempt says
    assert delivery_store.has_unsent()
    again = delivery_store.claim_delivery(now=later, lease_seconds=LEASE)
    assert again is not None
    assert delivery_store.claim_delivery(now=later, lease_seconds=LEASE) is None
    assert (again.delivery.id, again.delivery.attempt, again.delivery.tries) == (delivery.id, 2, 1)
    assert again.delivery.lease_token not in (None, old_token)
    assert not delivery_store.mark_sent(delivery.id, old_token, now=later, outcome=Outcome.FAILURE)
    assert again.delivery.lease_token is not None
    assert delivery_store.mark_sent(
        delivery.id, again.delivery.lease_token, now=later, outcome=Outcome.FAILURE
    )
    assert not delivery_store.send_again(record.id, delivery.id, now=later, by="ann")  # sent


def test_a_schedules_runs_are_listed_newest_first_with_their_exports(
    store: MetadataStore, schedules: ScheduleStore
) -> None:
    """list_runs gives each fired due time (run now included) and its export, newest first,
    at most `limit`; another schedule's runs are not among them."""
    schedule = schedules.add_schedule(_schedule())
    other = schedules.add_schedule(_schedule())
    fired = []
    for hours in range(3):
        due = NOW + timedelta(hours=hours)
        record = schedules.fire(schedule.id, due_at=due, new=new_export(due), deliveries=[])
        assert record is not None
        fired.append((due, record.id))
    schedules.fire(other.id, due_at=NOW, new=new_export(NOW), deliveries=[])
    runs = schedules.list_runs(schedule.id, limit=2)
    assert [(r.due_at, r.export.id) for r in runs] == fired[::-1][:2]
    assert runs[0].export.status.value == "queued"
    assert len(schedules.list_runs(schedule.id)) == 3
    assert schedules.list_runs("no-such-schedule") == []


def test_instance_secret_is_generated_once(schedules: ScheduleStore) -> None:
    """Every caller gets the value the first one stored."""
    first = schedules.instance_secret("webhook", lambda: "one", now=NOW)
    assert schedules.instance_secret("webhook", lambda: "two", now=NOW) == first == "one"


def test_advance_moves_the_due_time_once(schedules: ScheduleStore) -> None:
    """Skipping a due time moves the timetable on for the first scheduler only; a paused
    schedule is not moved, and a moved schedule is due again at its new time."""
    schedule = schedules.add_schedule(_schedule())
    later = NOW + timedelta(days=7)
    assert schedules.advance(schedule.id, expected=NOW, next_due_at=later)
    assert not schedules.advance(schedule.id, expected=NOW, next_due_at=later + timedelta(days=7))
    assert schedules.due_schedules(NOW) == []
    assert [s.id for s in schedules.due_schedules(later)] == [schedule.id]
    paused = schedules.add_schedule(_schedule(enabled=False))
    assert not schedules.advance(paused.id, expected=NOW, next_due_at=later)
    assert schedules.get_schedule(paused.id).next_due_at == NOW  # type: ignore[union-attr]


def test_due_schedules_are_the_enabled_live_ones_oldest_first(schedules: ScheduleStore) -> None:
    """Only enabled, undeleted schedules whose time has come are due, the longest-waiting
    first, at most `limit` of them."""
    oldest = schedules.add_schedule(_schedule(next_due_at=NOW - timedelta(hours=2)))
    older = schedules.add_schedule(_schedule(next_due_at=NOW - timedelta(hours=1)))
    now = schedules.add_schedule(_schedule(next_due_at=NOW))
    schedules.add_schedule(_schedule(next_due_at=NOW + timedelta(seconds=1)))
    schedules.add_schedule(_schedule(enabled=False, next_due_at=NOW - timedelta(hours=3)))
    gone = schedules.add_schedule(_schedule(next_due_at=NOW - timedelta(hours=4)))
    assert schedules.delete_schedule(gone.id, now=NOW)
    assert [s.id for s in schedules.due_schedules(NOW)] == [oldest.id, older.id, now.id]
    assert [s.id for s in schedules.due_schedules(NOW, limit=2)] == [oldest.id, older.id]


def test_firing_over_the_unsettled_cap_writes_nothing(
    store: MetadataStore, schedules: ScheduleStore, delivery_store: DeliveryStore
) -> None:
    """An owner who already has `max_unsettled` exports waiting gets no new one: the due time
    is not moved and not spent, so it fires once the cap allows; a schedule that does not
    exist fires nothing."""
    schedule = schedules.add_schedule(_schedule())
    store.insert_export(new_export(NOW))
    later = NOW + timedelta(days=7)
    refused = new_export(NOW)
    with pytest.raises(TooManyRequestsError):
        schedules.fire(
            schedule.id,
            due_at=NOW,
            new=refused,
            deliveries=_deliveries(schedule.id),
            expected=NOW,
            next_due_at=later,
            max_unsettled=1,
        )
    assert store.get_export(refused.id) is None
    assert delivery_store.list_deliveries(refused.id) == []
    assert schedules.get_schedule(schedule.id).next_due_at == NOW  # type: ignore[union-attr]
    fired = schedules.fire(
        schedule.id,
        due_at=NOW,
        new=new_export(NOW),
        deliveries=_deliveries(schedule.id),
        expected=NOW,
        next_due_at=later,
        max_unsettled=2,
    )
    assert fired is not None
    assert len(delivery_store.list_deliveries(fired.id)) == 2
    orphan = new_export(NOW)
    assert schedules.fire("no-such-schedule", due_at=NOW, new=orphan, deliveries=()) is None
    assert store.get_export(orphan.id) is None


def test_a_schedule_is_updated_paused_and_capped(schedules: ScheduleStore) -> None:
    """An update replaces the settings of a live schedule (never its workspace); pausing an
    owner's schedules counts the enabled ones; the cap counts live schedules only."""
    schedule = schedules.add_schedule(_schedule(), max_per_workspace=2)
    changed = replace(schedule, workspace_id="elsewhere", cron="0 9 * * *", next_due_at=NOW)
    assert schedules.update_schedule(changed)
    stored = schedules.get_schedule(schedule.id)
    assert stored is not None
    assert (stored.workspace_id, stored.cron) == ("w1", "0 9 * * *")
    other = schedules.add_schedule(_schedule(owner="bob"), max_per_workspace=2)
    with pytest.raises(InvalidRequestError):
        schedules.add_schedule(_schedule(), max_per_workspace=2)
    assert schedules.pause_owned("w1", "alice") == 1
    assert schedules.pause_owned("w1", "alice") == 0
    assert not schedules.get_schedule(schedule.id).enabled  # type: ignore[union-attr]
    assert schedules.get_schedule(other.id).enabled  # type: ignore[union-attr]
    assert schedules.delete_schedule(other.id, now=NOW)
    assert not schedules.update_schedule(replace(other, cron="0 9 * * *"))
    assert not schedules.delete_schedule(other.id, now=NOW)
    schedules.add_schedule(_schedule(), max_per_workspace=2)
    assert len(schedules.list_schedules("w1")) == 2


def _users(store: MetadataStore, *user_ids: str) -> None:
    """Accounts for `user_ids` in the SQL stores (a subscriber refers to one); the in-memory
    store keeps no users."""
    if isinstance(store, SqlMetadataStore):
        accounts = SqlAccountStore(store.engine)
        for user_id in user_ids:
            accounts.create_user(
                f"{user_id}@example.com", password_hash=None, now=NOW, user_id=user_id
            )


def test_subscribers_are_kept_apart_from_the_schedule(
    store: MetadataStore, schedules: ScheduleStore
) -> None:
    """Subscribing twice is one subscription; subscribers come back in the order they
    subscribed; replacing the schedule's settings keeps them; `subscriptions` names the live
    schedules of that workspace only; unsubscribing ends it once."""
    _users(store, "vera", "bob")
    first = schedules.add_schedule(_schedule())
    other = schedules.add_schedule(_schedule(workspace_id="w2"))
    assert schedules.subscribe(first.id, "vera", now=NOW)
    assert not schedules.subscribe(first.id, "vera", now=NOW + timedelta(seconds=1))
    assert schedules.subscribe(first.id, "bob", now=NOW + timedelta(seconds=2))
    assert schedules.subscribe(other.id, "vera", now=NOW)
    assert not schedules.subscribe("no-such-schedule", "vera", now=NOW)
    assert schedules.subscribers(first.id) == ["vera", "bob"]
    assert schedules.update_schedule(replace(first, recipients=(), owner="bob"))
    assert schedules.subscribers(first.id) == ["vera", "bob"]
    assert schedules.subscriptions("w1", "vera") == {first.id}
    assert schedules.subscriptions("w2", "vera") == {other.id}
    assert schedules.subscriptions("w1", "carol") == frozenset()
    assert schedules.delete_schedule(first.id, now=NOW)
    assert schedules.subscriptions("w1", "vera") == frozenset()
    assert schedules.unsubscribe(other.id, "vera")
    assert not schedules.unsubscribe(other.id, "vera")
    assert schedules.subscriptions("w2", "vera") == frozenset()


def test_a_delivery_remembers_its_subscriber(
    store: MetadataStore, delivery_store: DeliveryStore
) -> None:
    """A subscriber's delivery reads back with their id; the owner's recipients with none."""
    subscriber = NewDelivery(
        str(uuid.uuid4()), Recipient(Channel.EMAIL, "vera@x.test"), None, "vera"
    )
    record = store.insert_export(new_export(NOW), [*_deliveries(), subscriber])
    found = {d.recipient.target: d.subscriber for d in delivery_store.list_deliveries(record.id)}
    assert found == {ALICE.target: None, HOOK.target: None, "vera@x.test": "vera"}
