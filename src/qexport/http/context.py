"""The container a request is served with: the one the app was created with."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from qexport.container import Container


def get_context(request: Request) -> Container:
    """FastAPI dependency: the container the app was created with."""
    container: Container = request.app.state.context
    return container


Context = Annotated[Container, Depends(get_context)]
