"""API routes whose blocking work takes one trip to the thread pool, or none.

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

An endpoint marked `on_the_loop` takes no trip at all: it runs on the event loop, its Deferred
arguments resolved there too (`Deferred.resolve_on_loop`). That is for an endpoint whose only
blocking work is reads of one statement each that seek an index and wait for no lock
(`qexport.store.reads.OneRead`: 0.03-0.2 ms each), never a write, a lock, a scan or a call to
another service. Under 40 clients on PostgreSQL the trips' wake-ups and the pool's threads
taking turns on the interpreter lock were what stood between the server and its database:
with every endpoint on the pool it served 666-716 requests/s, reads p99 116-121 ms; with
these on the loop (and the loop's own connection, qexport.store.reads) 795-909 requests/s,
p99 93-116 ms (bench/api_load.py, two runs). A database that stops answering holds such a
request, and every other request of that server process, until it answers or the
connection fails.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

# Threads a server runs the endpoints' blocking work on (anyio's default: 40). As many as
# the metadata database keeps connections (qexport.store.engine.POOL_SIZE): beyond those,
# every request opened and closed one; more threads would only take turns on one
# interpreter lock.
API_THREADS = 16


class Deferred:
    """A dependency's value that takes blocking work to finish; resolve() does that work (on
    the thread pool) and returns the value, or raises as the dependency would have. (A plain
    base class: isinstance against it costs next to nothing, unlike a Protocol's.)"""

    def resolve(self) -> Any:
        raise NotImplementedError

    async def resolve_on_loop(self) -> Any:
        """The value, for an endpoint on the event loop: by default resolve() on the pool."""
        return await run_in_threadpool(self.resolve)


def _resolved(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value.resolve() if isinstance(value, Deferred) else value
        for name, value in arguments.items()
    }


async def _resolved_on_loop(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        name: await value.resolve_on_loop() if isinstance(value, Deferred) else value
        for name, value in arguments.items()
    }


Arguments = Mapping[str, Any]


def _always(_arguments: Arguments) -> bool:
    return True


def on_the_loop(
    when: Callable[[Arguments], bool] = _always,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a plain-function endpoint of an OneHopRoute to run on the event loop when its
    arguments pass `when` (by default always), and on the thread pool otherwise: see the
    module's docstring for what it may do on the loop."""

    def mark(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        endpoint._on_the_loop = when  # type: ignore[attr-defined]
        return endpoint

    return mark


def one_hop(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint` as a coroutine whose blocking work, the Deferred arguments' included, takes
    one trip to the thread pool; none for an async endpoint or one marked on_the_loop, whose
    Deferred arguments are resolved as they say (resolve_on_loop)."""
    if getattr(endpoint, "_one_hop", False):
        return endpoint
    if inspect.iscoroutinefunction(endpoint):

        async def run(**arguments: Any) -> Any:
            return await endpoint(**await _resolved_on_loop(arguments))

    elif (when := getattr(endpoint, "_on_the_loop", None)) is not None:

        async def run(**arguments: Any) -> Any:
            if when(arguments):
                return endpoint(**await _resolved_on_loop(arguments))
            return await run_in_threadpool(lambda: endpoint(**_resolved(arguments)))

    else:

        async def run(**arguments: Any) -> Any:
            return await run_in_threadpool(lambda: endpoint(**_resolved(arguments)))

    functools.update_wrapper(run, endpoint)  # FastAPI reads the signature through __wrapped__
    run._one_hop = True  # type: ignore[attr-defined]
    return run


class OneHopRoute(APIRoute):
    """An API route whose endpoint runs as one_hop says."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, one_hop(endpoint), **kwargs)
