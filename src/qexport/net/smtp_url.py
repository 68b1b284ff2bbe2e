"""The SMTP server qexport sends email through, configured by one URL (`QEXPORT_SMTP_URL`).

    smtp://host[:port][?from=ADDR]                        plain, port 25, no login
    smtp+starttls://[user:pass@]host[:port][?from=ADDR]   STARTTLS required, port 587
    smtps://[user:pass@]host[:port][?from=ADDR]           implicit TLS, port 465

Parsed apart from the sender (deliveries/email.py) so that the settings can check the URL
without loading smtplib.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

DEFAULT_FROM = "qexport@localhost"
_PORTS = {"smtp": 25, "smtp+starttls": 587, "smtps": 465}


@dataclass(frozen=True)
class SmtpConfig:
    scheme: str
    host: str
    port: int
    sender: str = DEFAULT_FROM
    username: str = ""
    password: str = field(default="", repr=False)


def parse_smtp_url(url: str) -> SmtpConfig:
    """The parts of an SMTP URL; ValueError (without the password) when it is malformed."""
    parts = urlsplit(url)
    if parts.scheme not in _PORTS:
        raise ValueError(
            f"unsupported QEXPORT_SMTP_URL scheme {parts.scheme!r}"
            " (expected smtp://, smtp+starttls:// or smtps://)"
        )
    try:
        port = parts.port or _PORTS[parts.scheme]
    except ValueError:
        raise ValueError("QEXPORT_SMTP_URL has an invalid port") from None
    if not parts.hostname:
        raise ValueError("QEXPORT_SMTP_URL has no host")
    if parts.scheme == "smtp" and (parts.username or parts.password):
        # Over plain SMTP a login crosses the network readable by anyone on the path.
        raise ValueError(
            "QEXPORT_SMTP_URL has a user and password on smtp://, which would send them in"
            " clear text; use smtp+starttls:// (port 587) or smtps:// (port 465)"
        )
    sender = parse_qs(parts.query).get("from", [DEFAULT_FROM])[0]
    return SmtpConfig(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        sender=sender,
        username=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
    )
