"""`qexport scheduler` as real processes: two at once fire a due schedule once and its
recipient gets one mail; after downtime a schedule fires once or not at all, as it chose."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from qexport.domain.exports import Status
from qexport.domain.schedules import Channel, DeliveryStatus, Missed, Recipient, Schedule
from qexport.store.deliveries import SqlDeliveryStore
from qexport.store.schedules import SqlScheduleStore
from qexport.store.tables.schedules import schedule_runs
from tests.e2e.conftest import Env, wait_for
from tests.support.receivers import SmtpServer, smtp_server

__all__ = ["smtp_server"]  # the fixture, for `mail_server`

TEAM = "team@example.com"
YEARLY = "0 8 1 1 *"  # never due again while a test runs: only the stored due time fires


@pytest.fixture
def mail_server(request: pytest.FixtureRequest) -> SmtpServer:
    """An SMTP server recording the mails it receives."""
    return request.getfixturevalue("smtp_server")  # type: ignore[no-any-return]


def _start_scheduler(env: Env, *args: str) -> subprocess.Popen[bytes]:
    with (env.data_dir / f"scheduler-{len(env.procs)}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qexport", "scheduler", *args],
            env={**env.environ, "QEXPORT_SCHEDULER_POLL_SECONDS": "0.2"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    env.procs.append(proc)
    return proc


def _add_schedule(env: Env, *, due_at: datetime, missed: Missed = Missed.ONCE) -> Schedule:
    query = env.store.find_query("demo", "team_orders")
    if query is None:
        env.add_query(
            "team_orders", "SELECT order_id, total FROM orders ORDER BY order_id LIMIT 25"
        )
        query = env.store.find_query("demo", "team_orders")
    assert query is not None
    return SqlScheduleStore(env.store.engine).add_schedule(
        Schedule(
            id=str(uuid.uuid4()),
            workspace_id="demo",
            owner="alice",
            subject_type="query",
            subject_id=query.id,
            format="csv",
            parameters={},
            cron=YEARLY,
            timezone="Europe/Berlin",
            recipients=(Recipient(Channel.EMAIL, TEAM),),
            missed=missed,
            next_due_at=due_at,
            created_at=due_at - timedelta(days=1),
        )
    )


def _runs(env: Env, schedule_id: str) -> list[str]:
    with env.store.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(schedule_runs.c.export_id).where(
                    schedule_runs.c.schedule_id == schedule_id
                )
            ).scalars()
        )


def _next_run(env: Env, schedule_id: str) -> datetime:
    found = SqlScheduleStore(env.store.engine).get_schedule(schedule_id)
    assert found is not None
    assert found.next_due_at is not None
    return found.next_due_at


def test_two_schedulers_fire_a_due_schedule_once_and_mail_it_once(
    linked_env: Env, mail_server: SmtpServer
) -> None:
    """Two schedulers racing over one database: one export for the due time, the worker
    produces it, and the team gets exactly one mail with a link to the file; SIGTERM stops
    both schedulers cleanly."""
    linked_env.extra["QEXPORT_SMTP_URL"] = mail_server.url
    schedule = _add_schedule(linked_env, due_at=datetime.now(UTC) - timedelta(seconds=3))
    schedulers = [_start_scheduler(linked_env), _start_scheduler(linked_env)]

    runs = wait_for(lambda: _runs(linked_env, schedule.id))
    worker = linked_env.start_worker("--drain", QEXPORT_POLL_SECONDS="0.05")
    assert worker.wait(timeout=120) == 0
    assert linked_env.record(runs[0]).status is Status.SUCCEEDED
    deliveries = SqlDeliveryStore(linked_env.store.engine)
    wait_for(
        lambda: [d.status for d in deliveries.list_deliveries(runs[0])] == [DeliveryStatus.SENT]
    )
    for proc in schedulers:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in schedulers] == [0, 0]

    assert _runs(linked_env, schedule.id) == runs
    assert len(linked_env.store.list_exports(workspace_id="demo")) == 1
    mails = mail_server.to(TEAM)
    assert len(mails) == 1
    assert mails[0].message["X-QExport-Delivery"] == deliveries.list_deliveries(runs[0])[0].id
    # The link points at QEXPORT_PUBLIC_BASE_URL.
    assert re.search(r"http://qexport\.test/p/[A-Za-z0-9_-]{43}", mails[0].text), mails[0].text
    logs = "".join(
        (linked_env.data_dir / f"scheduler-{i}.log").read_text() for i in range(len(schedulers))
    )
    assert logs.count("schedule_fired") == 1
    assert logs.count("scheduler_stopped") == 2


def test_after_downtime_a_schedule_fires_once_or_skips_as_it_chose(linked_env: Env) -> None:
    """Both schedules were due an hour ago while no scheduler ran: the `skip` one fires
    nothing, the `once` one fires one export; both wait for their next due time, and a
    second pass fires nothing more."""
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    skip = _add_schedule(linked_env, due_at=an_hour_ago, missed=Missed.SKIP)
    once = _add_schedule(linked_env, due_at=an_hour_ago, missed=Missed.ONCE)

    linked_env.run("scheduler", "--once")
    linked_env.run("scheduler", "--once")

    assert _runs(linked_env, skip.id) == []
    fired = _runs(linked_env, once.id)
    assert len(fired) == 1
    assert [r.id for r in linked_env.store.list_exports(workspace_id="demo")] == fired
    now = datetime.now(UTC)
    for schedule in (skip, once):
        assert _next_run(linked_env, schedule.id) > now


def test_a_scheduler_without_a_public_base_url_refuses_to_start(linked_env: Env) -> None:
    """Without QEXPORT_PUBLIC_BASE_URL the scheduler would send links nobody can open: it
    exits 2 with one line naming the variable, before firing anything."""
    schedule = _add_schedule(linked_env, due_at=datetime.now(UTC) - timedelta(seconds=3))
    del linked_env.extra["QEXPORT_PUBLIC_BASE_URL"]
    refused = linked_env.run("scheduler", "--once", check=False)
    assert refused.returncode == 2
    assert "scheduler cannot start: QEXPORT_PUBLIC_BASE_URL is not set" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert _runs(linked_env, schedule.id) == []
