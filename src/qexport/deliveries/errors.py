"""The one error a sender raises, whatever its transport said."""

from __future__ import annotations

from qexport.domain.failures import QExportError


class DeliveryError(QExportError):
    """A delivery attempt did not reach its recipient.

    `permanent`: trying again cannot help (a 5xx SMTP reply, a 4xx webhook answer); otherwise
    the attempt is retried later with a backoff. The message is shown to people: it never
    holds a password or a URL's secret parts.
    """

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent
