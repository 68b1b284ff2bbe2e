"""The one error a sender raises, whatever its transport said."""

from __future__ import annotations

from qexport.domain.failures import FailureCode, QExportError

DESTINATION_REFUSED = "the destination is not allowed by this server's egress policy"


class DeliveryError(QExportError):
    """A delivery attempt did not reach its recipient.

    `permanent`: trying again cannot help (a 5xx SMTP reply, a 4xx webhook answer); otherwise
    the attempt is retried later with a backoff. The message is shown to members: one
    readable reason per class of failure, never an address, port, internal host name,
    password or a URL's secret parts. `internal` is the connection-level detail for the
    operator's log only.
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool,
        internal: str = "",
        code: FailureCode | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.permanent = permanent
        self.internal = internal


def refused_destination(reason: str) -> DeliveryError:
    """The egress policy (or the workspace's webhook hosts) refused the destination."""
    return DeliveryError(
        DESTINATION_REFUSED,
        permanent=True,
        internal=reason,
        code=FailureCode.DESTINATION_REFUSED,
    )
