"""The lease an attempt holds: heartbeats extend it; losing it stops production."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import structlog

from qexport.domain.failures import LeaseLostError, QExportError
from qexport.ports import Clock, ExportQueue

log = structlog.get_logger()

# How often the heartbeat thread looks at the shutdown flag between heartbeats.
_TICK_SECONDS = 0.25
# How often the rows written so far are published between heartbeats (one fenced UPDATE of
# progress_rows, only when they changed): people watching an export see it move at least
# this often, whatever the lease's length.
PROGRESS_SECONDS = 2.0


class ShutdownRequestedError(QExportError):
    """The worker is shutting down and its grace period is over: hand the export back."""


class _Heartbeats:
    """The one thread of a process that heartbeats every lease held in it, and publishes the
    rows each has written in between.

    A thread of its own per attempt cost a thread start and join per export: 0.16 ms of CPU
    of a tiny csv export, and more waiting for the scheduler when the cores are busy.
    Leases are looked at one at a time, and `remove` waits for the one being looked at, so
    that nothing is done for a lease once its attempt has ended.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Lease, float] = {}  # when each lease next needs a look (monotonic)
        self._busy: Lease | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Start the thread now, if it does not run yet; its native id."""
        with self._cond:
            return self._started().native_id or 0

    def _started(self) -> threading.Thread:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
            self._thread.start()
        return self._thread

    def add(self, lease: Lease) -> None:
        with self._cond:
            lease.schedule(time.monotonic(), beat=True)
            self._due[lease] = lease.next_look
            self._started()
            self._cond.notify_all()

    def remove(self, lease: Lease) -> None:
        """Stop looking at `lease`; returns once nothing is being done for it."""
        with self._cond:
            self._due.pop(lease, None)
            while self._busy is lease:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                wait = min(self._due.values()) - time.monotonic()
                if wait > 0:
                    self._cond.wait(min(wait, _TICK_SECONDS))
                leases = list(self._due)
            for lease in leases:
                try:
                    self._look_at(lease)
                except Exception:  # one lease's trouble must not stop every heartbeat
                    log.exception("heartbeat_thread_failed", export_id=lease.export_id)

    def _look_at(self, lease: Lease) -> None:
        with self._cond:
            if lease not in self._due:  # its attempt ended meanwhile
                return
            now = time.monotonic()
            beat = lease.next_beat <= now
            publish = not beat and lease.next_progress <= now
            self._busy = lease
        keep = True
        try:
            keep = lease.tick(beat=beat, publish=publish)
        finally:
            with self._cond:
                self._busy = None
                if not keep:
                    self._due.pop(lease, None)
                elif (beat or publish) and lease in self._due:
                    lease.schedule(time.monotonic(), beat=beat)
                    self._due[lease] = lease.next_look
                self._cond.notify_all()


class Lease:
    """Heartbeats one claimed export from the process's heartbeat thread, fenced by its token.

    When the lease is lost (cancelled, or redelivered elsewhere), the worker must hand the
    export back, or the worker's memory watch stops the attempt (`stop`), the registered stop
    hooks run at once, e.g. to interrupt a running statement that would otherwise go on until
    its timeout.
    """

    def __init__(
        self,
        store: ExportQueue,
        clock: Clock,
        export_id: str,
        token: str,
        *,
        lease_seconds: float,
        shutdown: threading.Event,
        progress_seconds: float = PROGRESS_SECONDS,
    ) -> None:
        self._store = store
        self._clock = clock
        self.export_id = export_id
        self.token = token
        self._lease_seconds = lease_seconds
        self._shutdown = shutdown
        self.progress_rows = 0
        self._published_rows = 0
        self._lost = threading.Event()
        self._stopped_by: QExportError | None = None
        self._hooks: list[Callable[[], None]] = []
        self._hooks_lock = threading.Lock()
        self._fired = False
        self.interval = max(lease_seconds / 3, 0.05)
        self.progress_interval = min(max(progress_seconds, 0.05), self.interval)
        # Kept by the heartbeat thread (time.monotonic): the next heartbeat, the next
        # publication of progress, and the sooner of the two.
        self.next_beat = self.next_progress = self.next_look = 0.0

    def schedule(self, now: float, *, beat: bool) -> None:
        """After a heartbeat (`beat`) or a publication of progress at `now`: when the next
        of each is due. A heartbeat carries the progress too."""
        if beat:
            self.next_beat = now + self.interval
        self.next_progress = now + self.progress_interval
        self.next_look = min(self.next_beat, self.next_progress)

    def __enter__(self) -> Lease:
        _HEARTBEATS.add(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        _HEARTBEATS.remove(self)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    @property
    def stopped_by(self) -> QExportError | None:
        """Why `stop` stopped production (the worker's memory), or None."""
        return self._stopped_by

    def stop(self, reason: QExportError) -> None:
        """Stop production for `reason`, from any thread: the stop hooks run now (a running
        statement is interrupted) and `check` raises `reason` from now on. The first reason
        given is kept."""
        with self._hooks_lock:
            if self._stopped_by is None:
                self._stopped_by = reason
        self._fire()

    def check(self) -> None:
        """Raise if production must stop now (lease lost, cancelled, stopped, or shutting
        down)."""
        if self._lost.is_set():
            raise LeaseLostError("the lease was lost (cancelled, or redelivered to another worker)")
        if self._stopped_by is not None:
            raise self._stopped_by
        if self._shutdown.is_set():
            raise ShutdownRequestedError("the worker is shutting down")

    def on_stop(self, hook: Callable[[], None]) -> None:
        """Run `hook` when production must stop (at once if it already must)."""
        with self._hooks_lock:
            if not self._fired:
                self._hooks.append(hook)
                return
        hook()

    def _fire(self) -> None:
        with self._hooks_lock:
            if self._fired:
                return
            self._fired = True
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # stopping is best effort; check() still stops production
                log.warning("stop_hook_failed", exc_info=True)

    def beat(self) -> bool:
        """One heartbeat now; False (and the lease marked lost) when it matched no row."""
        rows = self.progress_rows
        try:
            ok = self._store.heartbeat(
                self.export_id,
                self.token,
                now=self._clock.now(),
                lease_seconds=self._lease_seconds,
                progress_rows=rows,
            )
        except Exception:  # a flaky metadata DB must not kill production; the lease may still hold
            log.warning("heartbeat_failed", export_id=self.export_id, exc_info=True)
            return True
        return self._held(ok, rows)

    def publish(self) -> bool:
        """Publish the rows written so far if they changed since last time (no lease change,
        no event); False (and the lease marked lost) when the write matched no row."""
        rows = self.progress_rows
        if rows == self._published_rows:
            return True
        try:
            ok = self._store.record_progress(self.export_id, self.token, rows=rows)
        except Exception:  # progress is best effort; the next heartbeat carries it too
            log.warning("progress_failed", export_id=self.export_id, exc_info=True)
            return True
        return self._held(ok, rows)

    def _held(self, ok: bool, rows: int) -> bool:
        if ok:
            self._published_rows = rows
        else:
            self._lost.set()
            self._fire()
        return ok

    def tick(self, *, beat: bool, publish: bool = False) -> bool:
        """What the heartbeat thread does for this lease: stop production if the worker is
        shutting down, heartbeat if `beat`, else publish progress if `publish`. False once
        the lease is lost."""
        if self._shutdown.is_set():
            self._fire()
        if (beat and not self.beat()) or (publish and not self.publish()):
            log.info("lease_lost", export_id=self.export_id)
            return False
        return True


_HEARTBEATS = _Heartbeats()


def start_heartbeats() -> int:
    """Start this process's heartbeat thread now (it waits while no lease is held) and return
    its native thread id. A worker starts it before it lowers its own priority and leaves it
    out (cli._lower_priority): a thread is created with its creator's niceness and scheduling
    class, and a heartbeat in the idle class waits for every other process of the machine, so
    that beside busy work a live worker lost its leases and its exports were run twice."""
    return _HEARTBEATS.start()
