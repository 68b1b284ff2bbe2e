"""An HTTPS webhook goes to the checked IP address but keeps its name: the receiver sees the
name as TLS SNI and in `Host`, and the certificate is verified against the name."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from qexport.deliveries.errors import DeliveryError
from qexport.deliveries.webhook import WebhookSender
from qexport.net.egress import EgressPolicy
from tests.support.receivers import tls_certificate

__all__ = ["tls_certificate"]  # the fixture, from tests/support/receivers.py


@dataclass
class TlsReceiver:
    port: int = 0
    server_names: list[str | None] = field(default_factory=list)
    hosts: list[str | None] = field(default_factory=list)


@pytest.fixture
def tls_receiver(tls_certificate: tuple[Path, Path]) -> Iterator[TlsReceiver]:
    """An HTTPS receiver on 127.0.0.1 recording the SNI and Host of every request."""
    found = TlsReceiver()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*tls_certificate)

    def remember_sni(sock: Any, server_name: str | None, ctx: Any) -> None:
        found.server_names.append(server_name)

    context.sni_callback = remember_sni

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            found.hosts.append(self.headers.get("Host"))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    found.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def sender(tls_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A sender that trusts the test certificate (OpenSSL reads SSL_CERT_FILE) and may reach
    127.0.0.1."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_certificate[0]))
    with WebhookSender(timeout=5, policy=EgressPolicy.from_allow("127.0.0.1/32")) as made:
        yield made


def test_the_name_is_kept_for_sni_and_host(
    sender: WebhookSender, tls_receiver: TlsReceiver
) -> None:
    """Posted to https://localhost:PORT, the connection goes to the checked 127.0.0.1 and the
    receiver sees `localhost` as SNI and in Host."""
    sender.send(
        f"https://localhost:{tls_receiver.port}/hook", b"{}", delivery_id="d1", signature="t=1,v1=x"
    )
    assert tls_receiver.server_names == ["localhost"]
    assert tls_receiver.hosts == [f"localhost:{tls_receiver.port}"]


def test_the_certificate_is_verified_against_the_url_name(
    sender: WebhookSender, tls_receiver: TlsReceiver
) -> None:
    """The same receiver by its IP address fails: its certificate names only `localhost`, so
    verification is against the URL's host, not the address connected to."""
    with pytest.raises(DeliveryError) as failed:
        sender.send(
            f"https://127.0.0.1:{tls_receiver.port}/hook", b"{}", delivery_id="d2", signature="x"
        )
    assert str(failed.value) == "could not connect to the receiver"
    assert tls_receiver.hosts == []
