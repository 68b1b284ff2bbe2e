"""The worker's watch over its own memory, with a scripted memory in place of the process's:
whom it blames, how an attempt it stops settles, and when the worker renews itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import duckdb
import pytest

from qexport.container import Container
from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import (
    FailureCode,
    MemoryRefusedError,
    WorkerMemoryError,
    memory_refused_detail,
    readable_detail,
)
from qexport.sources.duckdb.errors import translate_error
from qexport.worker.lease import Lease
from qexport.worker.loop import Worker
from qexport.worker.memory import (
    MemoryWatch,
    Running,
    Usage,
    backstop_for,
    blame,
)
from tests.fakes import FrozenClock
from tests.unit.fakes import FakeSource
from tests.unit.test_worker import current, make_deps, request

MIB = 1024**2
LIMIT = 512 * MIB
IDLE = Usage(resident=200 * MIB, mapped=1200 * MIB)


class ScriptedMemory:
    """The process's memory as a test says it is."""

    def __init__(self, usage: Usage = IDLE) -> None:
        self.usage = usage

    def __call__(self) -> Usage:
        return self.usage

    def grow_to(self, resident: int) -> None:
        self.usage = Usage(resident, self.usage.mapped + max(resident - self.usage.resident, 0))


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _watch(
    memory: ScriptedMemory, ticks: Ticks | None = None, renew: Renewals | None = None
) -> MemoryWatch:
    return MemoryWatch(
        LIMIT,
        backstop=backstop_for(LIMIT),
        read_usage=memory,
        idle_grace=5.0,
        monotonic=ticks or Ticks(),
        renew=renew,
    )


