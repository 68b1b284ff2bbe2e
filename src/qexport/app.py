"""The application factory: the HTTP API and the web UI, siblings over one container."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI

from qexport import __version__
from qexport.api.app import install as install_api
from qexport.container import Container
from qexport.http import errors
from qexport.http.limits import BodySizeLimit
from qexport.http.one_hop import API_THREADS
from qexport.http.origin import RequestOrigin
from qexport.web.app import derive_session_key
from qexport.web.app import install as install_web


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The thread pool for the endpoints' blocking work, sized as API_THREADS says.
    anyio.to_thread.current_default_thread_limiter().total_tokens = API_THREADS
    context: Container = app.state.context
    context.serve_on_this_loop()
    await derive_session_key(app)
    # Previews run in processes of their own (previews/processes.py): their forkserver
    # imports qexport while the server starts, not when the first preview comes.
    context.previews.prepare()
    try:
        yield
    finally:
        await anyio.to_thread.run_sync(context.previews.close)


def create_app(container: Container) -> FastAPI:
    app = FastAPI(
        lifespan=_lifespan,
        title="qexport",
        version=__version__,
        description="Saved SQL queries turned into files people can download.",
    )
    app.state.context = container
    errors.install(app)
    app.add_middleware(BodySizeLimit)
    app.add_middleware(RequestOrigin, trusted=container.settings.proxies())
    install_api(app)
    install_web(app, container)
    return app
