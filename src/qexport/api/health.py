"""Operations routes, all without a token: liveness, readiness, and `/metrics` (metrics.py).

`/healthz` (liveness) answers on the event loop and touches nothing: it says the process
answers, whatever the database does, so that a slow database never gets a server restarted.

`/readyz` (readiness) answers within a second either way: its checks (the metadata database
reads the exports table, its schema is the one this code needs, the object store is usable)
each run on a thread of their own, together, and a check that has not answered within
READINESS_BUDGET_SECONDS is reported `timed_out`. A check still running from an earlier
probe (a locked table holds it until the server's deadline on the database) is awaited
again, not started twice: a balancer probing every second adds no thread while the database
is stuck, and takes none of the requests' thread pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, Literal

import structlog
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from qexport.api import metrics
from qexport.api.auth import Context
from qexport.http.errors import PROBLEM, problem
from qexport.http.one_hop import OneHopRoute

log = structlog.get_logger()

router = APIRouter(route_class=OneHopRoute, tags=["operations"])
router.include_router(metrics.router)

OK: Final = "ok"
FAILED: Final = "failed"
TIMED_OUT: Final = "timed_out"
# How long /readyz waits for its checks: under a second, whatever they do.
READINESS_BUDGET_SECONDS = 0.8
Outcome = Literal["ok", "failed", "timed_out"]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready"]
    checks: dict[str, Literal["ok"]] = Field(
        examples=[{"database": OK, "schema": OK, "storage": OK}]
    )


class NotReady(BaseModel):
    """A problem document naming the checks that failed or did not answer in time; the
    reasons go to the log only (they may name hosts or paths), except the schema's, which
    names revisions."""

    type: str
    title: str
    status: int
    code: Literal["unavailable"]
    detail: str
    checks: dict[str, Outcome]


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": OK}


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: the metadata database answers with the schema this server needs, and"
    " the object store is usable (answered within a second either way)",
    responses={
        503: {
            "description": "A check failed or did not answer within a second; `checks` names"
            " it (`failed`, `timed_out`).",
            "content": {PROBLEM: {"schema": NotReady.model_json_schema()}},
        }
    },
)
async def readyz(request: Request, context: Context) -> Any:
    probes: _Probes = _probes_of(request)
    running = {
        "database": probes.start("database", context.check_database),
        "schema": probes.start("schema", context.check_schema),
        "storage": probes.start("storage", context.check_storage),
    }
    waiting = {asyncio.wrap_future(future) for future in running.values()}
    await asyncio.wait(waiting, timeout=READINESS_BUDGET_SECONDS)
    checks: dict[str, Outcome] = {}
    reasons: list[str] = []
    for name, future in running.items():
        if not future.done():
            checks[name] = TIMED_OUT
            reasons.append(f"{name} did not answer within {READINESS_BUDGET_SECONDS:g} s")
            continue
        why = future.result()
        checks[name] = OK if why is None else FAILED
        if why is not None:
            reasons.append(why or f"{name} failed")
    if reasons:
        return problem(503, "unavailable", f"not ready: {'; '.join(reasons)}", checks=checks)
    return {"status": "ready", "checks": checks}


class _Probes:
    """The readiness checks of one server, each running at most once at a time."""

    def __init__(self) -> None:
        self._running: dict[str, Future[str | None]] = {}
        self._lock = threading.Lock()

    def start(self, name: str, check: Callable[[], object]) -> Future[str | None]:
        """The check's outcome to come: the one still running, or a new run of it."""
        with self._lock:
            running = self._running.get(name)
            if running is not None and not running.done():
                return running
            future: Future[str | None] = Future()
            future.set_running_or_notify_cancel()  # never cancelled: a waiter only gives up
            self._running[name] = future
        threading.Thread(
            target=_run, args=(name, check, future), name=f"readyz-{name}", daemon=True
        ).start()
        return future


def _run(name: str, check: Callable[[], object], future: Future[str | None]) -> None:
    """Settle `future` with None when `check` passes (returns None); with the reason it
    returned (the schema's: revisions, no secret), or with "" when it raised (the reason
    may name hosts or paths: logged, never returned)."""
    try:
        said = check()
    except Exception as exc:
        log.warning("readiness_check_failed", check=name, error=type(exc).__name__, reason=str(exc))
        future.set_result("")
        return
    if isinstance(said, str):
        log.warning("readiness_check_failed", check=name, reason=said)
        future.set_result(said)
        return
    future.set_result(None)


_PROBES_MADE = threading.Lock()


def _probes_of(request: Request) -> _Probes:
    state = request.app.state
    with _PROBES_MADE:
        probes = getattr(state, "readiness_probes", None)
        if probes is None:
            probes = state.readiness_probes = _Probes()
    return probes
