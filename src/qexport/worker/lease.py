"""The lease an attempt holds: heartbeats extend it; losing it stops production."""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from qexport.domain.failures import LeaseLostError, QExportError
from qexport.ports import Clock, MetadataStore

log = structlog.get_logger()

# How often the heartbeat thread looks at the shutdown flag between heartbeats.
_TICK_SECONDS = 0.25


class ShutdownRequestedError(QExportError):
    """The worker is shutting down and its grace period is over: hand the export back."""


class Lease:
    """Heartbeats one claimed export from a background thread, fenced by its token.

    When the lease is lost (cancelled, or redelivered elsewhere) or the worker must hand the
    export back, the registered stop hooks run at once, e.g. to interrupt a running statement
    that would otherwise go on until its timeout.
    """

    def __init__(
        self,
        store: MetadataStore,
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
        self._stopped = threading.Event()
        self._hooks: list[Callable[[], None]] = []
        self._hooks_lock = threading.Lock()
        self._fired = False
        self._thread = threading.Thread(
            target=self._beat, name=f"heartbeat-{export_id[:8]}", daemon=True
        )

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        self._thread.join()

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
            log.warning("heartbeat_failed", exc_info=True)
            return True
        if not ok:
            self._lost.set()
            self._fire()
        return ok

    def _beat(self) -> None:
        interval = max(self._lease_seconds / 3, 0.05)
        waited = 0.0
        tick = min(_TICK_SECONDS, interval)
        while not self._stopped.wait(tick):
            if self._shutdown.is_set():
                self._fire()
            waited += tick
            if waited >= interval:
                waited = 0.0
                if not self.beat():
                    log.info("lease_lost")
                    return