class Renewals:
    """Stands for replacing the process: counts the times it was asked."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _kept(_verdict: WorkerMemoryError | None) -> None:
    """An attempt that is never abandoned (the tests that do not renew the process)."""
    raise AssertionError("abandoned")


def _lease(export_id: str = "e1") -> Lease:
    """A lease nobody heartbeats: what the watch stops."""
    deps = make_deps(FakeSource())
    return Lease(
        deps.exports,
        deps.clock,
        export_id,
        "token",
        lease_seconds=30,
        shutdown=threading.Event(),
    )


def _eventually(predicate: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---------------------------------------------------------------- whom to blame


def test_a_lone_attempt_that_grew_the_memory_is_failed() -> None:
    """Past the limit with one attempt running since the memory was low: it fails."""
    running = Running(1, started_rss=200 * MIB)
    assert blame(600 * MIB, LIMIT, [running]).fail == (running,)


def test_an_attempt_started_once_the_memory_was_high_is_not_blamed() -> None:
    """An attempt that started when the process already held most of it grew it by less than
    a quarter of the limit: the one that ran while it grew is blamed, not it."""
    grower = Running(1, started_rss=200 * MIB)
    latecomer = Running(2, started_rss=560 * MIB)
    verdict = blame(600 * MIB, LIMIT, [grower, latecomer])
    assert (verdict.fail, verdict.again) == ((grower,), ())
    assert blame(600 * MIB, LIMIT, [latecomer]) == blame(600 * MIB, LIMIT, [])


def test_several_suspects_are_all_handed_back() -> None:
    """Two attempts ran while the memory grew: they cannot be told apart, so neither fails;
    both go back to the queue (to run alone next time)."""
    first = Running(1, started_rss=200 * MIB)
    second = Running(2, started_rss=210 * MIB)
    verdict = blame(600 * MIB, LIMIT, [first, second])
    assert (verdict.fail, verdict.again) == ((), (first, second))


# ---------------------------------------------------------------- the watch


def test_past_the_limit_the_watch_stops_the_attempt_through_its_lease() -> None:
    """The running statement is interrupted (the lease's stop hooks run) and the lease's
    check raises limit_exceeded naming QEXPORT_WORKER_MAX_MEMORY and its value."""
    memory = ScriptedMemory()
    watch = _watch(memory)
    lease = _lease()
    interrupted = threading.Event()
    lease.on_stop(interrupted.set)
    with watch.watching(lease, alone=False, abandon=_kept):
        memory.grow_to(500 * MIB)
        watch.sample()
        assert not interrupted.is_set()
        lease.check()  # within the limit: production goes on
        memory.grow_to(700 * MIB)
        watch.sample()
        assert interrupted.is_set()
        assert not watch.claimable
        with pytest.raises(WorkerMemoryError) as stopped:
            lease.check()
    assert stopped.value.code is FailureCode.LIMIT_EXCEEDED
    assert "QEXPORT_WORKER_MAX_MEMORY (512 MiB)" in str(stopped.value)
    assert "700 MiB reached" in str(stopped.value)


def test_memory_that_comes_back_lets_the_worker_claim_again() -> None:
    """Once the stopped attempt ended and the memory fell under the limit, slots claim again
    and the worker is not renewed."""
    memory = ScriptedMemory()
    ticks = Ticks()
    watch = _watch(memory, ticks)
    with watch.watching(_lease(), alone=False, abandon=_kept):
        memory.grow_to(700 * MIB)
        watch.sample()
    assert not watch.claimable
    memory.usage = Usage(230 * MIB, memory.usage.mapped)
    ticks.now += 60
    watch.sample()
    assert watch.claimable
    assert not watch.kept.is_set()


def test_an_idle_worker_that_keeps_its_memory_is_renewed_after_the_grace() -> None:
    """Nothing runs and the process stays past its limit: no claims meanwhile, and it is
    renewed only once that lasted the grace period."""
    memory = ScriptedMemory()
    ticks = Ticks()
    watch = _watch(memory, ticks)
    with watch.watching(_lease(), alone=False, abandon=_kept):
        memory.grow_to(700 * MIB)
        watch.sample()
    watch.sample()  # idle, past the limit
    ticks.now += 4.9
    watch.sample()
    assert not watch.claimable
    assert not watch.kept.is_set()
    ticks.now += 0.2
    watch.sample()
    assert watch.kept.is_set()


def test_address_space_kept_under_the_backstop_renews_an_idle_worker() -> None:
    """Resident memory back under the limit, but less than half the limit left under the
    backstop (what allocators keep mapped counts there): renewed once idle for the grace."""
    memory = ScriptedMemory()
    ticks = Ticks()
    watch = _watch(memory, ticks)
    memory.usage = Usage(230 * MIB, backstop_for(LIMIT) - 200 * MIB)
    watch.sample()
    ticks.now += 6
    watch.sample()
    assert watch.kept.is_set()


def test_a_limit_below_what_a_fresh_worker_takes_never_stops_claims() -> None:
    """A process already past its limit as it started would be no better renewed: it is not
    renewed, and its slots go on claiming."""
    memory = ScriptedMemory(Usage(600 * MIB, 1200 * MIB))
    ticks = Ticks()
    watch = _watch(memory, ticks)
    watch.sample()
    ticks.now += 60
    watch.sample()
    assert watch.claimable
    assert not watch.kept.is_set()


def test_a_stopped_export_that_goes_on_growing_renews_the_process() -> None:
    """A statement the interrupt cannot reach (one function building a huge string) goes on
    past half the limit again: every attempt is settled at once (the one stopped by its
    verdict, the one beside it handed back) and the process is renewed."""
    memory = ScriptedMemory()
    renewals = Renewals()
    watch = _watch(memory, renew=renewals)
    settled: dict[str, WorkerMemoryError | None] = {}
    grower, latecomer = _lease("grower"), _lease("latecomer")
    with watch.watching(grower, alone=False, abandon=lambda v: settled.update(g=v)):
        memory.grow_to(880 * MIB)
        with watch.watching(latecomer, alone=False, abandon=lambda v: settled.update(l=v)):
            memory.grow_to(900 * MIB)  # past 1.5 x 512 MiB, but nothing stopped yet
            watch.sample()
            assert (renewals.count, grower.stopped_by is not None) == (0, True)
            assert latecomer.stopped_by is None
            watch.sample()  # still past it: the stopped statement did not end
    assert renewals.count == 1
    assert settled["g"] is grower.stopped_by
    assert settled["l"] is None


# ---------------------------------------------------------------- attempts


def _growing(memory: ScriptedMemory, watch: MemoryWatch, at_batch: int = 2) -> FakeSource:
    """A source whose rows take the process past the limit at one batch."""

    def grow(i: int) -> None:
        if i == at_batch:
            memory.grow_to(900 * MIB)
            watch.sample()

    return FakeSource(on_batch=grow)


def test_an_export_past_the_memory_limit_fails_at_once_and_the_worker_goes_on() -> None:
    """The attempt is stopped and fails limit_exceeded after one attempt, naming the limit,
    with nothing stored; once the memory came back, the same worker runs the next export."""
    memory = ScriptedMemory()
    watch = _watch(memory)
    source = _growing(memory, watch)
    deps = make_deps(source)
    worker = Worker(deps, worker_id="w-test", memory=watch)
    record = request(deps)
    assert worker.run_once()
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        1,
    )
    assert "QEXPORT_WORKER_MAX_MEMORY (512 MiB)" in readable_detail(failed.failure_detail)
    assert deps.objects.head(record.storage_key) is None
    assert deps.objects.incomplete_uploads(record.storage_key) == []  # type: ignore[attr-defined]
    assert source.streams[0].closed

    memory.usage = IDLE
    watch.sample()
    source.on_batch = None
    nxt = request(deps)
    assert worker.run_once()
    assert current(deps, nxt).status is Status.SUCCEEDED


def _handed_back_beside(
    neighbour: str, memory: ScriptedMemory, watch: MemoryWatch
) -> tuple[Container, ExportRecord]:
    """An export stopped beside a `neighbour` attempt that also ran while the memory grew:
    the container, the export, and the memory back to normal."""
    deps = make_deps(_growing(memory, watch))
    record = request(deps)
    with watch.watching(_lease(neighbour), alone=False, abandon=_kept):
        assert Worker(deps, worker_id="w-test", memory=watch).run_once()
    memory.usage = IDLE
    watch.sample()
    clock = deps.clock
    assert isinstance(clock, FrozenClock)
    clock.advance(60)  # past the retry's backoff
    return deps, record


def test_beside_another_suspect_an_export_goes_back_then_runs_alone() -> None:
    """Stopped beside another attempt that also ran while the memory grew: handed back, with
    limit_exceeded as its last error. Its next attempt waits until nothing else runs in the
    process, no slot claiming meanwhile, and is judged alone: past the limit again, it fails
    saying it ran alone."""
    memory = ScriptedMemory()
    watch = _watch(memory)
    deps, record = _handed_back_beside("neighbour", memory, watch)
    released = current(deps, record)
    assert (released.status, released.attempt) == (Status.RUNNING, 1)
    assert released.last_error_code is FailureCode.LIMIT_EXCEEDED
    assert "this export and 1 other export ran" in (released.last_error_detail or "")
    assert "to run alone in its worker next time" in (released.last_error_detail or "")

    worker = Worker(deps, worker_id="w-test", memory=watch)
    with watch.watching(_lease("still running"), alone=False, abandon=_kept):
        second = threading.Thread(target=worker.run_once)
        second.start()
        assert _eventually(lambda: not watch.claimable)
        assert second.is_alive()  # waiting for the other attempt to end
        assert current(deps, record).progress_rows == 0
    second.join(10)
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        2,
    )
    assert "while this export ran (" in (failed.failure_detail or "")
    memory.usage = IDLE
    watch.sample()
    assert watch.claimable  # it no longer runs alone


def test_an_export_handed_back_for_memory_it_did_not_take_succeeds_alone() -> None:
    """The neighbour of the export that took the memory loses an attempt, not its export:
    run alone, it completes."""
    memory = ScriptedMemory()
    watch = _watch(memory)
    deps, record = _handed_back_beside("the one that took it", memory, watch)
    deps.sources.source_for("fake", "w1").on_batch = None  # type: ignore[attr-defined]
    assert Worker(deps, worker_id="w-test", memory=watch).run_once()
    done = current(deps, record)
    assert (done.status, done.attempt) == (Status.SUCCEEDED, 2)


@pytest.mark.parametrize(
    "refusal",
    [MemoryError(), MemoryRefusedError("the statement asked for more memory at once")],
    ids=["python-or-arrow", "source-engine"],
)
def test_an_allocation_the_process_refused_fails_limit_exceeded_not_retried(
    refusal: Exception,
) -> None:
    """The backstop refused an allocation in the attempt's own thread: limit_exceeded at the
    first attempt, naming the worker's limit, not `internal` or a retry."""
    memory = ScriptedMemory()
    deps = make_deps(FakeSource(error=refusal, fail_at_batch=1))
    watch = _watch(memory)
    record = request(deps)
    assert Worker(deps, worker_id="w-test", memory=watch).run_once()
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        1,
    )
    assert "QEXPORT_WORKER_MAX_MEMORY is 512 MiB" in (failed.failure_detail or "")


