"""The lease an attempt holds: heartbeats extend it; losing it stops production."""

from __future__ import annotations

import threading

import structlog

from qexport.domain.failures import LeaseLostError, QExportError
from qexport.ports import Clock, MetadataStore

log = structlog.get_logger()


class ShutdownRequestedError(QExportError):
    """The worker is shutting down and its grace period is over: hand the export back."""


class Lease:
    """Heartbeats one claimed export from a background thread, fenced by its token."""

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
        return ok

    def _beat(self) -> None:
        interval = max(self._lease_seconds / 3, 0.05)
        while not self._stopped.wait(interval):
            if not self.beat():
                log.info("lease_lost")
                return
