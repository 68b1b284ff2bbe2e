"""The worker: claim, run, repeat on N slots; stop claiming on SIGTERM and hand work back.

With a memory watch (worker/memory.py), slots claim nothing while the process is past its
memory limit, and the worker stops once it stays past it with nothing running."""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from qexport.container import Container
from qexport.domain.access import pre_run_refusal
from qexport.domain.failures import QExportError
from qexport.services.audit_checkpoints import Checkpointer
from qexport.worker.runner import run_attempt
from qexport.worker.staging import discard_staging, sweep_settled_staging
from qexport.worker.wakeups import Wakeups

if TYPE_CHECKING:
    from qexport.worker.memory import MemoryWatch

log = structlog.get_logger()


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs `concurrency` claim loops. `drain`: exit once nothing is queued or running."""

    def __init__(
        self,
        deps: Container,
        *,
        concurrency: int = 1,
        drain: bool = False,
        worker_id: str | None = None,
        group_slots: int | None = None,
        memory: MemoryWatch | None = None,
    ) -> None:
        """`group_slots`: the slots of the whole `worker` command (processes x concurrency),
        the default for the installation's slots when QEXPORT_WORKER_SLOTS is not set.
        `memory`: the process's memory watch (the `worker` command's; `run` starts it)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.deps = deps
        self.concurrency = concurrency
        self.max_running_per_user = deps.settings.running_cap(group_slots or concurrency)
        self.drain = drain
        self.worker_id = worker_id or new_worker_id()
        self.stopping = threading.Event()  # no new claims
        self.interrupt = threading.Event()  # running attempts hand their export back
        self._wakeups = Wakeups(concurrency)
        # What ended a slot that no handler expected (see _slot); `run` raises it.
        self._slot_failure: BaseException | None = None
        self.outcomes: dict[str, int] = {}
        self._outcomes_lock = threading.Lock()
        self.memory = memory

    # ---------------------------------------------------------------- control

    def wake(self) -> None:
        """Send one idle slot to look for work now instead of at its next poll (a NOTIFY
        arrived, or the SQLite database changed)."""
        self._wakeups.wake_one()

    def install_signal_handlers(self, *, sigint: bool = True) -> None:
        """SIGTERM (and SIGINT unless a supervisor forwards it): stop; a second one: hand back."""
        signal.signal(signal.SIGTERM, self._on_signal)
        if sigint:
            signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping.is_set():
            log.warning("worker_interrupting", signal=signum)
            self.interrupt.set()
            return
        self.stop()

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; running attempts get `grace_seconds` to finish, then hand back."""
        grace = (
            self.deps.settings.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        )
        log.info("worker_stopping", grace_s=grace)
        self.stopping.set()
        self._wakeups.release_all()
        timer = threading.Timer(grace, self.interrupt.set)
        timer.daemon = True
        timer.start()

    # ---------------------------------------------------------------- running

    def run(self) -> dict[str, int]:
        """Run until stopped (or drained); returns how many attempts ended in each outcome."""
        log.info(
            "worker_started",
            worker=self.worker_id,
            concurrency=self.concurrency,
            max_running_per_user=self.max_running_per_user,
        )
        # Beside the slots, not before them: a bucket full of leftovers does not delay claims.
        # It goes on after a drain; a shutdown past its grace period cuts it short.
        sweep = threading.Thread(
            target=sweep_settled_staging,
            args=(self.deps.exports, self.deps.objects, self.interrupt),
            name="staging-sweep",
            daemon=True,
        )
        threads = [
            threading.Thread(target=self._slot, name=f"slot-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        if self.memory is not None:
            self.memory.start()
        # Ends with the slots: a drained or stopped worker begins no more checkpoint passes,
        # and finishes the one under way before `run` returns (cut short between chains by a
        # shutdown past its grace). Left running, its pass used the database after the caller
        # had closed it: a connection opened in the closed engine's new pool, never closed
        # (psycopg's "deleted while still open" in whatever ran next).
        checkpoints = threading.Thread(target=self._checkpoints, name="audit-checkpoints")
        checkpoints.daemon = True
        for thread in (sweep, checkpoints, *threads):
            thread.start()
        for thread in (*threads, sweep, checkpoints):
            while thread.is_alive():
                thread.join(0.2)
        if self.memory is not None:
            self.memory.close()
        if self._slot_failure is not None:
            raise self._slot_failure
        log.info("worker_stopped", worker=self.worker_id, outcomes=self.outcomes)
        return dict(self.outcomes)

    @property
    def memory_kept(self) -> bool:
        """The worker stopped because its process stayed past its memory limit while idle:
        a fresh process gets the memory back (see worker/memory.py)."""
        return self.memory is not None and self.memory.kept.is_set()

    def _slot(self) -> None:
        try:
            self._claim_until_stopped()
        except BaseException as exc:
            # Nothing is meant to get past run_once's handler; what does (the worker's output
            # gone, so that logging the failure raised BrokenPipeError; a SystemExit) stops
            # the worker, and `run` raises it once the other slots have finished, rather
            # than go on a slot short, or drain for ever with none left.
            self._slot_failure = self._slot_failure or exc
            self.stopping.set()
            self._wakeups.release_all()

    def _claim_until_stopped(self) -> None:
        poll = self.deps.settings.poll_seconds
        while not self.stopping.is_set():
            if self.memory is not None and not self.memory.claimable:
                if self.memory.kept.is_set():
                    if not self.stopping.is_set():
                        self.stop(grace_seconds=0)  # nothing runs: nothing to hand back
                    return
                self._wakeups.wait(poll)  # past the memory limit: no new export here
                continue
            try:
                worked = self.run_once()
            except Exception:  # the metadata DB may be briefly unreachable: log, wait, retry
                log.exception("claim_failed")
                worked = False
            if worked:
                continue
            if self.drain and self._drained():
                self.stopping.set()
                self._wakeups.release_all()
                return
            self._wakeups.wait(poll)

    def _checkpoints(self) -> None:
        """Checkpoint the audit chains that moved (services/audit_checkpoints.py says why
        workers do it): a pass at the start, then every tenth of QEXPORT_AUDIT_CHECKPOINT_EVERY
        (1 to 60 s), each chain at most once per that time. A failed pass is logged; the
        next one tries again."""
        deps = self.deps
        every = deps.settings.audit_checkpoint_every
        checkpointer = Checkpointer(deps.audit, deps.objects, deps.clock, every)
        pause = min(max(every.total_seconds() / 10, 1.0), 60.0)
        while not self.stopping.is_set():
            try:
                checkpointer.run_once(cut_short=self.interrupt)
            except QExportError as exc:  # the database briefly unavailable: one line
                log.warning("audit_checkpoints_failed", error=str(exc))
            except Exception:
                log.exception("audit_checkpoints_failed")
            self.stopping.wait(pause)

    def _drained(self) -> bool:
        try:
            return not self.deps.exports.has_unsettled()
        except QExportError:  # cannot tell now: keep polling rather than exit early
            log.warning("drain_check_failed", exc_info=True)
            return False

    def run_once(self) -> bool:
        """Claim and run at most one export; False when nothing was claimable."""
        deps = self.deps
        result = deps.exports.claim_next(
            worker_id=self.worker_id,
            now=deps.clock.now(),
            lease_seconds=deps.settings.lease_seconds,
            admit=pre_run_refusal,
            max_running_per_user=self.max_running_per_user,
        )
        if result.refused is not None:
            log.info("export_refused", export_id=result.refused.id, code="access_lost")
            # Only queued exports are refused today, and they have nothing staged; should a
            # redelivery ever be refused, what its earlier attempts staged goes with it.
            if result.refused.attempt > 0:
                discard_staging(deps.objects, result.refused.storage_key)
            return True
        claimed = result.claimed
        if claimed is None:
            return False
        log.info(
            "export_claimed", export_id=claimed.id, attempt=claimed.attempt, worker=self.worker_id
        )
        outcome = run_attempt(
            deps,
            claimed,
            self.interrupt,
            self.worker_id,
            subject=result.subject,
            memory=self.memory,
        )
        with self._outcomes_lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        return True