def test_a_worker_that_keeps_its_memory_stops_claiming_and_stops() -> None:
    """Renewal: the worker claims nothing once its process is kept past the limit, and its
    run ends (the `worker` command then starts a fresh process), the queued export untouched."""
    memory = ScriptedMemory(IDLE)
    deps = make_deps(FakeSource())
    watch = _watch(memory)
    memory.grow_to(900 * MIB)
    watch.kept.set()
    record = request(deps)
    worker = Worker(deps, worker_id="w-test", memory=watch)
    thread = threading.Thread(target=worker.run)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert worker.memory_kept
    assert current(deps, record).status is Status.QUEUED


def test_duckdb_refused_a_block_is_limit_exceeded_and_its_own_full_buffer_a_retry() -> None:
    """DuckDB saying the process refused it a block (the backstop) is not worth another
    attempt; its own memory limit being full (other exports crowding the worker) still is."""
    refused = duckdb.OutOfMemoryException(
        "Out of Memory Error: Failed to allocate block of 1073741824 bytes (bad allocation)"
    )
    translated = translate_error(refused, timed_out=False, timeout_seconds=300)
    assert isinstance(translated, MemoryRefusedError)
    assert translated.code is FailureCode.LIMIT_EXCEEDED
    crowded = duckdb.OutOfMemoryException(
        "Out of Memory Error: failed to allocate data of size 256.0 KiB (244.1 MiB/244.1 MiB used)"
    )
    retried = translate_error(crowded, timed_out=False, timeout_seconds=300)
    assert retried.code is FailureCode.SOURCE_UNAVAILABLE


