"""Every qexport error's HTTP status and problem code, in one table: the API and the pages
answer with them, and the command line's local client refuses with them as a server would
(`qexport.cli.local`), so that a command's exit status and message are the same either way.
(No web framework here: the command line imports this.)"""

from __future__ import annotations

from qexport.domain.failures import (
    AccessLostError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    LimitExceededError,
    MetadataUnavailableError,
    NotFoundError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
    StorageUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
)
from qexport.services.exports import ExpiredError, ExportFailedError, NotReadyError

# Most specific first: the first class an error is an instance of decides.
_STATUS: tuple[tuple[type[QExportError], int, str], ...] = (
    (InvalidRequestError, 422, "invalid_request"),
    (UnauthorizedError, 401, "unauthorized"),
    (ForbiddenError, 403, "forbidden"),
    (AccessLostError, 403, "access_lost"),
    (NotFoundError, 404, "not_found"),
    (NotReadyError, 409, "not_ready"),
    (ExportFailedError, 409, "export_failed"),
    (ConflictError, 409, "conflict"),
    (ExpiredError, 410, "expired"),
    (TooManyRequestsError, 429, "too_many_requests"),
    (MetadataUnavailableError, 503, "database_unavailable"),
    (StorageUnavailableError, 503, "unavailable"),
    (SourceUnavailableError, 503, "source_unavailable"),
    # A statement run while the caller waits (a preview): refused by its source, or too slow.
    (QueryInvalidError, 422, "query_invalid"),
    (QueryTimeoutError, 504, "query_timeout"),
    # A preview that needed more memory than a preview may use (QEXPORT_PREVIEW_MAX_MEMORY).
    (LimitExceededError, 422, "limit_exceeded"),
)


def status_of(exc: QExportError) -> tuple[int, str] | None:
    """The HTTP status and problem code of a qexport error; None for an unexpected one."""
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return None
