"""Real servers that receive deliveries in tests: SMTP (aiosmtpd) and an HTTP webhook receiver
(also over TLS, for the chat services' https-only incoming webhooks).

Both record what arrived and answer from a script, so that a test can make a recipient fail
a number of times, or always, and then read exactly what each recipient got.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email
import email.policy
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- SMTP


@dataclass
class Mail:
    sender: str
    recipients: list[str]
    message: EmailMessage

    @property
    def text(self) -> str:
        """The plain-text body."""
        part = self.message.get_body(preferencelist=("plain",))
        assert part is not None, "the message has no text/plain body"
        return str(part.get_content())

    def attachments(self) -> list[tuple[str, bytes]]:
        return [(str(a.get_filename()), a.get_content()) for a in self.message.iter_attachments()]


@dataclass
class SmtpServer:
    """An SMTP server on 127.0.0.1. `refuse[address]` = replies given to RCPT TO for that
    address, one per attempt (then it is accepted), e.g. ["451 try later"] or ["550 no"] * 99."""

    host: str
    port: int
    mails: list[Mail] = field(default_factory=list)
    refuse: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"smtp://{self.host}:{self.port}?from=qexport@example.com"

    def to(self, address: str) -> list[Mail]:
        with self.lock:
            return [m for m in self.mails if address in m.recipients]


class _Handler:
    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook name
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        with self.server.lock:
            replies = self.server.refuse.get(address)
            if replies:
                return replies.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: Any, session: Any, envelope: Any
    ) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self.server.lock:
            self.server.mails.append(Mail(envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 Message accepted"


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    server = SmtpServer("127.0.0.1", free_port())
    controller = Controller(_Handler(server), hostname=server.host, port=server.port)
    controller.start()
    try:
        yield server
    finally:
        controller.stop()


# ---------------------------------------------------------------- webhooks


@dataclass
class Hook:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered


@dataclass
class WebhookReceiver:
    """An HTTP server on 127.0.0.1 (or `host`). `script[path]` = statuses to answer for that
    path, one per request (then 200), e.g. [500, 500] or [503] * 99; `redirect[path]` = the
    Location sent with them."""

    port: int
    received: list[Hook] = field(default_factory=list)
    script: dict[str, list[int]] = field(default_factory=dict)
    redirect: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    host: str = "127.0.0.1"
    tls: bool = False  # then reached as https://localhost (the certificate's only name)

    def url(self, path: str = "/hook") -> str:
        if self.tls:
            return f"https://localhost:{self.port}{path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    def at(self, path: str) -> list[Hook]:
        with self.lock:
            return [h for h in self.received if h.path == path]


def _hook_handler(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with receiver.lock:
                statuses = receiver.script.get(self.path)
                status = statuses.pop(0) if statuses else 200
                location = receiver.redirect.get(self.path)
                receiver.received.append(Hook(self.path, dict(self.headers.items()), body, status))
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Ipv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@contextlib.contextmanager
def running_receiver(
    host: str = "127.0.0.1", tls: tuple[Path, Path] | None = None
) -> Iterator[WebhookReceiver]:
    """A webhook receiver listening on `host` (an IPv4 or IPv6 address) on a free port; with
    `tls` (a certificate and key for `localhost`), over HTTPS."""
    receiver = WebhookReceiver(0, host=host, tls=tls is not None)
    server_class = _Ipv6Server if ":" in host else ThreadingHTTPServer
    server = server_class((host, 0), _hook_handler(receiver))
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    with running_receiver() as receiver:
        yield receiver


def localhost_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate (and its key) for the name `localhost` only, in `folder`;
    a client trusts it through SSL_CERT_FILE."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture(scope="session")
def tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`localhost_certificate` once for the session: (cert file, key file)."""
    return localhost_certificate(tmp_path_factory.mktemp("tls"))
