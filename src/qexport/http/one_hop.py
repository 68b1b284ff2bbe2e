"""API routes whose blocking work takes one trip to the thread pool, not three.

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
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
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


def _resolved(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value.resolve() if isinstance(value, Deferred) else value
        for name, value in arguments.items()
    }


def one_hop(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint` as a coroutine whose blocking work, the Deferred arguments' included, takes
    one trip to the thread pool (none for an async endpoint without Deferred arguments)."""
    if getattr(endpoint, "_one_hop", False):
        return endpoint
    if inspect.iscoroutinefunction(endpoint):

        async def run(**arguments: Any) -> Any:
            if any(isinstance(value, Deferred) for value in arguments.values()):
                arguments = await run_in_threadpool(_resolved, arguments)
            return await endpoint(**arguments)

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
