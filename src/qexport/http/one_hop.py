"""API routes whose blocking work takes one trip to the thread pool, and never the event loop.

FastAPI runs a plain-function endpoint on the thread pool, every plain-function dependency on
a trip of its own, and, for a plain-function endpoint, the validation of its response model on
a third. A trip cost about 0.2 ms on a 2-core machine (a test endpoint answered in 0.57 ms
with three trips, 0.31 ms with one, 0.08 ms with none), and under 20 clients waking the pool's
threads was an eighth of the server's time (a profile during bench/api_load.py).

An OneHopRoute makes its endpoint a coroutine that runs the plain function on the pool once,
so FastAPI validates the response on the event loop. A dependency that has blocking work to
do (the bearer token's check) returns a Deferred instead of doing it; the route resolves every
Deferred argument on that same trip, just before the endpoint runs, so that the endpoint still
receives what the dependency promised.

Every call to the metadata database is on such a trip, none on the event loop (the engine
refuses a checkout there, qexport.store.engine). The hottest reads used to run on the loop,
on a connection it kept, to spare their requests the trip; but then a database that stopped
answering, or a table locked by another session, held the loop and so every request of the
process: with the `exports` table locked for 8 s, `GET /healthz` took 7.5 s (7.6 s on SQLite
with the WAL index's read locks held as long), and a load balancer would have taken every
server out at once. Now it answers in 1 ms at most (bench/locked_database.py). What it
costs, measured with bench/api_load.py (`serve --workers 2`, 40 clients beside a large
export; before and after alternated, three and four runs, load average 4-13 on a shared
2-core machine):

- reads on the loop's connection (before): SQLite 1,948-2,004 requests/s, reads p99 61-68
  ms; PostgreSQL 832-1,036 requests/s, p99 122-172 ms; one client's GET of an export 0.34-0.35
  and 0.56-0.59 ms;
- one trip to the pool for every request (now): SQLite 979-1,730 requests/s, p99 79-152 ms;
  PostgreSQL 760-927 requests/s, p99 111-154 ms; one client 0.60-1.06 and 0.86-0.93 ms.
  A server's CPU per GET of an export (SQLite, one process, 40 clients) went from 0.30-0.35
  to 0.52-0.78 ms: about half SQLAlchemy's Connection around each read (qexport.store.reads),
  the rest the trip (anyio's costs 0.04 ms of CPU alone) and its threads taking turns on the
  interpreter lock, which each of SQLite's calls lets go of. Neither a shorter switch
  interval (0.5 ms instead of 5) nor 6 threads instead of 16 helped (SQLite, 15 s runs
  alternated: 955-1,018 and 1,043-1,206 requests/s, against 1,028-1,121 and 954-1,131);
- an async driver on the loop, per read of an export by id (PostgreSQL, one process):
  SQLAlchemy's asyncio engine over psycopg's AsyncConnection took 0.19 ms of CPU, no less
  than a trip with a read on its thread (0.17 ms). psycopg's AsyncConnection alone took 0.03
  ms, but only with SQL and parameters made outside SQLAlchemy (the compiled plan that
  qexport.store.reads no longer keeps), async services beside the sync ones, and still a
  trip for SQLite, which has no async driver (aiosqlite runs each connection on a thread of
  its own: a trip to it for the statement and another for its rows). Not taken;
- the trip itself made cheaper (now): qexport's own threads (_RequestThreads) instead of
  anyio's, see there and the README's figures.

A request that only reads (GET, HEAD) answers within the server's deadline on the database,
QEXPORT_DATABASE_TIMEOUT_SECONDS (5 s): its trip is abandoned then (the thread finishes on
its own: the engine's statement and lock timeouts end its wait about then) and it answers 503
with Retry-After. A request that writes is never abandoned, since its write may yet commit:
the engine's deadline ends its waits instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import os
import queue
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from fastapi import Request, Response
from fastapi.routing import APIRoute

from qexport.domain.failures import MetadataUnavailableError

T = TypeVar("T")

# Threads a server runs the endpoints' blocking work on at once (_RequestThreads; anyio's
# default was 40). Each
# does a few short reads or a write of the metadata database: more of them took turns on one
# interpreter lock, and writers held their locks longer meanwhile. Under 40 clients
# (bench/api_load.py: serve --workers 2 on 2 cores beside a large export, 15 s runs taken in
# turn, twice): 4 threads served SQLite 714-788 requests/s (reads p99 109-116 ms, creates p99
# 193-271 ms) and PostgreSQL 509-628 (p99 124-166 ms, creates p50 85-104 ms); 8 threads
# 798-845 (p99 104-111, creates p99 312-346) and 516-545 (p99 150-164, creates p50 142-153);
# 16 threads 788-810 (p99 101-105, creates p99 586-792) and 511-522 (p99 148-171, creates
# p50 222-288). Reads come out about even; creates wait half as long or less with 4.
API_THREADS = 4
# Work that waits on something slower than the metadata database runs on threads kept for its
# kind, never on the requests' own, which a few such waits would otherwise hold (and a flood
# of them, every request of the process): a member's data source (a preview, the describe of
# a query being saved: up to the statement timeout; as many at once as the source slots let
# run, qexport.services.slots.PER_PROCESS, which refuse more with 429; and an admin's policy
# change or new source, whose sensitive tables are looked up on the sources), and a
# sign-in's password check (argon2, after a wait of up to 3 s for one of
# QEXPORT_SIGNIN_CONCURRENCY).
APART_THREADS = {"sources": 8, "sign-in": 4}
_APART_LIMITERS: RunVar[dict[str, anyio.CapacityLimiter]] = RunVar("qexport_apart_limiters")
# The requests that write nothing, and so may be given up at the deadline.
_READS = frozenset({"GET", "HEAD"})


class Deferred:
    """A dependency's value that takes blocking work to finish; resolve() does that work (on
    the thread pool) and returns the value, or raises as the dependency would have. (A plain
    base class: isinstance against it costs next to nothing, unlike a Protocol's.)"""

    def resolve(self) -> Any:
        raise NotImplementedError


# Whether the request being served only reads, and so may be given up: set by OneHopRoute.
_ONLY_READS: ContextVar[bool] = ContextVar("qexport_only_reads", default=False)


async def off_the_loop(work: Callable[[], T], *, apart: str | None = None) -> T:
    """`work()`, run on the thread pool: on the requests' threads, or with `apart` on those
    kept for that kind of slow work (APART_THREADS). For a request that only reads, if it is
    cancelled meanwhile (its deadline passed), the thread is left to finish on its own rather
    than awaited; any other work is awaited to its end, cancelled or not."""
    if apart is None:
        return await _REQUEST_THREADS.run(work, abandon=_ONLY_READS.get())
    return await anyio.to_thread.run_sync(
        work, abandon_on_cancel=_ONLY_READS.get(), limiter=_apart_limiter(apart)
    )


class _RequestThreads:
    """The requests' threads: API_THREADS of them per process, handed their work through a
    SimpleQueue in the order it comes, and handing the result back with the loop's
    call_soon_threadsafe, nothing else.

    anyio's trip (a queue.Queue and its Condition, a cancel scope, the capacity limiter, the
    checks of which event loop runs) was a third of a server's time holding the interpreter
    lock while it served GET /api/v1/exports/{id} on PostgreSQL (py-spy --gil: Condition.notify
    18%, the worker thread's own loop 13%); with this one, 40 clients on PostgreSQL were served
    525 and 542 requests/s instead of 438 and 461 (bench/api_load.py, alternated). A read
    given up at its deadline is left to finish on its thread, its result dropped (`abandon`,
    as anyio's abandon_on_cancel); any other work is awaited to its end, cancelled or not.
    Reads and writes take turns on the same threads: on threads of their own, reads left the
    creates waiting over a second.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._jobs: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child has none of its parent's threads: it starts its own when it needs."""
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False

    async def run(self, work: Callable[[], T], *, abandon: bool) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, contextvars.copy_context(), work))
        if not self._started:
            self._start()
        if abandon:
            return await future
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await _to_its_end(future)  # a write may yet commit: its thread is awaited
            raise

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for number in range(self._size):
                name = f"qexport-request-{number}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
            self._started = True

    def _serve(self) -> None:
        jobs = self._jobs
        while True:
            loop, future, context, work = jobs.get()
            try:
                result = context.run(work)
            except BaseException as exc:
                _hand_back(loop, future, None, exc)
            else:
                _hand_back(loop, future, result, None)
            del loop, future, context, work


