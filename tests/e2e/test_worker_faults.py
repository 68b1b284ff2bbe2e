"""Workers as real processes: killed, paused, cancelled and stopped mid-export."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode
from tests.e2e.conftest import Env, wait_for

# Three copies of every order: a few seconds of xlsx, so there is time to interfere.
BIG_SQL = "SELECT o.*, r.i AS copy FROM orders o CROSS JOIN range(3) r(i) ORDER BY r.i, o.order_id"
FAST_LEASE = {"QEXPORT_LEASE_SECONDS": "1.5", "QEXPORT_POLL_SECONDS": "0.1"}


def _start_big_export(env: Env) -> str:
    env.run("queries", "add", "big", "--sql", BIG_SQL)
    return env.create("big", "xlsx")


def _wait_producing(env: Env, export_id: str) -> None:
    wait_for(lambda: env.record(export_id).progress_rows > 0, timeout=60)
    assert env.record(export_id).status is Status.RUNNING


def _objects_at(env: Env, key: str) -> list[Path]:
    folder = (env.objects.local_path(key)).parent
    return sorted(folder.iterdir()) if folder.exists() else []


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _staged_for(env: Env, key: str) -> list[str]:
    """The staging directories of any upload to `key`, completed or not."""
    return [upload.upload_id for upload in env.objects.layout.staged_uploads_of(key)]


def test_a_killed_worker_is_replaced_and_the_export_completes_once(
    env: Env, tmp_path: Path
) -> None:
    """SIGKILL mid-production; a second worker redelivers into the same key: attempts = 2,
    succeeded, exactly one object, nothing of the killed upload left staged, and the
    downloaded file's sha256 equals the record's."""
    export_id = _start_big_export(env)
    key = env.record(export_id).storage_key
    first = env.start_worker(**FAST_LEASE)
    _wait_producing(env, export_id)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert env.record(export_id).status is Status.RUNNING
    assert len(_staged_for(env, key)) == 1
    second = env.start_worker("--drain", **FAST_LEASE)
    assert second.wait(timeout=180) == 0
    record = env.record(export_id)
    assert record.status is Status.SUCCEEDED
    assert record.attempt == 2
    assert record.storage_key == key
    assert [p.name for p in _objects_at(env, key)] == [record.filename]
    assert _staged_for(env, key) == []
    out = tmp_path / "download.xlsx"
    env.run("exports", "download", export_id, "-o", str(out))
    assert out.stat().st_size == record.size_bytes
    assert _sha256(out) == record.sha256
    assert record.row_count == 3 * 400_000


def test_overlapping_attempts_complete_one_object_that_the_record_describes(
    env: Env, tmp_path: Path
) -> None:
    """A paused worker loses its lease to a second one; when it wakes it stops and aborts:
    one completed object, described by the record, and no staged parts left."""
    export_id = _start_big_export(env)
    key = env.record(export_id).storage_key
    slow = env.start_worker(**FAST_LEASE)
    _wait_producing(env, export_id)
    os.kill(slow.pid, signal.SIGSTOP)
    time.sleep(2.0)  # the paused worker's lease runs out
    fast = env.start_worker("--drain", **FAST_LEASE)
    assert fast.wait(timeout=180) == 0
    os.kill(slow.pid, signal.SIGCONT)
    wait_for(lambda: env.objects.incomplete_uploads(key) == [], timeout=60)
    record = env.record(export_id)
    assert (record.status, record.attempt) == (Status.SUCCEEDED, 2)
    files = _objects_at(env, key)
    assert len(files) == 1
    assert _sha256(files[0]) == record.sha256
    assert files[0].stat().st_size == record.size_bytes
    slow.send_signal(signal.SIGTERM)
    assert slow.wait(timeout=30) == 0
    assert env.record(export_id) == record


def test_cancel_while_running_stops_production_and_leaves_nothing(env: Env) -> None:
    """Cancel mid-production: failed/cancelled, no object, no staged parts; the worker lives on."""
    export_id = _start_big_export(env)
    key = env.record(export_id).storage_key
    worker = env.start_worker(**FAST_LEASE)
    _wait_producing(env, export_id)
    env.run("exports", "cancel", export_id)
    record = env.record(export_id)
    assert (record.status, record.failure_code) == (Status.FAILED, FailureCode.CANCELLED)
    wait_for(lambda: env.objects.incomplete_uploads(key) == [], timeout=30)
    assert env.objects.head(key) is None
    assert _objects_at(env, key) == []
    again = env.run("exports", "cancel", export_id, check=False)
    assert again.returncode == 1
    assert "already failed" in again.stderr
    # The worker survived and takes the next export.
    small = env.create("big", "csv")
    wait_for(lambda: env.record(small).status is Status.SUCCEEDED, timeout=60)
    assert worker.poll() is None


def test_a_worker_start_removes_what_a_killed_worker_staged_for_a_cancelled_export(
    env: Env,
) -> None:
    """SIGKILL mid-upload, then a cancel while no worker runs: the export settles with its
    staging left behind, and the next worker's start removes it."""
    export_id = _start_big_export(env)
    key = env.record(export_id).storage_key
    first = env.start_worker(**FAST_LEASE)
    _wait_producing(env, export_id)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    env.run("exports", "cancel", export_id)
    assert env.record(export_id).failure_code is FailureCode.CANCELLED
    assert len(_staged_for(env, key)) == 1

    # Nothing is left to run: the worker drains at once, but sweeps before it exits.
    assert env.start_worker("--drain", **FAST_LEASE).wait(timeout=180) == 0

    assert _staged_for(env, key) == []
    assert env.objects.head(key) is None


