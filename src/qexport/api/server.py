"""uvicorn in the foreground, for `qexport serve` and `qexport demo --serve`."""

from __future__ import annotations

import ipaddress
import signal
from types import FrameType

from fastapi import FastAPI

from qexport.config import Settings

_WILDCARDS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - recognised, not bound to


def local_url(host: str, port: int) -> str:
    """The URL a person on this machine opens for a server listening on `host`."""
    if host in _WILDCARDS:
        host = "127.0.0.1"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    return f"http://{host}:{port}"


def with_public_url(settings: Settings, host: str, port: int) -> Settings:
    """Public links point at this server unless QEXPORT_PUBLIC_BASE_URL says otherwise."""
    if settings.public_base_url:
        return settings
    return settings.with_overrides(public_base_url=local_url(host, port))


def _already_handled(_signum: int, _frame: FrameType | None) -> None:
    """The replayed stop signal: the server has already shut down."""


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM, then return (after in-flight requests finish)."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    )
    # uvicorn replays the signal that stopped it once it has shut down; by then it is handled,
    # and the caller gets to clean up (stop a worker) and exit 0 instead of dying of it.
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, _already_handled) for sig in stop_signals}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
