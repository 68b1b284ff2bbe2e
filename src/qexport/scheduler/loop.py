"""The scheduler: fire due schedules, then send waiting deliveries, every poll, until stopped.

Any number of schedulers may run at once: a due time is fired by one transaction keyed by
(schedule, due time), and each delivery is claimed by one sender under a lease.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol, TypeVar

import structlog

from qexport.container import Container
from qexport.domain.failures import QExportError
from qexport.services.schedules import tick as schedule_tick
from qexport.services.schedules.tick import FiredRun

log = structlog.get_logger()
T = TypeVar("T")


class Dispatcher(Protocol):
    def run_once(self) -> int:
        """Send the deliveries that may go out now; how many were attempted."""
        ...


@dataclass(frozen=True)
class PassResult:
    """What one pass did. `ok` is False when a step raised (it was logged; the next pass
    tries again)."""

    fired: list[FiredRun] = field(default_factory=list)
    skipped: int = 0
    dispatched: int = 0
    ok: bool = True


class Scheduler:
    """Ticks the schedules, then runs the delivery dispatcher (if any), every
    `settings.scheduler_poll_seconds`, until `stop()`."""

    def __init__(self, deps: Container, *, dispatcher: Dispatcher | None = None) -> None:
        self.deps = deps
        self.schedules = deps.schedules
        self.dispatcher = dispatcher
        self.stopping = threading.Event()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the loop once the current pass is done."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        log.info("scheduler_stopping", signal=signum)
        self.stop()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        """Until stopped: fire due schedules every poll and, in a thread of its own, send
        deliveries, so that slow recipients never make a due time late. A step that fails
        is logged and tried again at the next poll."""
        poll = self.deps.settings.scheduler_poll_seconds
        log.info("scheduler_started", poll_s=poll, deliveries=self.dispatcher is not None)
        sender = threading.Thread(target=self._send_loop, name="deliveries", daemon=True)
        if self.dispatcher is not None:
            sender.start()
        while not self.stopping.is_set():
            self._tick()
            self.stopping.wait(poll)
        if sender.is_alive():
            sender.join()
        log.info("scheduler_stopped")

    def _send_loop(self) -> None:
        poll = self.deps.settings.scheduler_poll_seconds
        while not self.stopping.is_set():
            self._dispatch()
            self.stopping.wait(poll)

    def run_once(self) -> PassResult:
        """One pass: fire what is due, then send what may go out. Never raises."""
        tick = self._tick()
        dispatched = self._dispatch()
        return PassResult(
            tick.runs if tick is not None else [],
            tick.skipped if tick is not None else 0,
            dispatched or 0,
            ok=tick is not None and dispatched is not None,
        )

    def _tick(self) -> schedule_tick.TickResult | None:
        deps = self.deps
        return _guarded(
            "schedule_tick_failed",
            lambda: schedule_tick.tick(
                deps.catalog,
                self.schedules,
                deps.clock,
                grace=deps.settings.schedule_grace,
                max_unsettled=deps.settings.max_unsettled_per_user,
                accounts=deps.accounts,
            ),
        )

    def _dispatch(self) -> int | None:
        if self.dispatcher is None:
            return 0
        return _guarded("delivery_dispatch_failed", self.dispatcher.run_once)


def _guarded(event: str, step: Callable[[], T]) -> T | None:
    """Run one step of a pass; None, logged, if it failed: the next pass tries again."""
    try:
        return step()
    except QExportError as exc:  # e.g. the database briefly unavailable: one line, no trace
        log.warning(event, error=str(exc))
    except Exception:
        log.exception(event)
    return None
