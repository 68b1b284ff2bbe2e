"""A worker watches its own memory: an export that takes the process past
QEXPORT_WORKER_MAX_MEMORY is stopped and fails `limit_exceeded`, and the worker lives on.

DuckDB's `memory_limit` bounds its buffer manager, not what a function builds: under 256MB,
`SELECT length(repeat('x', 1000000000))` took a process from 65 to 1,974 MiB in 6.5 s
(DuckDB 2.0.1). Left to the kernel, the worker is killed, its lease runs out, and the same
export is redelivered into the same fate until its attempts are exhausted, taking the other
exports of that process with it each time.

Three layers, since none is enough alone:

- **The watch** (`MemoryWatch`): one thread per worker process reads the resident set from
  /proc/self/statm every 50 ms while an attempt runs (15 µs a read: 0.03% of a core) and,
  past the limit, stops the attempts to blame through their lease (`Lease.stop`: the stop
  hooks interrupt the running statement, the lease's `check` raises at the next batch or
  part). The heartbeat thread is not involved and keeps every lease meanwhile.
- **Renewal at 1.5 times the limit**: an interrupt lands between DuckDB's operators, not
  inside one function call. That `repeat`, interrupted at 512 MiB (1.1 s in), ran on to its
  end (4.8 s, 1,974 MiB); in a worker at SCHED_IDLE on a busy machine, 3 GB of it ran on for
  135 s after the stop. So when the process passes half the limit again while an attempt
  stopped for it still runs, the watch settles every running attempt at once (by its
  verdict, the others handed back) and replaces the process under them: a `--processes`
  child exits with RENEW_EXIT_STATUS and its supervisor starts another at once, a lone
  worker executes itself again (same pid and command line). With a 512MiB limit the
  export above failed in 5.3 s at its first attempt, the worker going from 195 to 772 MiB,
  and the same pid ran the next export at 235 MiB.
- **The backstop**: RLIMIT_DATA, set as the worker starts, at twice the limit plus 2 GiB
  (3 GiB for a 512MiB limit, 6 GiB for the default 2GiB), for the one allocation too big to
  wait for: it is refused at once, in the thread that asked. DuckDB raises "Failed to
  allocate block of 3000000000 bytes (bad allocation)" (MemoryRefusedError), Arrow and
  Python MemoryError; that attempt fails `limit_exceeded` (in 0.9 s, the worker at
  231 MiB, for 3 GB asked under a 512MiB limit) and the rest of the process goes on, the
  block never made. Why so far above the limit: RLIMIT_DATA counts the address space
  allocators map, not what is resident. An idle worker has 194 MiB resident and 1,246 MiB
  mapped (pyarrow's mimalloc maps a 1 GiB arena at first use); exports of 2M orders as csv,
  parquet, xlsx and jsonl peaked at 711 MiB resident and 2,016 MiB mapped (2 slots), and a
  backstop at 1 GiB failed that xlsx and jsonl. DuckDB's jemalloc keeps the address space
  of what it freed, for good: 68 MiB resident and 1,395 MiB mapped after the `repeat`.
  RLIMIT_AS lost for the same reason, worse: it also counts thread stacks and mapped files
  (1.7 GiB of an idle worker). A cgroup (systemd's MemoryMax, a container's limit) remains
  a good outer fence, but its answer is the kernel's kill: the redelivery loop this ends.

A child process per export would have made blame exact and given all memory back at its
exit, for a fork, a DuckDB instance and its caches per export (11.7-14.4 ms of CPU is a
tiny export's whole cost today, bench/dispatch.py), and it would end the one DuckDB
instance per file that sources share in a process.

Which attempt to blame when several slots run: the process's memory is one number, and
native allocators cannot say which thread holds what. An attempt is a suspect when the
process grew by at least a quarter of the limit since it started: it ran while the memory
grew; one started once the memory was already high is not blamed and goes on. A lone
suspect fails: that is certain. Several suspects are all stopped (the memory must come
back) and handed back, each to run alone in its worker process next time: its slot waits
for the others to end and none starts meanwhile, so that the next verdict is certain too.
Failing all of them would let one member's query fail the exports of whoever ran beside
it; failing the oldest, or the one that grew most, would as often blame a neighbour that
started first. So an export that takes the memory fails at its first attempt when it ran
alone, at its second otherwise, and a neighbour loses an attempt, never its export. The
backstop needs no guess: the thread whose allocation was refused is the one that fails.

Getting the memory back: DuckDB gives a large block's pages back as it frees it, but
allocators may keep what they freed, and jemalloc keeps the address space the backstop
counts (5.3 GiB mapped, 230 MiB resident, after a 3 GB string under the default limit).
While the process holds more than its limit resident, or leaves less than half the limit
under its backstop, for memory it took since it started (a quarter of the limit or more: a
fresh process would not free the rest), its slots claim nothing; once nothing runs and that
lasts IDLE_GRACE_SECONDS, the worker stops and is renewed as above, having failed nothing.
Off Linux (no /proc/self/statm) nothing is watched.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from qexport.domain.failures import WorkerMemoryError
from qexport.domain.humanize import binary_size
from qexport.worker.lease import Lease

log = structlog.get_logger()

SAMPLE_SECONDS = 0.05
# How often an attempt waiting to run alone checks whether it must stop instead.
_ALONE_CHECK_SECONDS = 0.25
# Past the limit by half again while the attempts stopped for it still run (a statement that
# an interrupt cannot reach), the process is renewed at once.
HARD_LIMIT_FACTOR = 1.5
# How long the idle process may stay past its limit (or short of headroom) before renewal.
IDLE_GRACE_SECONDS = 5.0
_GIB = 1024**3
# A suspect: the process grew by at least this share of the limit while the attempt ran.
SUSPECT_SHARE = 4
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Usage:
    """The process's memory: `resident` (what the OOM killer counts) and `mapped` (data and
    stack mappings: what RLIMIT_DATA counts)."""

    resident: int
    mapped: int


def memory_usage() -> Usage | None:
    """This process's memory now, from /proc/self/statm; None off Linux."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
    except OSError:
        return None
    return Usage(resident=int(fields[1]) * _PAGE, mapped=int(fields[5]) * _PAGE)


