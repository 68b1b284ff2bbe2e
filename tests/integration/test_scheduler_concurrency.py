"""Several schedulers at once over one database, on SQLite and PostgreSQL: every due time of a
simulated day fires exactly one export, with exactly one delivery per recipient; and the
scheduler loop outlives a pass that fails."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from qexport.config import Settings
from qexport.domain.failures import MetadataUnavailableError
from qexport.domain.queries import Query
from qexport.domain.schedules import Channel, Missed, Recipient, Schedule, next_due
from qexport.scheduler.loop import Scheduler
from qexport.services.schedules import tick as schedule_tick
from qexport.store.deliveries import SqlDeliveryStore
from qexport.store.engine import create_engine
from qexport.store.schedules import SqlScheduleStore
from qexport.store.tables.exports import exports
from qexport.store.tables.schedules import deliveries, schedule_runs
from tests.fakes import FixedSources, FrozenClock, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.stores import SqlMetadataStore

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # a Monday
DAY = timedelta(days=1)
# A step that divides none of the periods: due times are ticked up to 4 minutes late, which
# is on time with a grace of one step (a scheduler polling every 4 minutes).
STEP = timedelta(minutes=4)
TIMETABLES = [
    ("*/15 * * * *", "UTC"),
    ("0 * * * *", "Europe/Berlin"),
    ("0 8,17 * * 1-5", "America/New_York"),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """The URL of a fresh migrated database, on each backend."""
    store: SqlMetadataStore = request.getfixturevalue(f"{request.param}_store")
    return store.engine.url.render_as_string(hide_password=False)


class SteppingClock:
    """One simulated clock shared by every scheduler; moved only between ticks."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def step(self) -> None:
        self._now += STEP


def _add_schedules(url: str) -> list[Schedule]:
    engine = create_engine(url)
    store, schedules = SqlMetadataStore(engine), SqlScheduleStore(engine)
    query = store.add_query(
        Query(str(uuid.uuid4()), "w1", "orders", "select 1", "demo", owner="alice")
    )
    added = []
    for cron, zone in TIMETABLES:
        key = cron.replace(" ", "").replace("*", "x").replace("/", "-").replace(",", "_")
        added.append(
            schedules.add_schedule(
                Schedule(
                    id=str(uuid.uuid4()),
                    workspace_id="w1",
                    owner="alice",
                    subject_type="query",
                    subject_id=query.id,
                    format="csv",
                    parameters={},
                    cron=cron,
                    timezone=zone,
                    recipients=(
                        Recipient(Channel.EMAIL, f"team-{key}@example.com"),
                        Recipient(Channel.WEBHOOK, f"https://hooks.example.com/{key}"),
                    ),
                    missed=Missed.SKIP,
                    next_due_at=next_due(cron, zone, START - timedelta(microseconds=1)),
                    created_at=START - DAY,
                )
            )
        )
    engine.dispose()
    return added


def _run_schedulers(url: str, count: int, clock: SteppingClock, end: datetime) -> int:
    """`count` threads, each with its own engine and stores, ticking the same instants at
    once until the clock passes `end`; returns how many exports they reported fired."""
    # The barrier's action moves the clock once all have finished the previous tick.
    barrier = threading.Barrier(count, action=clock.step, timeout=60)
    errors: list[BaseException] = []
    fired = Counter[int]()
    steps = int((end - clock.now()) / STEP)

    def scheduler(index: int) -> None:
        engine = create_engine(url)
        store, schedules = SqlMetadataStore(engine), SqlScheduleStore(engine)
        try:
            for _ in range(steps):
                barrier.wait()
                result = schedule_tick.tick(store, schedules, clock, grace=STEP)
                fired[index] += len(result.fired)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            engine.dispose()

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return sum(fired.values())


def _expected_due_times(schedule: Schedule, last_tick: datetime) -> set[datetime]:
    found = set()
    at = next_due(schedule.cron, schedule.timezone, START - timedelta(microseconds=1))
    while at <= last_tick:
        found.add(at)
        at = next_due(schedule.cron, schedule.timezone, at)
    return found


