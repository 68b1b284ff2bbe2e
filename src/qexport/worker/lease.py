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


class ShutdownRequestedError(QExportError):
    """The worker is shutting down and its grace period is over: hand the export back."""


class _Heartbeats:
    """The one thread of a process that heartbeats every lease held in it.

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
        self._due: dict[Lease, float] = {}  # each lease's next heartbeat (time.monotonic)
        self._busy: Lease | None = None
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._cond:
            self._due[lease] = time.monotonic() + lease.interval
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
                self._thread.start()
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
            due = self._due.get(lease)
            if due is None:  # its attempt ended meanwhile
                return
            beat = due <= time.monotonic()
            self._busy = lease
        keep = True
        try:
            keep = lease.tick(beat=beat)
        finally:
            with self._cond:
                self._busy = None
                if not keep:
                    self._due.pop(lease, None)
                elif beat and lease in self._due:  # the next one an interval after this one
                    self._due[lease] = time.monotonic() + lease.interval
                self._cond.notify_all()


class Lease:
    """Heartbeats one claimed export from the process's heartbeat thread, fenced by its token.

    When the lease is lost (cancelled, or redelivered elsewhere) or the worker must hand the
    export back, the registered stop hooks run at once, e.g. to interrupt a running statement
    that would otherwise go on until its timeout.
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
    ) -> None:
        self._store = store
        self._clock = clock
        self.export_id = export_id
        self.token = token
        self._lease_seconds = lease_seconds
        self._shutdown = shutdown
        self.progress_rows = 0
        self._lost = threading.Event()
        self._hooks: list[Callable[[], None]] = []
        self._hooks_lock = threading.Lock()
        self._fired = False
        self.interval = max(lease_seconds / 3, 0.05)

    def __enter__(self) -> Lease:
        _HEARTBEATS.add(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        _HEARTBEATS.remove(self)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def check(self) -> None:
        """Raise if production must stop now (lease lost, cancelled, or shutting down)."""
        if self._lost.is_set():
            raise LeaseLostError("the lease was lost (cancelled, or redelivered to another worker)")
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
        try:
            ok = self._store.heartbeat(
                self.export_id,
                self.token,
                now=self._clock.now(),
                lease_seconds=self._lease_seconds,
                progress_rows=self.progress_rows,
            )
        except Exception:  # a flaky metadata DB must not kill production; the lease may still hold
            log.warning("heartbeat_failed", export_id=self.export_id, exc_info=True)
            return True
        if not ok:
            self._lost.set()
            self._fire()
        return ok

    def tick(self, *, beat: bool) -> bool:
        """What the heartbeat thread does for this lease: stop production if the worker is
        shutting down, heartbeat if `beat`. False once the lease is lost."""
        if self._shutdown.is_set():
            self._fire()
        if beat and not self.beat():
            log.info("lease_lost", export_id=self.export_id)
            return False
        return True


_HEARTBEATS = _Heartbeats()
