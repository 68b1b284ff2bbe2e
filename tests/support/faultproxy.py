"""A fault-injecting HTTP proxy between qexport and an S3 server, for the fault tests.

Every request is read in full (answering `Expect: 100-continue`, reading a Content-Length or a
chunked body). Then, for a `fault_rate` fraction of requests drawn from a seeded RNG, instead
of forwarding it the proxy injects one fault:

- `slow_down`: a 503 with S3's SlowDown error document (what S3 answers when throttling);
- `reset`: the connection is reset (TCP RST) without an answer;
- `stall`: nothing is answered for `stall_seconds` (longer than the client's read timeout),
  then the connection is reset.

A faulted request never reaches the server, so the server sees each operation at most as
often as the client's retries get through. One more fault is only injected on request, with
`lose_reply(when)`: the next request `when` accepts is forwarded, the server acts on it, and
its answer is replaced by a reset (`lost_reply`), as when a connection drops on the way back.
`fault_rate` may be changed at any time, and `after_forward` is called with each request the
server answered, before the answer is passed on (to start an outage at a chosen moment).
`counts()` gives the faults injected of each kind and the requests forwarded, all counted
before the client sees the outcome.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import random
import socket
import socketserver
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar
from urllib.parse import urlparse

FAULT_KINDS = ("slow_down", "reset", "stall")
LOST_REPLY = "lost_reply"
FORWARDED = "forwarded"

# Not forwarded as they are: they describe this hop, or the body is re-sent with a length.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "content-length",
    }
)
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>FAULTPROXY</RequestId></Error>"
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with the query string


class FaultProxy:
    """Forwards HTTP/1.1 requests to `upstream`, injecting faults; a context manager."""

    def __init__(
        self,
        upstream: str,
        *,
        fault_rate: float = 0.0,
        seed: int = 0,
        stall_seconds: float = 5.0,
        kinds: tuple[str, ...] = FAULT_KINDS,
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown or not kinds:
            raise ValueError(f"fault kinds must be some of {FAULT_KINDS}, got {kinds}")
        parsed = urlparse(upstream)
        assert parsed.hostname is not None
        self.upstream = (parsed.hostname, parsed.port or 80)
        self.fault_rate = fault_rate
        self.stall_seconds = stall_seconds
        self.kinds = kinds
        self.after_forward: Callable[[Request], None] | None = None
        self._lose_reply: list[Callable[[Request], bool]] = []
        self._injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def counts(self) -> dict[str, int]:
        """Faults injected by kind, and requests forwarded, so far."""
        with self._lock:
            return {kind: self._injected[kind] for kind in (*FAULT_KINDS, LOST_REPLY, FORWARDED)}

    def faults(self) -> int:
        with self._lock:
            return sum(self._injected[kind] for kind in (*FAULT_KINDS, LOST_REPLY))

    def lose_reply(self, when: Callable[[Request], bool]) -> None:
        """Forward the next request that `when` accepts, then reset instead of answering."""
        with self._lock:
            self._lose_reply.append(when)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopping.set()  # wakes stalled requests
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # ------------------------------------------------------------ used by the handler

    def choose_fault(self, request: Request) -> str | None:
        with self._lock:
            for index, when in enumerate(self._lose_reply):
                if when(request):
                    del self._lose_reply[index]
                    self._injected[LOST_REPLY] += 1
                    return LOST_REPLY
            if self._rng.random() >= self.fault_rate:
                return None
            kind = self._rng.choice(self.kinds)
            self._injected[kind] += 1
            return kind

    def stall(self) -> None:
        self._stopping.wait(self.stall_seconds)

    def forwarded(self, request: Request) -> None:
        with self._lock:
            self._injected[FORWARDED] += 1
        if self.after_forward is not None:
            self.after_forward(request)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False
    proxy: FaultProxy

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away mid-answer is normal here (it timed out): stay quiet."""


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and `Expect: 100-continue` is answered
    timeout = 30  # an idle keep-alive connection is closed after this long
    server: _Server
    _BODYLESS: ClassVar[frozenset[int]] = frozenset({204, 304})

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the tests assert on counters, not on a request log."""

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def _proxy(self) -> None:
        body = self._read_body()
        proxy = self.server.proxy
        request = Request(self.command, self.path)
        fault = proxy.choose_fault(request)
        if fault == "slow_down":
            self._answer(503, "Slow Down", [("Content-Type", "application/xml")], _SLOW_DOWN)
        elif fault == "reset":
            self._reset()
        elif fault == "stall":
            proxy.stall()
            self._reset()
        else:
            status, reason, headers, answer = self._forward(body)
            # Counted before the client has the answer: what it saw is counted when it sees it.
            proxy.forwarded(request)
            if fault == LOST_REPLY:
                self._reset()
            else:
                self._answer(status, reason, headers, answer)

    # http.server dispatches on these names.
    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _proxy  # noqa: N815

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return b"".join(self._chunks())
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _chunks(self) -> Iterator[bytes]:
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields: not forwarded
                return
            yield self.rfile.read(size)
            self.rfile.readline()

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        # A new upstream connection per request: no stale keep-alive connection to trip on.
        upstream = http.client.HTTPConnection(*self.server.proxy.upstream, timeout=60)
        with contextlib.closing(upstream):
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            if body or self.command in ("PUT", "POST"):
                upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body or None)
            response = upstream.getresponse()
            answer = response.read()
            return response.status, response.reason, response.getheaders(), answer

    def _answer(
        self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        self.send_response_only(status, reason)
        length = "0" if self.command == "HEAD" else str(len(body))
        for name, value in headers:
            lowered = name.lower()
            if lowered == "content-length":
                if self.command == "HEAD":  # the length of the body a GET would carry
                    length = value
            elif lowered not in _HOP_BY_HOP:
                self.send_header(name, value)
        if status not in self._BODYLESS:
            self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD" and status not in self._BODYLESS:
            self.wfile.write(body)
        self.wfile.flush()

    def _reset(self) -> None:
        """Close with a TCP RST: the client sees its connection reset, without an answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
