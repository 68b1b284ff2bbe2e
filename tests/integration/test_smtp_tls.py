"""The SMTP sender over TLS against a real server: STARTTLS and implicit TLS with a verified
certificate, an untrusted certificate refused, and a server without STARTTLS refused."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from qexport.deliveries.email import SmtpSender
from qexport.deliveries.errors import DeliveryError
from tests.support.receivers import free_port

PASSWORD = "correct horse"  # noqa: S105 - a test server's password


@dataclass
class Inbox:
    messages: list[tuple[str, list[str], bytes]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: Any, session: Any, envelope: Any
    ) -> str:
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted"

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = auth_data.login == b"mailer" and auth_data.password == PASSWORD.encode()
        if ok:
            self.logins.append(auth_data.login.decode())
        return AuthResult(success=ok, handled=False)


@pytest.fixture(scope="module")
def ip_tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1: (cert file, key file)."""
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
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
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


@pytest.fixture
def trusted(ip_tls_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the test certificate the one the client trusts (OpenSSL reads SSL_CERT_FILE)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(ip_tls_certificate[0]))


def server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


@dataclass
class Server:
    inbox: Inbox
    port: int


def start(inbox: Inbox, **options: Any) -> Iterator[Server]:
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, **options)
    controller.start()
    try:
        yield Server(inbox, port)
    finally:
        controller.stop()


@pytest.fixture
def starttls_server(ip_tls_certificate: tuple[Path, Path]) -> Iterator[Server]:
    inbox = Inbox()
    yield from start(
        inbox,
        tls_context=server_context(ip_tls_certificate),
        require_starttls=True,
        authenticator=inbox.authenticate,
    )


@pytest.fixture
def implicit_tls_server(ip_tls_certificate: tuple[Path, Path]) -> Iterator[Server]:
    inbox = Inbox()
    yield from start(
        inbox,
        ssl_context=server_context(ip_tls_certificate),
        authenticator=inbox.authenticate,
        auth_require_tls=False,  # the whole connection is TLS already
    )


def message() -> EmailMessage:
    mail = EmailMessage()
    mail["To"] = "team@example.com"
    mail["Subject"] = "Export ready"
    mail.set_content("hello")
    return mail


@pytest.mark.usefixtures("trusted")
def test_starttls_with_login_delivers(starttls_server: Server) -> None:
    """smtp+starttls:// upgrades the connection, logs in and hands the message over."""
    url = f"smtp+starttls://mailer:correct%20horse@localhost:{starttls_server.port}?from=q@x.test"
    SmtpSender(url, timeout=5).send(message(), "team@example.com")

    ((sender, recipients, content),) = starttls_server.inbox.messages
    assert (sender, recipients) == ("q@x.test", ["team@example.com"])
    assert b"Subject: Export ready" in content
    assert starttls_server.inbox.logins == ["mailer"]


@pytest.mark.usefixtures("trusted")
def test_implicit_tls_delivers(implicit_tls_server: Server) -> None:
    """smtps:// speaks TLS from the first byte, to 127.0.0.1 by its IP address."""
    url = f"smtps://mailer:correct%20horse@127.0.0.1:{implicit_tls_server.port}"
    SmtpSender(url, timeout=5).send(message(), "team@example.com")

    ((sender, _, _),) = implicit_tls_server.inbox.messages
    assert sender == "qexport@localhost"


@pytest.mark.usefixtures("trusted")
def test_a_wrong_password_fails_permanently_without_showing_it(starttls_server: Server) -> None:
    """A refused login is a 5xx: no retry, and the error never repeats the password."""
    url = f"smtp+starttls://mailer:wrong-{PASSWORD}@localhost:{starttls_server.port}"
    with pytest.raises(DeliveryError) as refused:
        SmtpSender(url, timeout=5).send(message(), "team@example.com")

    assert refused.value.permanent
    assert str(refused.value) == "the mail server refused the message (SMTP 535)"
    assert PASSWORD not in str(refused.value) + refused.value.internal
    assert starttls_server.inbox.messages == []


def test_an_untrusted_certificate_is_refused(implicit_tls_server: Server) -> None:
    """Certificates are always verified: a self-signed one nobody trusts stops the send; the
    member reads that it could not connect, the operator's log why."""
    with pytest.raises(DeliveryError) as refused:
        SmtpSender(f"smtps://localhost:{implicit_tls_server.port}", timeout=5).send(
            message(), "team@example.com"
        )

    assert str(refused.value) == "could not connect to the mail server"
    assert "TLS certificate" in refused.value.internal
    assert "not trusted" in refused.value.internal
    assert implicit_tls_server.inbox.messages == []


def test_starttls_is_required_when_asked_for() -> None:
    """smtp+starttls:// never falls back to plain text when the server offers no STARTTLS."""
    for server in start(Inbox()):
        with pytest.raises(DeliveryError) as refused:
            SmtpSender(f"smtp+starttls://127.0.0.1:{server.port}", timeout=5).send(
                message(), "team@example.com"
            )
        assert refused.value.permanent
        assert "does not support STARTTLS" in refused.value.internal
        assert server.inbox.messages == []
