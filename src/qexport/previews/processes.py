"""Previews run in processes of their own, kept between previews, each with a memory limit:
never in the process that asks (an API server, the pages' server, the CLI). So do the
describes of queries being saved, which DuckDB plans, folding constants as it goes.

Why: in the server, `POST /api/v1/queries/{id}/preview` of `SELECT
length(repeat('x', 1000000000))` grew the process from 218 to 2,126 MiB and answered 504
after 20 s. DuckDB's memory_limit bounds its buffers, not what a string function allocates,
and a process has no other bound: a few editors at their preview slots could take 8-16 GB
of one server, and every request it served with it.

Where they run, measured on 2 cores (a preview of a tiny query on a DuckDB file, the median
of a few hundred; the machine shared, load average 4):

- In the process that asks (before): 2.6 ms. Its memory is anyone's to take.
- A new interpreter per preview (spawn): 1.4-1.8 s of imports each time.
- A fork per preview from a pre-started process that has imported qexport (a zygote): 39 ms
  (8 ms to fork a 200 MB process, 15 ms to open and sandbox the DuckDB file again, the rest
  to run and exit). Clean: each preview's memory goes with its process.
- A worker slot: the preview queued as a job. It adds a claim's latency (a NOTIFY round trip,
  or the SQLite watch's poll), waits behind exports when every slot is busy, needs a worker
  running (the embedded default's `qexport serve` has none), and a worker's memory bound is
  per process, shared with the exports it runs.
- Processes kept between previews (this): 3.2 ms, 0.7 ms more than in the asking process
  (the job and the cells over a pipe), taken in turns with it. A process runs one preview at
  a time; KEEP_IDLE wait for the next; one that died, overran its time, met its memory limit
  or grew past half of it is replaced. Through the API a tiny preview took 3.6 ms (median of
  300) before and 5.0-5.8 ms now, the rest being the preview's record: the rate check
  (0.15 ms on SQLite, 0.8 ms on PostgreSQL) and its audit event, written before the rows go.

How they start: from a forkserver (multiprocessing's), a fresh interpreter that imported
qexport (preload.py) before any of it ran: the server's own process cannot be forked once
DuckDB has started threads in it (DuckDB is not fork-safe, and describing a query when it is
saved opened the source in the server), and a new interpreter per process would pay the
imports. The server starts the forkserver when it starts (`prepare`), the forkserver imports
in the background (180 MiB resident, and multiprocessing's resource tracker 12 MiB), and its
processes fork in about 10 ms: one that has answered a preview holds 25 MiB of its own (151
MiB resident, the rest shared with the forkserver). The CLI forks its one preview process
directly: it has opened no source, and a forkserver's imports would double its time. A
process started by the forkserver runs the server's main script again if it has one (as
multiprocessing does): `qexport` and `python -m qexport` guard theirs.

The limit: RLIMIT_DATA, not RLIMIT_AS. After qexport's imports a process maps 1.5 GiB of
address space, and a DuckDB database opens 670 MiB more (glibc reserves 64 MiB of address
space per thread's arena), so an address-space limit would sit near 2.2 GiB before a query
ran, and move with the number of cores. RLIMIT_DATA counts what is writable: 200 MiB after
the imports (with Arrow on the system allocator: child.py); the first DuckDB database adds
about 80 MiB (its own threads' stacks), each 8 MiB a thread (PREVIEW_THREADS), and DuckDB's
allocator takes memory in 64-128 MiB extents. A preview process may grow by
QEXPORT_PREVIEW_MAX_MEMORY (512 MiB) past its size at start: `repeat('x', 1000000000)`
fails in 1 ms with DuckDB's out-of-memory error, `limit_exceeded` naming the limit (through
the API: 422 in 0.1 s, the server's resident size 217 MiB before and after, and at its peak;
before, a 200 after 26 s, the server's peak 2,161 MiB), while a grouping into 20 million
groups (DuckDB spills) and a 100 MB string still run.

Nothing outlives the server: preview processes die with their parent (Linux's parent-death
signal), the forkserver ends when the server does, `close` stops them, they are daemonic
(multiprocessing ends them at exit), and the forkserver reaps them (the CLI joins its own).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import threading
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, ForkServerContext
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Literal

import structlog

from qexport.config import Settings
from qexport.domain.failures import (
    LimitExceededError,
    QExportError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import Relation
from qexport.ports import CatalogueJob, DescribeJob, PlanJob, PreviewCells, PreviewJob
from qexport.previews.wire import Answer
from qexport.sources.scratch import remove_abandoned

if TYPE_CHECKING:
    # The child's module (Arrow, the sources) is imported when the first process starts, not
    # with this one: a command that builds the container and runs no preview never loads it.
    from qexport.previews import child
    from qexport.previews.child import Job

log = structlog.get_logger()

# Preview processes kept waiting for the next preview; more are started for previews at once
# (the source slots bound them: 8 a server process) and stopped when they end.
KEEP_IDLE = 2
# Past its timeout a statement is interrupted by its source; a process that has not answered
# this much later is killed.
KILL_AFTER_SECONDS = 5.0
# How long a process given up may take to close its sources and exit before it is killed.
STOP_SECONDS = 2.0
# Then a process is replaced, so that what a long-lived one accretes stays bounded.
PREVIEWS_PER_PROCESS = 1_000
# What the forkserver imports before it forks: the allocator's choice first (preload.py),
# then what opens a preview process's sources.
PRELOAD = ["qexport.previews.preload", "qexport.bootstrap"]
# "forkserver" for a server (DuckDB's threads make it unsafe to fork); "fork" for a process
# that has opened no source (the CLI).
StartMethod = Literal["fork", "forkserver"]


@dataclass(eq=False)
class _Process:
    """One preview process and the pipe to it."""

    process: BaseProcess
    conn: Connection
    previews: int = 0


class PreviewProcesses:
    """A PreviewRunner: each job to a preview process of its own (module docstring)."""

    def __init__(
        self,
        settings: Settings,
        open_sources: child.OpenSources,
        *,
        start_method: StartMethod = "forkserver",
    ) -> None:
        self._settings = settings
        self._open_sources = open_sources
        self._context: ForkContext | ForkServerContext = (
            multiprocessing.get_context("fork")
            if start_method == "fork"
            else multiprocessing.get_context("forkserver")
        )
        self._lock = threading.Lock()
        self._idle: list[_Process] = []
        self._busy: set[_Process] = set()
        self._stopping: set[_Process] = set()  # busy when `close` came: stopped when done

    def prepare(self) -> None:
        """Start the forkserver now, which imports in the background, so that the first
        preview does not wait for it."""
        if self._context.get_start_method() == "forkserver":
            self._context.set_forkserver_preload(PRELOAD)
            forkserver.ensure_running()

    def run(self, job: PreviewJob) -> PreviewCells:
        answer = self._call(job)
        assert answer.cells is not None, "a preview's answer holds its cells or its refusal"
        return answer.cells

    def describe(self, job: DescribeJob) -> tuple[ResultColumn, ...]:
        answer = self._call(job)
        assert answer.columns is not None, "a describe's answer holds columns or a refusal"
        return answer.columns

    def relations(self, job: PlanJob) -> frozenset[Relation] | None:
        answer = self._call(job)
        assert answer.planned, "a plan's answer holds what it reads or a refusal"
        return answer.reads

    def catalogue(self, job: CatalogueJob) -> Catalogue | None:
        answer = self._call(job)
        assert answer.catalogued, "a catalogue's answer holds what it says or a refusal"
        return answer.catalogue

    def _call(self, job: Job) -> Answer:
        """The answer to `job` from a preview process; its refusal raised."""
        found = self._take()
        try:
            answer = self._ask(found, job)
        except BaseException:
            self._stop(found, kill=True)
            raise
        self._give_back(found, retire=answer.retire)
        if answer.refusal is not None:
            raise answer.refusal.error()
        return answer

    def close(self) -> None:
        """Stop the waiting processes now, and the busy ones once their preview ends."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._stopping |= self._busy
        for found in idle:
            self._stop(found)

    def _take(self) -> _Process:
        """A waiting process that is still alive, or a new one."""
        dead = []
        found = None
        with self._lock:
            while self._idle:
                candidate = self._idle.pop()
                if candidate.process.is_alive():
                    found = candidate
                    break
                dead.append(candidate)
        for gone in dead:
            self._stop(gone, kill=True)
        if found is None:
            found = self._start()
        with self._lock:
            self._busy.add(found)
        return found

    def _start(self) -> _Process:
        if self._context.get_start_method() == "forkserver":
            self.prepare()
        from qexport.previews import child

        mine, theirs = self._context.Pipe()
        forked = self._context.get_start_method() == "fork"
        process = self._context.Process(
            target=child.serve,
            args=(theirs, self._settings, self._open_sources),
            # A forked process holds this end too, which it closes: else it would never see
            # the pipe close. Forked for the CLI, it logs errors only: its refusal is the
            # command's one line.
            kwargs={"parent_end": mine, "log_level": logging.ERROR} if forked else {},
            name="qexport-preview",
            daemon=True,
        )
        try:
            process.start()
        except OSError as exc:
            mine.close()
            raise SourceUnavailableError(f"no preview process could be started: {exc}") from exc
        finally:
            theirs.close()
        log.info("preview_process_started", pid=process.pid)
        return _Process(process, mine)

    def _ask(self, found: _Process, job: Job) -> Answer:
        """Send `job` and wait for the answer: QueryTimeoutError past the timeout and its
        grace, a refusal saying so when the process died instead of answering (the caller
        then kills the process, and removes what it left behind)."""
        try:
            found.conn.send(job)
        except OSError:
            raise self._died(found) from None
        if not found.conn.poll(job.timeout_seconds + KILL_AFTER_SECONDS):
            log.warning("preview_process_killed", pid=found.process.pid, reason="overran")
            raise QueryTimeoutError(f"statement timeout of {job.timeout_seconds:g} s reached")
        try:
            answer: Answer = found.conn.recv()
        except (EOFError, OSError):
            raise self._died(found) from None
        return answer

    def _died(self, found: _Process) -> QExportError:
        """The refusal of a preview whose process ended before answering. Killed by a
        signal: the kernel's out-of-memory killer, or a library that aborts when an
        allocation is refused, most likely (limit_exceeded). Exited: it could not start (the
        log says why)."""
        found.process.join(STOP_SECONDS)
        code = found.process.exitcode
        log.warning("preview_process_died", pid=found.process.pid, exitcode=code)
        if code is not None and code < 0:
            from qexport.previews.child import out_of_memory

            return LimitExceededError(
                f"{out_of_memory(self._settings.preview_max_memory)} (the preview's"
                f" process was killed by {signal.Signals(-code).name} before it answered)"
            )
        return SourceUnavailableError(
            f"the preview's process ended before it answered (exit code {code}); the server's"
            " log says why"
        )

    def _give_back(self, found: _Process, *, retire: bool) -> None:
        found.previews += 1
        with self._lock:
            self._busy.discard(found)
            stopping = found in self._stopping
            self._stopping.discard(found)
            keep = not (
                stopping
                or retire
                or found.previews >= PREVIEWS_PER_PROCESS
                or len(self._idle) >= KEEP_IDLE
            )
            if keep:
                self._idle.append(found)
        if not keep:
            self._stop(found)

    def _stop(self, found: _Process, *, kill: bool = False) -> None:
        """End a process: asked (its pipe closed, it closes its sources and exits), or
        killed, and what it left in the temporary folder (DuckDB's pipes and spill) removed;
        either way waited for, so that none is left behind."""
        with self._lock:
            self._busy.discard(found)
            self._stopping.discard(found)
        if kill:
            found.process.kill()
        with contextlib.suppress(OSError):
            found.conn.close()
        found.process.join(STOP_SECONDS)
        if found.process.exitcode is None:
            found.process.kill()
            found.process.join(STOP_SECONDS)
        if kill:
            remove_abandoned()
