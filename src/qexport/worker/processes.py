"""`qexport worker --processes P`: a supervisor that keeps P worker processes running.

Each child is a whole worker (its own id, metadata connections, object-store client and
`--concurrency` slots). The supervisor holds no connections and runs no exports: it forks the
children, restarts one that dies unexpectedly (with backoff) or asks to be renewed (at once),
and forwards SIGTERM/SIGINT so that each child stops claiming, finishes or hands back its
exports and exits. A second signal is forwarded too, which makes the children hand back at
once.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import ForkProcess
from types import FrameType

import structlog

log = structlog.get_logger()

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
RESTART_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
# A child that exits with this status asks for a fresh process (a worker whose memory its
# allocators keep: worker/memory.py): started again at once, not counted as a failure.
# EX_TEMPFAIL, not 0, which a draining child exits with when the queue is empty.
RENEW_EXIT_STATUS = 75
# A child that ran this long before dying is restarted at the shortest backoff again.
STABLE_AFTER_SECONDS = 60.0


@dataclass
class _Child:
    index: int
    process: ForkProcess | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float = 0.0
    done: bool = False


@dataclass
class Supervisor:
    """Runs `target(index)` in `processes` forked children until they finish or are stopped.

    `drain`: a child that exits with status 0 has drained the queue and is not restarted.
    `kind` names the children in the log's events (`worker_process_started`).
    `end_with_supervisor`: a child gets SIGTERM when the supervisor ends, even by SIGKILL
    (on Linux), instead of living on: server processes would keep the port.
    """

    target: Callable[[int], None]
    processes: int
    drain: bool = False
    kind: str = "worker"
    end_with_supervisor: bool = False
    poll_seconds: float = 0.2
    _children: list[_Child] = field(default_factory=list)
    _signals: int = 0

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError("processes must be at least 1")
        # fork: the children start in milliseconds with qexport already imported. Safe here
        # because the supervisor starts no threads and opens no connections before forking.
        self._ctx = multiprocessing.get_context("fork")

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals += 1
        log.info("supervisor_stopping", signal=signum, signals_received=self._signals)
        for child in self._children:
            if child.process is not None and child.process.is_alive():
                # Always SIGTERM: a child stops gracefully on the first, hands back on the second.
                child.process.terminate()

    @property
    def stopping(self) -> bool:
        return self._signals > 0

    def run(self) -> int:
        """Supervise until every child has exited for good; the exit status for the CLI."""
        self._children = [_Child(i) for i in range(self.processes)]
        for child in self._children:
            if self.stopping:  # a signal during start-up: start no more
                child.done = True
            else:
                self._start(child)
        status = 0
        while True:
            now = time.monotonic()
            for child in self._children:
                status = max(status, self._tend(child, now))
            if all(child.done for child in self._children):
                return status
            time.sleep(self.poll_seconds)

    def _tend(self, child: _Child, now: float) -> int:
        """Restart or retire one child; returns a non-zero status if it failed for good."""
        if child.done:
            return 0
        process = child.process
        if process is None:  # waiting out a restart backoff
            if self.stopping:
                child.done = True
            elif now >= child.restart_at:
                self._start(child)
            return 0
        if process.is_alive():
            return 0
        process.join()
        code = process.exitcode
        child.process = None
        if self.stopping or (self.drain and code == 0):
            child.done = True
            return 0 if code == 0 or self.stopping else 1
        if code == RENEW_EXIT_STATUS:
            log.info(f"{self.kind}_process_renewed", index=child.index, pid=process.pid)
            self._start(child)
            return 0
        if now - child.started_at >= STABLE_AFTER_SECONDS:
            child.failures = 0
        delay = RESTART_BACKOFF_SECONDS[min(child.failures, len(RESTART_BACKOFF_SECONDS) - 1)]
        child.failures += 1
        child.restart_at = now + delay
        log.warning(
            f"{self.kind}_process_exited", index=child.index, exitcode=code, restart_in_s=delay
        )
        return 0

    def _start(self, child: _Child) -> None:
        """Fork one child. SIGTERM and SIGINT wait (blocked) across the fork: a child must not
        run the supervisor's handler before it has set its own, and a signal to the
        supervisor during the fork still reaches the new child, once it is listed."""
        supervisor = os.getpid() if self.end_with_supervisor else None
        process = self._ctx.Process(target=_child_main, args=(self.target, child.index, supervisor))
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            process.start()
            child.process = process
            child.started_at = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a pending one runs here
        log.info(f"{self.kind}_process_started", index=child.index, pid=process.pid)


def _child_main(target: Callable[[int], None], index: int, supervisor: int | None) -> None:
    # Ctrl-C reaches the whole process group; the supervisor forwards it as SIGTERM, so the
    # child ignores the terminal's own SIGINT to not count one keypress as two signals.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # blocked by _start
    if supervisor is not None:
        _end_with_parent(supervisor)
    target(index)


def _end_with_parent(parent: int) -> None:
    """SIGTERM this process once `parent` ends (Linux's parent-death signal; elsewhere,
    nothing), also when it ended before this was asked."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