@pytest.mark.parametrize("count", [2, 4])
def test_concurrent_schedulers_fire_each_due_time_once_with_one_delivery_per_recipient(
    database_url: str, count: int
) -> None:
    """Over a simulated day, `count` schedulers tick every instant together: each schedule's
    exports are exactly its due times (24*4 + 24 + 2), each export has exactly one delivery
    per recipient, and nothing was written twice or left without its run."""
    added = _add_schedules(database_url)
    clock = SteppingClock(START - STEP)
    reported = _run_schedulers(database_url, count, clock, START + DAY - STEP)
    last_tick = clock.now()

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            runs = conn.execute(
                sa.select(schedule_runs.c.schedule_id, schedule_runs.c.due_at)
            ).all()
            export_count = conn.execute(sa.select(sa.func.count()).select_from(exports)).scalar()
            delivery_rows = conn.execute(
                sa.select(deliveries.c.export_id, deliveries.c.channel, deliveries.c.target)
            ).all()
        by_schedule: dict[str, list[datetime]] = {s.id: [] for s in added}
        for run in runs:
            by_schedule[run.schedule_id].append(run.due_at)
        for schedule in added:
            fired = by_schedule[schedule.id]
            assert len(fired) == len(set(fired))
            assert set(fired) == _expected_due_times(schedule, last_tick), schedule.cron
        assert [len(by_schedule[s.id]) for s in added] == [96, 24, 2]
        assert export_count == len(runs) == reported

        store = SqlDeliveryStore(engine)
        exports_by_schedule = _exports_of(engine)
        for schedule in added:
            for export_id in exports_by_schedule[schedule.id]:
                got = [d.recipient for d in store.list_deliveries(export_id)]
                assert sorted(got, key=str) == sorted(schedule.recipients, key=str)
        assert len(delivery_rows) == len(set(delivery_rows)) == 2 * len(runs)
    finally:
        engine.dispose()


def _exports_of(engine: sa.Engine) -> dict[str, list[str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(schedule_runs.c.schedule_id, schedule_runs.c.export_id))
        found: dict[str, list[str]] = {}
        for row in rows:
            found.setdefault(row.schedule_id, []).append(row.export_id)
    return found


# ---------------------------------------------------------------- the loop


class _FlakySchedules(SqlScheduleStore):
    """The first look for due schedules finds the database unavailable."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self.failures_left = 1

    def due_schedules(self, now: datetime, *, limit: int = 100) -> list[Schedule]:
        if self.failures_left:
            self.failures_left -= 1
            raise MetadataUnavailableError("the metadata database is unavailable: test")
        return super().due_schedules(now, limit=limit)


class _CountingDispatcher:
    def __init__(self) -> None:
        self.passes = 0
        self.enough = threading.Event()

    def run_once(self) -> int:
        self.passes += 1
        if self.passes >= 3:
            self.enough.set()
        return 0


def test_the_scheduler_loop_survives_a_failing_pass_and_stops_on_request(
    sqlite_store: SqlMetadataStore, tmp_path: Path
) -> None:
    """A pass that finds the database unavailable is reported as failed (the dispatcher
    still runs); the next pass fires the due schedule, and stop() ends the loop."""
    due = _schedule_due_now(sqlite_store)
    clock = FrozenClock(due.next_due_at)
    settings = Settings(data_dir=tmp_path, scheduler_poll_seconds=0.01)
    deps = container_of(
        sqlite_store,
        InMemoryObjectStore(),
        FixedSources({}),
        clock,
        settings,
        schedules=_FlakySchedules(sqlite_store.engine),
    )
    dispatcher = _CountingDispatcher()
    runner = Scheduler(deps, dispatcher=dispatcher)

    first = runner.run_once()
    assert not first.ok
    assert first.fired == []
    assert dispatcher.passes == 1

    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        assert dispatcher.enough.wait(30)
    finally:
        runner.stop()
        thread.join(30)
    assert not thread.is_alive()
    exported = sqlite_store.list_exports(workspace_id="w1")
    assert len(exported) == 1
    moved = SqlScheduleStore(sqlite_store.engine).get_schedule(due.id)
    assert moved is not None
    assert moved.next_due_at == due.next_due_at + timedelta(hours=1)


def _schedule_due_now(store: SqlMetadataStore) -> Schedule:
    query = store.add_query(
        Query(str(uuid.uuid4()), "w1", "orders", "select 1", "demo", owner="alice")
    )
    return SqlScheduleStore(store.engine).add_schedule(
        Schedule(
            id=str(uuid.uuid4()),
            workspace_id="w1",
            owner="alice",
            subject_type="query",
            subject_id=query.id,
            format="csv",
            parameters={},
            cron="0 * * * *",
            timezone="UTC",
            recipients=(Recipient(Channel.EMAIL, "team@example.com"),),
            next_due_at=START,
            created_at=START - DAY,
        )
    )
