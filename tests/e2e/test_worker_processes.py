"""`qexport worker --processes P`: several worker processes under one supervisor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import structlog

from qexport.domain.exports import Status
from qexport.worker.processes import RENEW_EXIT_STATUS, Supervisor
from tests.e2e.conftest import Env, wait_for
from tests.e2e.test_worker_faults import BIG_SQL, FAST_LEASE
from tests.support import procfs


def _children(pid: int) -> set[int]:
    return set(procfs.children(pid))


def test_processes_drain_the_queue_each_with_its_own_id(env: Env) -> None:
    env.add_query("few", "SELECT * FROM customers LIMIT 50")
    ids = [env.request("few", fmt) for fmt in ("csv", "tsv", "jsonl", "parquet", "xlsx") * 4]
    supervisor = env.start_worker("--processes", "2", "--drain", QEXPORT_POLL_SECONDS="0.05")
    assert supervisor.wait(timeout=120) == 0
    records = [env.record(i) for i in ids]
    assert {r.status for r in records} == {Status.SUCCEEDED}
    assert all(r.worker_id for r in records)
    log = (env.data_dir / "worker-0.log").read_text()
    # Every record names the worker process that produced it, and that id is in the logs.
    for worker_id in {r.worker_id for r in records}:
        assert worker_id is not None
        assert worker_id in log
    assert log.count("worker_started") == 2


def test_sigterm_stops_every_process_and_a_killed_one_is_replaced(env: Env) -> None:
    env.add_query("big", BIG_SQL)
    export_id = env.request("big", "xlsx")
    supervisor = env.start_worker("--processes", "2", **FAST_LEASE)
    first = wait_for(lambda: len(_children(supervisor.pid)) == 2 and _children(supervisor.pid))
    wait_for(lambda: env.record(export_id).progress_rows > 0, timeout=60)
    holder = env.record(export_id).worker_id
    assert holder is not None
    # SIGKILL the child that holds the export: the supervisor starts a new one, and the export
    # is redelivered (lease expiry) and completes.
    victim = next(pid for pid in first if f"-{pid}-" in holder)
    os.kill(victim, signal.SIGKILL)
    replaced = lambda: victim not in (now := _children(supervisor.pid)) and len(now) == 2  # noqa: E731
    wait_for(replaced)
    wait_for(lambda: env.record(export_id).status is Status.SUCCEEDED, timeout=180)
    done = env.record(export_id)
    # At least the one redelivery. On a loaded machine a 1.5 s lease can also lapse under the
    # second attempt, and the other process then takes a third: still one file, one success.
    assert done.attempt >= 2
    assert done.worker_id != holder
    assert supervisor.poll() is None

    children = _children(supervisor.pid)
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0
    assert not any(procfs.alive(pid) for pid in children)
    assert "worker_stopped" in (env.data_dir / "worker-0.log").read_text()


def test_a_stop_signal_while_the_processes_start_starts_no_more(tmp_path: Path) -> None:
    """SIGTERM to a supervisor still forking its children (a process manager's stop, Ctrl-C,
    `timeout`) starts none after it and ends those it had started; `run` then returns."""
    started = tmp_path / "started"
    started.mkdir()

    def target(index: int) -> None:
        (started / str(index)).touch()
        time.sleep(120)  # until the supervisor's SIGTERM ends it

    class SignalledAfterTheFirst(Supervisor):
        def _start(self, child: Any) -> None:
            super()._start(child)
            if child.index == 0:
                os.kill(os.getpid(), signal.SIGTERM)

    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    supervisor = SignalledAfterTheFirst(target, 20, kind="server", poll_seconds=0.05)
    try:
        supervisor.install_signal_handlers()
        with structlog.testing.capture_logs() as logs:
            assert supervisor.run() == 0
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    events = [e["event"] for e in logs]
    assert events.count("server_process_started") == 1
    assert "supervisor_stopping" in events
    assert {p.name for p in started.iterdir()} <= {"0"}
    first = next(e["pid"] for e in logs if e["event"] == "server_process_started")
    assert not procfs.alive(first)


def test_a_process_that_asks_to_be_renewed_is_started_again_at_once(tmp_path: Path) -> None:
    """A worker process that exits with RENEW_EXIT_STATUS (its allocators keep memory it no
    longer uses) is replaced at once: not after the crash backoff, not logged as a failure."""
    runs = tmp_path / "runs"
    runs.mkdir()

    def target(_index: int) -> None:
        run = len(list(runs.iterdir()))
        (runs / str(run)).touch()
        if run == 0:
            raise SystemExit(RENEW_EXIT_STATUS)

    supervisor = Supervisor(target, 1, drain=True, poll_seconds=0.05)
    with structlog.testing.capture_logs() as logs:
        assert supervisor.run() == 0
    events = [e["event"] for e in logs]
    assert events.count("worker_process_started") == 2
    assert "worker_process_renewed" in events
    assert "worker_process_exited" not in events


def test_a_lone_worker_renews_itself_in_place() -> None:
    """Without a supervisor, a worker that keeps its memory executes its own command again:
    the same pid and arguments, and the priority it lowered itself to is not lowered twice."""
    script = textwrap.dedent(
        """
        import os, sys
        from qexport.cli.run import _renew_worker
        nice = os.environ.get("QEXPORT_WORKER_NICE")
        print(os.getpid(), nice, os.environ.get("QEXPORT_WORKER_IDLE"), *sys.argv[1:], flush=True)
        if nice != "0":
            _renew_worker(supervised=False)
        """
    )
    env = {**os.environ, "QEXPORT_WORKER_NICE": "10", "QEXPORT_WORKER_IDLE": "true"}
    ran = subprocess.run(
        [sys.executable, "-c", script, "--concurrency", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first, renewed = (line.split() for line in ran.stdout.splitlines())
    assert first[1:] == ["10", "true", "--concurrency", "2"]
    assert renewed[0] == first[0]
    assert renewed[1:] == ["0", "false", "--concurrency", "2"]
