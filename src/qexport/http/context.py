"""The container a request is served with: the one the app was created with."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from qexport.container import Container


async def get_context(request: Request) -> Container:
    """FastAPI dependency: the container the app was created with. Async because it does no
    I/O: a plain function would be run on the thread pool, one hand-over per request."""
    container: Container = request.app.state.context
    return container


Context = Annotated[Container, Depends(get_context)]
