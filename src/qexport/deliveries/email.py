"""Sending email over SMTP, configured by one URL (`QEXPORT_SMTP_URL`).

    smtp://host[:port][?from=ADDR]                        plain, port 25, no login
    smtp+starttls://[user:pass@]host[:port][?from=ADDR]   STARTTLS required, port 587
    smtps://[user:pass@]host[:port][?from=ADDR]           implicit TLS, port 465

TLS certificates are always verified. smtplib, socket and ssl errors are translated here,
once, into DeliveryError: 5xx replies are permanent, everything else is retried. Members
read one reason per class (could not connect, timed out, refused with its SMTP code); the
server's reply text and address are for the operator's log. The SMTP server is the
operator's own: the egress policy does not apply to it.
"""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage

from qexport.deliveries.errors import DeliveryError
from qexport.net.smtp_url import SmtpConfig as SmtpConfig  # noqa: PLC0414 - re-exported
from qexport.net.smtp_url import parse_smtp_url as parse_smtp_url  # noqa: PLC0414 - re-exported

CONNECT_FAILED = "could not connect to the mail server"
TIMED_OUT = "the mail server did not answer in time"


class SmtpSender:
    """Sends one message to one recipient per connection (deliveries are independent)."""

    def __init__(self, url: str, *, timeout: float) -> None:
        self.config = parse_smtp_url(url)
        self.timeout = timeout

    @property
    def sender(self) -> str:
        return self.config.sender

    def send(self, message: EmailMessage, recipient: str) -> None:
        """Hand `message` to the SMTP server for `recipient`; DeliveryError when it was not."""
        if "From" not in message:
            message["From"] = self.sender
        where = f"{self.config.host}:{self.config.port}"
        try:
            with self._connect() as smtp:
                if self.config.username:
                    smtp.login(self.config.username, self.config.password)
                smtp.send_message(message, from_addr=self.sender, to_addrs=[recipient])
        except smtplib.SMTPRecipientsRefused as exc:
            code, reply = exc.recipients.get(recipient, (450, b"refused"))
            raise _refused(code, reply, "the mail server refused the recipient", where) from exc
        except smtplib.SMTPResponseException as exc:
            raise _refused(
                exc.smtp_code, exc.smtp_error, "the mail server refused the message", where
            ) from exc
        except smtplib.SMTPNotSupportedError as exc:
            raise DeliveryError(
                CONNECT_FAILED,
                permanent=True,
                internal=f"the SMTP server at {where} does not support {_feature(exc)}",
            ) from exc
        except ssl.SSLCertVerificationError as exc:
            raise DeliveryError(
                CONNECT_FAILED,
                permanent=False,
                internal=f"the TLS certificate of the SMTP server at {where} is not trusted:"
                f" {exc.verify_message}",
            ) from exc
        except (smtplib.SMTPException, OSError) as exc:  # socket errors, timeouts, TLS errors
            timed_out = isinstance(exc, TimeoutError)
            raise DeliveryError(
                TIMED_OUT if timed_out else CONNECT_FAILED,
                permanent=False,
                internal=f"SMTP server at {where}: {exc or type(exc).__name__}",
            ) from exc

    def _connect(self) -> smtplib.SMTP:
        config = self.config
        if config.scheme == "smtps":
            return smtplib.SMTP_SSL(
                config.host, config.port, timeout=self.timeout, context=ssl.create_default_context()
            )
        smtp = smtplib.SMTP(config.host, config.port, timeout=self.timeout)
        try:
            if config.scheme == "smtp+starttls":
                smtp.starttls(context=ssl.create_default_context())
        except BaseException:
            smtp.close()
            raise
        return smtp


def _refused(code: int, reply: bytes | str, what: str, where: str) -> DeliveryError:
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
    # The reply's text may name internal hosts: the member sees the code, the log the text.
    return DeliveryError(
        f"{what} (SMTP {code})",
        permanent=500 <= code < 600,
        internal=f"SMTP server at {where}: {code} {text}".strip(),
    )


def _feature(exc: smtplib.SMTPNotSupportedError) -> str:
    text = str(exc).upper()
    return "STARTTLS" if "STARTTLS" in text else "AUTH" if "AUTH" in text else "an extension"
