"""S3's refusals as qexport's errors: translated once, here, after botocore's own retries."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from botocore.exceptions import BotoCoreError, ClientError

from qexport.domain.failures import QExportError, StorageUnavailableError

TAKEN = {"PreconditionFailed", "ConditionalRequestConflict"}
MISSING = {"404", "NoSuchKey", "NotFound"}
GONE = {"NoSuchUpload", "NoSuchBucket", "404", "NoSuchKey"}  # nothing left to clean up
# Refusals that another try, later, can turn into a success (besides 5xx and 429).
_TRANSIENT = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "OperationAborted",
}
_DENIED = {
    "403",
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
}


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: ClientError, action: str, bucket: str, key: str) -> QExportError:
    code = error_code(exc)
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code == "NoSuchBucket":
        return StorageUnavailableError(f"bucket {bucket!r} does not exist")
    if code in _DENIED:
        return StorageUnavailableError(
            f"access denied to bucket {bucket!r} ({code}): check the credentials and the policy"
        )
    if status >= 500 or status == 429 or code in _TRANSIENT:
        return StorageUnavailableError(f"could not {action} {key}: S3 {code or status}")
    if code == "NoSuchUpload":
        # Aborted by another attempt or a lifecycle rule, or completed by a request whose
        # answer was lost: a new attempt starts over, or adopts the object if it was stored.
        return StorageUnavailableError(f"could not {action} {key}: the upload no longer exists")
    # Any other 4xx is a request this adapter should never have made.
    return QExportError(f"could not {action} {key}: S3 refused it ({code or status})")


@contextlib.contextmanager
def s3_errors(action: str, bucket: str, key: str) -> Iterator[None]:
    """Translate botocore errors (after botocore's own retries) into qexport errors."""
    try:
        yield
    except ClientError as exc:
        raise translate(exc, action, bucket, key) from exc
    except BotoCoreError as exc:  # connection errors, timeouts, missing credentials
        raise StorageUnavailableError(f"could not {action} {key}: {exc}") from exc
