"""uvicorn in the foreground, for `qexport serve` and `qexport demo --serve`."""

from __future__ import annotations

import gc
import ipaddress
import os
import signal
import socket
import sys
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


def cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def balances_connections() -> bool:
    """Whether server processes can each listen on a socket of their own on one port, the
    kernel spreading connections evenly between them (SO_REUSEPORT, as Linux does it)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def listening_socket(host: str, port: int, *, own_share: bool = False) -> socket.socket:
    """A socket bound to `host`:`port`; OSError when the address is taken or not this
    machine's.

    Without `own_share`: one socket for processes forked next to accept on together;
    whichever is free takes a connection, and kept-alive clients stay where they landed.
    Under 20 clients one process was seen at a full core and the other at a fifth (421
    requests/s, against 651 when even; bench/api_load.py). With `own_share`: each process
    binds one of these (SO_REUSEPORT) and the kernel hands every new connection to one of
    them by a hash of its addresses, so their shares are even on average.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: accepted sockets inherit it, and asyncio sets TCP_NODELAY only on
    # sockets that say TCP. Without it every response waited for the client's delayed ACK
    # (40 ms a request instead of 0.7 ms for GET /healthz; bench/api_load.py).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if own_share:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def run_server(app: FastAPI, host: str, port: int, *, sock: socket.socket | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then return (after in-flight requests finish); on
    `sock` (see listening_socket) when given, else on a socket of its own."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            # qexport reads X-Forwarded-For itself, from QEXPORT_TRUSTED_PROXIES only
            # (http/origin.py); uvicorn's reading believed 127.0.0.1 and ::1 by default.
            proxy_headers=False,
        )
    )
    # uvicorn replays the signal that stopped it once it has shut down; by then it is handled,
    # and the caller gets to clean up (stop a worker) and exit 0 instead of dying of it.
    # What start-up made (routes, schemas, the container) lives as long as the server: out of
    # the collector's way, a full collection took 4 ms instead of 130-300 ms, during which
    # every request of the process stood still (bench/api_load.py, 40 clients).
    gc.collect()
    gc.freeze()
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, _already_handled) for sig in stop_signals}
    try:
        server.run(sockets=None if sock is None else [sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