def test_memory_failures_read_whole_naming_the_limit() -> None:
    """Each way an export ends for the worker's memory reads in full where people see it:
    the setting's name and value, and what the author can change."""
    limit, reached = 512 * MIB, 700 * MIB
    details = [
        WorkerMemoryError.passed(limit, reached, others=0).detail,
        WorkerMemoryError.passed(limit, reached, others=1).detail,
        WorkerMemoryError.passed(limit, reached, others=2).final_detail,
        memory_refused_detail(limit),
    ]
    for detail in details:
        assert readable_detail(detail) == detail
        assert "QEXPORT_WORKER_MAX_MEMORY" in detail
        assert "512 MiB" in detail


def test_an_export_whose_statement_ignores_the_stop_is_failed_before_the_renewal() -> None:
    """The process is renewed under a statement that went on growing after its stop: its
    export was failed limit_exceeded first, at its first attempt, naming the limit."""
    memory = ScriptedMemory()
    renewals = Renewals()
    watch = _watch(memory, renew=renewals)

    def runaway(i: int) -> None:
        if i == 1:
            memory.grow_to(900 * MIB)
            watch.sample()  # stopped
            watch.sample()  # and still growing: renewed (the fake returns)

    deps = make_deps(FakeSource(on_batch=runaway))
    record = request(deps)
    Worker(deps, worker_id="w-test", memory=watch).run_once()
    assert renewals.count == 1
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        1,
    )
    assert "QEXPORT_WORKER_MAX_MEMORY (512 MiB)" in (failed.failure_detail or "")