def test_sigterm_hands_work_back_and_exits_cleanly(env: Env) -> None:
    """SIGTERM past the grace period: the export is released at once, the worker exits 0,
    and the next worker finishes it."""
    export_id = _start_big_export(env)
    worker = env.start_worker(**FAST_LEASE, QEXPORT_SHUTDOWN_GRACE_SECONDS="0.2")
    _wait_producing(env, export_id)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    released = env.record(export_id)
    assert released.status is Status.RUNNING
    assert env.objects.incomplete_uploads(released.storage_key) == []
    assert env.start_worker("--drain", **FAST_LEASE).wait(timeout=180) == 0
    done = env.record(export_id)
    assert (done.status, done.attempt) == (Status.SUCCEEDED, 2)


def _scratch_folders(tmp: Path) -> set[str]:
    return {p.name for p in tmp.iterdir() if p.name.startswith("qexport-scratch-")}


def test_the_next_worker_start_removes_a_killed_workers_pipes_and_spill(
    env: Env, tmp_path: Path
) -> None:
    """A worker killed with SIGKILL mid-export leaves its scratch folder (pipes and spill);
    the next worker's start removes it, and that worker removes its own when it exits."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    export_id = _start_big_export(env)
    first = env.start_worker(**FAST_LEASE, TMPDIR=str(tmp))
    _wait_producing(env, export_id)
    left = _scratch_folders(tmp)
    assert len(left) == 1
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert _scratch_folders(tmp) == left  # nobody removed it
    second = env.start_worker("--drain", **FAST_LEASE, TMPDIR=str(tmp))
    assert second.wait(timeout=180) == 0
    assert env.record(export_id).status is Status.SUCCEEDED
    assert _scratch_folders(tmp) == set()


# DuckDB's memory limit does not bound what a string function builds: this one alone takes
# a process past 1 GiB.
HUGE_STRING_SQL = "SELECT length(repeat('x', 1000000000)) AS n"
# Heartbeats every second; a worker at SCHED_IDLE on a loaded machine may wait longer than
# FAST_LEASE's 1.5 s for a core.
MEMORY_LEASE = {"QEXPORT_LEASE_SECONDS": "3", "QEXPORT_POLL_SECONDS": "0.1"}


def _peak_rss_mib(pid: int) -> int:
    """The process's peak resident set so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def test_an_export_past_the_workers_memory_limit_fails_once_and_the_worker_lives_on(
    env: Env,
) -> None:
    """QEXPORT_WORKER_MAX_MEMORY=512MiB and a statement that builds a 1 GB string: the export
    fails limit_exceeded after exactly one attempt, naming the limit, rather than the worker
    being killed and the export redelivered; heartbeats keep its 3 s lease meanwhile, and
    the same worker process (renewed in place or not) then completes a normal export."""
    env.add_query("huge", HUGE_STRING_SQL)
    env.add_query("few", "SELECT * FROM customers LIMIT 50")
    worker = env.start_worker(QEXPORT_WORKER_MAX_MEMORY="512MiB", **MEMORY_LEASE)
    export_id = env.request("huge", "csv")
    wait_for(lambda: env.record(export_id).settled, timeout=120)
    failed = env.record(export_id)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        1,
    )
    detail = env.get(export_id)["failure"]["detail"]
    assert "QEXPORT_WORKER_MAX_MEMORY (512 MiB)" in detail
    assert env.objects.head(failed.storage_key) is None
    assert f"-{worker.pid}-" in (failed.worker_id or "")

    normal = env.request("few", "csv")
    wait_for(lambda: env.record(normal).settled, timeout=60)
    done = env.record(normal)
    assert done.status is Status.SUCCEEDED
    assert f"-{worker.pid}-" in (done.worker_id or "")
    assert worker.poll() is None


def test_one_allocation_past_the_workers_backstop_is_refused_at_once(env: Env) -> None:
    """A statement that asks for 3 GB in one block, past the backstop of a 512MiB limit (its
    data size held at 3 GiB): refused in that export, which fails limit_exceeded naming the
    limit, while the process never grows near it and takes the next export."""
    env.add_query("huger", "SELECT length(repeat('x', 3000000000)) AS n")
    env.add_query("few", "SELECT * FROM customers LIMIT 50")
    worker = env.start_worker(QEXPORT_WORKER_MAX_MEMORY="512MiB", **MEMORY_LEASE)
    export_id = env.request("huger", "csv")
    wait_for(lambda: env.record(export_id).settled, timeout=120)
    failed = env.record(export_id)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        1,
    )
    assert "QEXPORT_WORKER_MAX_MEMORY is 512 MiB" in (failed.failure_detail or "")
    assert _peak_rss_mib(worker.pid) < 1024
    normal = env.request("few", "csv")
    wait_for(lambda: env.record(normal).settled, timeout=60)
    assert env.record(normal).status is Status.SUCCEEDED
    assert worker.poll() is None