def backstop_for(limit: int) -> int:
    """The mapped size past which the process refuses an allocation (see the module)."""
    return 2 * limit + 2 * _GIB


def install_backstop(limit: int) -> int | None:
    """Lower this process's RLIMIT_DATA to the backstop of `limit`; returns the limit now in
    force, or None when the platform has none."""
    if not hasattr(resource, "RLIMIT_DATA"):
        return None
    backstop = backstop_for(limit)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if soft != resource.RLIM_INFINITY and soft <= backstop:
        return int(soft)  # the system's own is lower already
    if hard != resource.RLIM_INFINITY:
        backstop = min(backstop, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (backstop, hard))
    return backstop


@dataclass(frozen=True)
class Running:
    """One running attempt as the watch sees it."""

    id: int
    started_rss: int  # the process's resident set when the attempt started


@dataclass(frozen=True)
class Blame:
    """Past the limit: the attempts that fail, and those handed back for another attempt."""

    fail: tuple[Running, ...] = ()
    again: tuple[Running, ...] = ()


def blame(rss: int, limit: int, running: Sequence[Running]) -> Blame:
    """Which running attempts to stop, the process's resident set being `rss` past `limit`:
    a lone suspect fails; several go back to the queue, each to run alone next time."""
    suspects = tuple(r for r in running if rss - r.started_rss >= limit // SUSPECT_SHARE)
    if len(suspects) == 1:
        return Blame(fail=suspects)
    return Blame(again=suspects)


# Settles an attempt at once, from the watch's thread, before the process is renewed under
# it: with the watch's verdict, or handed back (None).
Abandon = Callable[[WorkerMemoryError | None], None]


@dataclass
class _Watched:
    running: Running
    lease: Lease
    abandon: Abandon
    verdict: WorkerMemoryError | None = None

    @property
    def stopped(self) -> bool:
        return self.verdict is not None


class MemoryWatch:
    """Watches the process's memory while attempts run (see the module).

    `claimable`: whether a slot may claim now. `kept` is set once the process stayed past
    its limit, or short of headroom under its `backstop`, with nothing running.
    """

    def __init__(
        self,
        limit: int,
        *,
        backstop: int | None = None,
        read_usage: Callable[[], Usage | None] = memory_usage,
        interval: float = SAMPLE_SECONDS,
        idle_grace: float = IDLE_GRACE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        renew: Callable[[], None] | None = None,
    ) -> None:
        """`renew`: replaces the process at once (it does not return); None: never."""
        self.limit = limit
        self.hard_limit = int(limit * HARD_LIMIT_FACTOR)
        self.backstop = backstop
        self._renew = renew
        self._read_usage = read_usage
        self._interval = interval
        self._idle_grace = idle_grace
        self._monotonic = monotonic
        self._cond = threading.Condition()
        self._watched: dict[int, _Watched] = {}
        self._ids = iter(range(1, 2**62))
        # The process as it started: a fresh one would take as much (renewal needs more).
        self._fresh = read_usage() or Usage(0, 0)
        self._kept_since: float | None = None  # since when the idle process keeps too much
        self._keeps = False  # the last look found the process keeping what a fresh one frees
        self._look = False  # an attempt ended: look once more, even if all looked well
        self._closed = False
        self._renewing = False
        self._alone = False  # an attempt runs alone: no other starts
        self._waiting_alone = 0  # attempts waiting for the others to end, to run alone
        self._thread: threading.Thread | None = None
        self.kept = threading.Event()

    # ---------------------------------------------------------------- for the worker

    @property
    def claimable(self) -> bool:
        """Whether a slot may claim now: the process keeps nothing it should not, and no
        attempt runs, or waits to run, alone."""
        with self._cond:
            alone = self._alone or self._waiting_alone > 0
        return not (alone or self._keeps or self.kept.is_set())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    @contextmanager
    def watching(self, lease: Lease, *, alone: bool, abandon: Abandon) -> Iterator[None]:
        """Watch the memory while the attempt holding `lease` produces its file. `alone`:
        first wait until no other attempt runs in this process, and start none meanwhile
        (it was stopped beside others last time); `lease.check` ends the wait if production
        must stop. `abandon`: settles it at once if the process is renewed under it."""
        if alone:
            self._wait_alone(lease)
        try:
            usage = self._read_usage()
            with self._cond:
                key = next(self._ids)
                rss = usage.resident if usage is not None else 0
                self._watched[key] = _Watched(Running(key, rss), lease, abandon)
                self._cond.notify_all()
        except BaseException:
            self._end_alone(alone)
            raise
        try:
            yield
        finally:
            with self._cond:
                del self._watched[key]
                self._look = True
                self._cond.notify_all()
            self._end_alone(alone)

    def _wait_alone(self, lease: Lease) -> None:
        with self._cond:
            self._waiting_alone += 1
        try:
            while True:
                with self._cond:
                    if not self._watched and not self._alone:
                        self._alone = True
                        return
                    self._cond.wait(_ALONE_CHECK_SECONDS)
                lease.check()
        finally:
            with self._cond:
                self._waiting_alone -= 1

    def _end_alone(self, alone: bool) -> None:
        if alone:
            with self._cond:
                self._alone = False
                self._cond.notify_all()

    # ---------------------------------------------------------------- the thread

    def _run(self) -> None:
        while True:
            with self._cond:
                # Nothing runs and nothing is kept: nothing to watch until an attempt starts.
                while not (self._closed or self._watched or self._keeps or self._look):
                    self._cond.wait()
                if self._closed:
                    return
                self._look = False
            try:
                self.sample()
            except Exception:  # the watch must outlive a bad sample
                log.exception("memory_watch_failed")
            with self._cond:
                if not self._closed:
                    self._cond.wait(self._interval)

    def sample(self) -> None:
        """One look at the process's memory, and what follows from it."""
        usage = self._read_usage()
        if usage is None:
            return
        with self._cond:
            watched = list(self._watched.values())
        self._keeps = self._keeps_too_much(usage)
        if watched:
            self._kept_since = None
            if usage.resident > self.hard_limit and any(w.stopped for w in watched):
                self._renew_now(usage, watched)
            elif usage.resident > self.limit:
                self._stop_suspects(usage.resident, watched)
        elif self._keeps:
            self._idle_keeping(usage)
        else:
            self._kept_since = None

    def _keeps_too_much(self, usage: Usage) -> bool:
        """Past the limit, or with less than half of it left under the backstop, for memory
        it took since it started (a fresh process would not free the rest)."""
        grown = self.limit // SUSPECT_SHARE
        if usage.resident > self.limit and usage.resident - self._fresh.resident >= grown:
            return True
        return (
            self.backstop is not None
            and self.backstop - usage.mapped < self.limit // 2
            and usage.mapped - self._fresh.mapped >= grown
        )

    def _stop_suspects(self, rss: int, watched: list[_Watched]) -> None:
        if any(w.stopped for w in watched):
            return  # the memory of those stopped comes back as they end: judge after
        verdict = blame(rss, self.limit, [w.running for w in watched])
        stopped = [*verdict.fail, *verdict.again]
        if not stopped:
            return
        by_id = {w.running.id: w for w in watched}
        for running in stopped:
            suspect = by_id[running.id]
            suspect.verdict = WorkerMemoryError.passed(self.limit, rss, others=len(stopped) - 1)
            suspect.lease.stop(suspect.verdict)
        log.warning(
            "memory_limit_passed",
            rss_mib=rss // 1024**2,
            limit=binary_size(self.limit),
            running=len(watched),
            failed=[by_id[r.id].lease.export_id for r in verdict.fail],
            handed_back=[by_id[r.id].lease.export_id for r in verdict.again],
        )

    def _renew_now(self, usage: Usage, watched: list[_Watched]) -> None:
        """A stopped attempt went on growing (its statement does not see the interrupt):
        settle every attempt now, by its verdict or handed back, and replace the process."""
        if self._renew is None or self._renewing:
            return
        self._renewing = True
        log.warning(
            "worker_renewing_for_memory",
            rss_mib=usage.resident // 1024**2,
            hard_limit=binary_size(self.hard_limit),
            reason="an export stopped for the worker's memory went on taking more",
            failed=[w.lease.export_id for w in watched if w.verdict and not w.verdict.again],
            handed_back=[w.lease.export_id for w in watched if not w.verdict or w.verdict.again],
        )
        for attempt in watched:
            try:
                attempt.abandon(attempt.verdict)
            except Exception:  # the next attempt's lease expiry settles it instead
                log.exception("abandon_failed", export_id=attempt.lease.export_id)
        self._renew()

    def _idle_keeping(self, usage: Usage) -> None:
        now = self._monotonic()
        if self._kept_since is None:
            self._kept_since = now
            return
        if now - self._kept_since < self._idle_grace or self.kept.is_set():
            return
        log.warning(
            "worker_renewing_for_memory",
            rss_mib=usage.resident // 1024**2,
            mapped_mib=usage.mapped // 1024**2,
            limit=binary_size(self.limit),
            backstop=binary_size(self.backstop) if self.backstop is not None else None,
        )
        self.kept.set()


def watch_memory(limit: int, renew: Callable[[], None]) -> MemoryWatch | None:
    """The `worker` command's watch over its process, its backstop installed, `renew`
    replacing the process; None when QEXPORT_WORKER_MAX_MEMORY is 0."""
    if not limit:
        return None
    if memory_usage() is None:
        log.warning("worker_memory_not_watched", reason="no /proc/self/statm on this system")
        return None
    backstop = install_backstop(limit)
    log.info(
        "worker_memory_watched",
        limit=binary_size(limit),
        backstop=binary_size(backstop) if backstop is not None else None,
    )
    return MemoryWatch(limit, backstop=backstop, renew=renew)
