"""The application factory: the HTTP API and the web UI, siblings over one container."""

from __future__ import annotations

from fastapi import FastAPI

from qexport import __version__
from qexport.api.app import install as install_api
from qexport.container import Container
from qexport.http import errors
from qexport.http.limits import BodySizeLimit
from qexport.http.origin import RequestOrigin
from qexport.web.app import install as install_web


def create_app(container: Container) -> FastAPI:
    app = FastAPI(
        title="qexport",
        version=__version__,
        description="Saved SQL queries turned into files people can download.",
    )
    app.state.context = container
    errors.install(app)
    app.add_middleware(BodySizeLimit)
    app.add_middleware(RequestOrigin)
    install_api(app)
    install_web(app, container)
    return app