async def _to_its_end(future: asyncio.Future[Any]) -> None:
    """Wait until `future` is settled, however often the waiting is cancelled."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    """Settle `future` on its loop, unless the request gave it up (or the loop has closed)."""

    def settle() -> None:
        if future.done():  # given up at the deadline
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(settle)


_REQUEST_THREADS = _RequestThreads(API_THREADS)


def _apart_limiter(kind: str) -> anyio.CapacityLimiter:
    """The limiter of `kind`'s threads on the running event loop."""
    try:
        limiters = _APART_LIMITERS.get()
    except LookupError:
        limiters = {name: anyio.CapacityLimiter(n) for name, n in APART_THREADS.items()}
        _APART_LIMITERS.set(limiters)
    return limiters[kind]


def waits_on_sources(endpoint: Callable[..., T]) -> Callable[..., T]:
    """Mark an endpoint whose work waits on a member's data source: an OneHopRoute runs it on
    the threads kept for that (APART_THREADS), not on the requests' own."""
    endpoint._apart = "sources"  # type: ignore[attr-defined]
    return endpoint


def _resolved(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value.resolve() if isinstance(value, Deferred) else value
        for name, value in arguments.items()
    }


async def resolved_off_the_loop(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments with every Deferred resolved, on one trip to the pool (none if there is
    no Deferred)."""
    if not any(isinstance(value, Deferred) for value in arguments.values()):
        return arguments
    return await off_the_loop(lambda: _resolved(arguments))


def one_hop(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint` as a coroutine whose blocking work, the Deferred arguments' included, takes
    one trip to the thread pool (an async endpoint's: only its Deferred arguments')."""
    if getattr(endpoint, "_one_hop", False):
        return endpoint
    apart = getattr(endpoint, "_apart", None)
    if inspect.iscoroutinefunction(endpoint):

        async def run(**arguments: Any) -> Any:
            return await endpoint(**await resolved_off_the_loop(arguments))

    else:

        async def run(**arguments: Any) -> Any:
            return await off_the_loop(lambda: endpoint(**_resolved(arguments)), apart=apart)

    functools.update_wrapper(run, endpoint)  # FastAPI reads the signature through __wrapped__
    run._one_hop = True  # type: ignore[attr-defined]
    return run


class OneHopRoute(APIRoute):
    """An API route whose endpoint runs as one_hop says, and whose reads answer within the
    server's deadline on the database."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, one_hop(endpoint), **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def within_the_deadline(request: Request) -> Response:
            if request.method not in _READS:
                return await handle(request)
            seconds = request.app.state.context.settings.database_timeout_seconds
            _ONLY_READS.set(True)  # (this request's task's context only)
            with anyio.move_on_after(seconds):
                return await handle(request)
            # (Only a cancellation at the deadline leaves the block without an answer.)
            raise MetadataUnavailableError(
                f"the metadata database did not answer within {seconds:g} s"
            )

        return within_the_deadline
