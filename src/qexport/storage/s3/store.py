"""The S3 object store (ObjectStore): its settings and its boto3 client, the object's reads,
listings, presigned GETs and clean-up; uploads are `upload.S3Upload`'s."""

from __future__ import annotations

import io
import threading
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import quote, urlparse

import boto3
import structlog
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from qexport.domain.failures import NotFoundError, QExportError, StorageUnavailableError
from qexport.ports import StoredObject
from qexport.storage.keys import validate_key
from qexport.storage.s3.cleanup import DeferredCleanup, Leftover
from qexport.storage.s3.errors import GONE, MISSING, TAKEN, error_code, s3_errors, translate
from qexport.storage.s3.upload import S3Upload

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from botocore.response import StreamingBody
    from mypy_boto3_s3.client import S3Client

log = structlog.get_logger()

STAGING_DIR = ".staging/"
_READ_BYTES = 1024 * 1024


def content_disposition(filename: str) -> str:
    """`attachment` with an ASCII fallback name and the exact name in RFC 5987 form."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


class _Body(io.RawIOBase):
    """The object's bytes as a raw stream whose read errors are qexport errors too."""

    def __init__(self, body: StreamingBody, bucket: str, key: str) -> None:
        super().__init__()
        self._body = body
        self._bucket = bucket
        self._key = key

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        with s3_errors("read", self._bucket, self._key):
            data = self._body.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class S3ObjectStore:
    """ObjectStore on an S3 bucket (or an S3-compatible server through `endpoint_url`).

    Each request gets `connect_timeout` and `read_timeout` seconds (per socket operation) and
    `retry_attempts` tries; a clean-up S3 refused is retried every `cleanup_retry_seconds`
    at first, then less and less often (at most every `cleanup_retry_max_seconds`).
    """

    def __init__(  # noqa: PLR0913 - one per S3 setting
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: S3Client | None = None,
        max_parallel_parts: int = 4,
        presign_seconds: int = 300,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        retry_attempts: int = 5,
        cleanup_retry_seconds: float = 5.0,
        cleanup_retry_max_seconds: float = 300.0,
    ) -> None:
        if not bucket:
            raise ValueError("an S3 bucket name is required")
        if max_parallel_parts < 1:
            raise ValueError("max_parallel_parts must be at least 1")
        if retry_attempts < 1:
            raise ValueError("retry_attempts must be at least 1")
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.max_parallel_parts = max_parallel_parts
        self.presign_seconds = presign_seconds
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retry_attempts = retry_attempts
        self.cleanup = DeferredCleanup(
            self._remove_leftover,
            first_delay=cleanup_retry_seconds,
            max_delay=cleanup_retry_max_seconds,
        )
        self._client = client
        self._client_lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        endpoint_url: str | None = None,
        max_parallel_parts: int = 4,
        presign_seconds: int = 300,
    ) -> S3ObjectStore:
        """A store for `s3://bucket/prefix`."""
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"expected s3://bucket/prefix, got {url!r}")
        return cls(
            parsed.netloc,
            parsed.path,
            endpoint_url=endpoint_url,
            max_parallel_parts=max_parallel_parts,
            presign_seconds=presign_seconds,
        )

    @property
    def client(self) -> S3Client:
        """The boto3 client, created on first use (nothing connects before)."""
        with self._client_lock:
            if self._client is None:
                self._client = self._new_client()
            return self._client

    def _new_client(self) -> S3Client:
        config = Config(
            # Standard mode: throttling, 5xx, connection errors and timeouts are retried with
            # jittered exponential backoff, within a client-wide retry budget (during an
            # outage the budget runs out and requests fail at once instead of piling up).
            # Adaptive mode would also slow every request of the process after one throttled
            # prefix, and exports write under many prefixes.
            retries={"mode": "standard", "total_max_attempts": self.retry_attempts},
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_pool_connections=max(10, 2 * self.max_parallel_parts),
            # S3-compatible servers (MinIO, moto) rarely resolve virtual-hosted bucket names.
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        # A session of its own: boto3's default session is not safe to share across threads.
        session = boto3.session.Session()
        return session.client("s3", endpoint_url=self.endpoint_url, config=config)

    def object_key(self, key: str) -> str:
        return f"{self.prefix}{validate_key(key)}"

    def staging_prefix(self, key: str) -> str:
        return f"{self.prefix}{STAGING_DIR}{validate_key(key)}/"

    def begin_upload(self, key: str) -> S3Upload:
        """Nothing is sent yet: the first request goes out with the second part or at completion."""
        return S3Upload(self, key)

    def head(self, key: str) -> StoredObject | None:
        try:
            with s3_errors("read the metadata of", self.bucket, key):
                found = self.client.head_object(Bucket=self.bucket, Key=self.object_key(key))
        except QExportError as exc:
            if isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in MISSING:
                return None
            raise
        metadata = found.get("Metadata", {})
        try:
            return StoredObject(
                key, found["ContentLength"], int(metadata["rows"]), metadata["sha256"]
            )
        except (KeyError, ValueError) as exc:
            raise QExportError(f"object {key} has no rows/sha256 metadata") from exc

    def open(self, key: str) -> BinaryIO:
        try:
            with s3_errors("open", self.bucket, key):
                found = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))
        except QExportError as exc:
            if isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in MISSING:
                raise NotFoundError(f"no object stored at {key}") from exc.__cause__
            raise
        return io.BufferedReader(_Body(found["Body"], self.bucket, key), buffer_size=_READ_BYTES)

    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error."""
        with s3_errors("delete", self.bucket, key):
            self.client.delete_object(Bucket=self.bucket, Key=self.object_key(key))

    def incomplete_uploads(self, key: str) -> list[str]:
        """Multipart uploads begun for `key` (staged or final) and neither completed nor aborted."""
        final_key, staging = self.object_key(key), self.staging_prefix(key)
        found: list[str] = []
        paginator = self.client.get_paginator("list_multipart_uploads")
        with s3_errors("list uploads to", self.bucket, key):
            for prefix in (staging, final_key):
                for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                    found.extend(
                        upload["UploadId"]
                        for upload in page.get("Uploads", [])
                        if prefix == staging or upload.get("Key") == final_key
                    )
        return found

    def discard_staging(self, key: str) -> int:
        """Abort every multipart upload at `key` or under its staging prefix and delete the
        staged objects there; never the object at `key`. What S3 refuses now is retried later."""
        final_key, staging = self.object_key(key), self.staging_prefix(key)
        uploads = self.client.get_paginator("list_multipart_uploads")
        objects = self.client.get_paginator("list_objects_v2")
        leftovers: list[Leftover] = []
        with s3_errors("list what is staged for", self.bucket, key):
            for prefix in (staging, final_key):
                for page in uploads.paginate(Bucket=self.bucket, Prefix=prefix):
                    leftovers.extend(
                        Leftover(upload["Key"], upload["UploadId"])
                        for upload in page.get("Uploads", [])
                        if prefix == staging or upload.get("Key") == final_key
                    )
            # Listed after the uploads: a staged upload completed meanwhile shows up here.
            for listed in objects.paginate(Bucket=self.bucket, Prefix=staging):
                leftovers.extend(Leftover(item["Key"]) for item in listed.get("Contents", []))
        for leftover in leftovers:
            self.clean_up(leftover)
        return len(leftovers)

    def staged_keys(self) -> list[str]:
        """Keys with an incomplete upload (at the key or staged) or a staged object."""
        staging_root = f"{self.prefix}{STAGING_DIR}"
        uploads = self.client.get_paginator("list_multipart_uploads")
        objects = self.client.get_paginator("list_objects_v2")
        found: list[str] = []
        with s3_errors("list uploads in", self.bucket, self.prefix or self.bucket):
            for page in uploads.paginate(Bucket=self.bucket, Prefix=self.prefix):
                found.extend(upload["Key"] for upload in page.get("Uploads", []))
            for listed in objects.paginate(Bucket=self.bucket, Prefix=staging_root):
                found.extend(item["Key"] for item in listed.get("Contents", []))
        keys = {self._key_of(name, staging_root) for name in found}
        return sorted(key for key in keys if key is not None)

    def put_new(self, key: str, data: bytes) -> bool:
        """One PutObject with `If-None-Match: *`: False when S3 answers that the key is taken."""
        try:
            with s3_errors("store", self.bucket, key):
                self.client.put_object(
                    Bucket=self.bucket, Key=self.object_key(key), Body=data, IfNoneMatch="*"
                )
        except QExportError as exc:
            if isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in TAKEN:
                return False
            raise
        return True

    def names_under(self, prefix: str, *, limit: int | None = None) -> list[str]:
        """ListObjectsV2 with a "/" delimiter, a page at a time until `limit` names."""
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix to list ends with '/': {prefix!r}")
        folder = f"{self.object_key(prefix.removesuffix('/'))}/"
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket,
            Prefix=folder,
            Delimiter="/",
            PaginationConfig={"PageSize": min(limit or 1000, 1000)},
        )
        found: list[str] = []
        with s3_errors("list", self.bucket, prefix):
            for page in pages:
                keys = [item["Key"] for item in page.get("Contents", [])]
                keys += [common["Prefix"] for common in page.get("CommonPrefixes", [])]
                found += sorted((key.removeprefix(folder) for key in keys), key=str.encode)
                if limit is not None and len(found) >= limit:
                    break
        return found if limit is None else found[:limit]

    def _key_of(self, name: str, staging_root: str) -> str | None:
        """The export key a bucket key belongs to: itself, or the key it was staged for."""
        key = name.removeprefix(self.prefix)
        if name.startswith(staging_root):
            key = name.removeprefix(staging_root).rpartition("/")[0]
        try:
            return validate_key(key)
        except ValueError:  # not one of ours (another application's upload on a shared bucket)
            return None

    def presigned_url(self, key: str, filename: str, *, max_seconds: float | None = None) -> str:
        """A GET URL valid `presign_seconds` (or less: `max_seconds`, the time the file has
        left before it expires), downloading as an attachment named `filename`."""
        seconds = self.presign_seconds
        if max_seconds is not None:
            seconds = max(1, min(seconds, int(max_seconds)))
        with s3_errors("sign a download of", self.bucket, key):
            return self.client.generate_presigned_url(
                "get_object",
                Params={
                    "Bucket": self.bucket,
                    "Key": self.object_key(key),
                    "ResponseContentDisposition": content_disposition(filename),
                },
                ExpiresIn=seconds,
            )

    def clean_up(self, leftover: Leftover) -> None:
        """Abort an upload or delete a staged copy; if S3 is unavailable, retry it later."""
        try:
            self._remove_leftover(leftover)
        except QExportError as exc:
            if exc.code.retryable:
                self.cleanup.defer(leftover)
            else:  # e.g. no permission to abort: the lifecycle rules remain
                log.warning(
                    "cleanup_failed", key=leftover.key, upload_id=leftover.upload_id, error=str(exc)
                )
        except Exception:  # never raised over the error that made the caller clean up
            log.exception("cleanup_failed", key=leftover.key, upload_id=leftover.upload_id)

    def _remove_leftover(self, leftover: Leftover) -> None:
        try:
            if leftover.upload_id is None:
                with s3_errors("delete the staged copy", self.bucket, leftover.key):
                    self.client.delete_object(Bucket=self.bucket, Key=leftover.key)
            else:
                with s3_errors("abort the upload to", self.bucket, leftover.key):
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=leftover.key, UploadId=leftover.upload_id
                    )
        except QExportError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, ClientError) and error_code(cause) in GONE):
                raise

    def check_bucket(self) -> None:
        """Fail fast at start-up when the bucket is missing or not ours to use."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = error_code(exc)
            if code in {"404", "NoSuchBucket"}:
                raise StorageUnavailableError(f"bucket {self.bucket!r} does not exist") from exc
            raise translate(exc, "reach bucket", self.bucket, repr(self.bucket)) from exc
        except BotoCoreError as exc:
            raise StorageUnavailableError(f"could not reach bucket {self.bucket!r}: {exc}") from exc
