"""The S3 object store: multipart uploads, create-if-absent completion, presigned GETs.

Metadata vs create-if-absent. `rows` and `sha256` must be the object's own user metadata (so
that an attempt losing the race adopts the winner from one HeadObject), but S3 fixes user
metadata when an upload is created, and they are known only at the end. Options weighed:
tags or a sidecar object are not atomic with the completion (a crash in between leaves an
object without metadata, forever); CopyObject to the final key caps objects at 5 GiB, and
moto ignores its `If-None-Match` (it overwrites). So the final write is always one request
that carries the metadata and `If-None-Match: *`, which S3 (since 2024-08) and moto honour:

- at most one part (the common small export): the part is held back in memory and the object
  is written by one PutObject at completion; nothing is staged;
- more parts: they go into a multipart upload at a staging key, `<prefix>.staging/<key>/<id>`,
  completed without metadata; then a multipart upload at the final key is created with the
  metadata, filled by server-side UploadPartCopy ranges of the staged object (no bytes go
  through the worker, no size limit), and completed with `If-None-Match: *`. The staged object
  is deleted after.

Leftovers. An attempt that dies (a kill, a lost machine) cannot abort its uploads, and S3 may
hold an upload whose id qexport never learnt: CreateMultipartUpload was processed, its answer
lost to a reset, and botocore's retry created a second one. Both are found from the key alone:
`discard_staging`, called once the export has settled, lists the multipart uploads at the final
key and under the key's staging prefix (ListMultipartUploads) and the staged objects there, and
removes them all. The bucket's one-day rules stay as the last backstop.

A 412 PreconditionFailed (the key is taken) or a 409 ConditionalRequestConflict (another
completion is in flight) aborts this upload and raises ObjectExistsError. Keys starting with a
dot are refused by `validate_key`, so staging keys never meet object keys.

Faults. Every request has a connect and a read timeout (a stalled connection fails that try
instead of holding the attempt) and is retried by botocore's standard retry mode: throttling
(503 SlowDown), 5xx, connection errors and timeouts, with jittered exponential backoff and
`retry_attempts` tries in all. What still fails is a StorageUnavailableError, retryable: the
attempt is released and the export redelivered later (`QEXPORT_MAX_ATTEMPTS` bounds that).
An upload that fails is aborted; an abort that S3 refuses because it is unavailable is handed
to `DeferredCleanup`, so that the attempt settles without waiting for S3 to come back.
"""

from __future__ import annotations

import contextlib
import io
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import quote, urlparse

import boto3
import structlog
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from qexport.domain.failures import (
    NotFoundError,
    ObjectExistsError,
    QExportError,
    StorageUnavailableError,
)
from qexport.ports import StoredObject
from qexport.storage.keys import validate_key
from qexport.storage.s3_cleanup import DeferredCleanup, Leftover

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from botocore.response import StreamingBody
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = structlog.get_logger()

STAGING_DIR = ".staging/"
MAX_PARTS = 10_000
# Ranges of the staged object copied per UploadPartCopy (S3 allows 5 MiB to 5 GiB).
COPY_PART_BYTES = 512 * 1024 * 1024
_READ_BYTES = 1024 * 1024
_TAKEN = {"PreconditionFailed", "ConditionalRequestConflict"}
_MISSING = {"404", "NoSuchKey", "NotFound"}
_GONE = {"NoSuchUpload", "NoSuchBucket", "404", "NoSuchKey"}  # nothing left to clean up
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


def _translate(exc: ClientError, action: str, bucket: str, key: str) -> QExportError:
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
        raise _translate(exc, action, bucket, key) from exc
    except BotoCoreError as exc:  # connection errors, timeouts, missing credentials
        raise StorageUnavailableError(f"could not {action} {key}: {exc}") from exc


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


class S3Upload:
    """One upload to `key`; used by one producer thread, parts sent by a small thread pool."""

    def __init__(self, store: S3ObjectStore, key: str) -> None:
        self.key = key
        self.upload_id: str | None = None  # the staging multipart upload, once begun
        self._store = store
        self._client = store.client
        self._bucket = store.bucket
        self._final_key = store.object_key(key)
        self._staging_key = f"{store.staging_prefix(key)}{uuid.uuid4().hex}"
        self._max_parallel = store.max_parallel_parts
        self._held: bytes | None = None  # part 1, kept until a second part shows it is needed
        self._sizes: dict[int, int] = {}
        self._etags: dict[int, Future[str]] = {}
        self._failure: BaseException | None = None  # the first part that could not be sent
        self._slots = threading.BoundedSemaphore(self._max_parallel)
        self._pool: ThreadPoolExecutor | None = None
        self._staged = False  # the staging upload was completed into an object
        self.staged = False  # a multipart upload was asked for (the Upload port's flag)
        self._final_upload_id: str | None = None
        self._done = False  # completed or aborted: no more parts

    def upload_part(self, number: int, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` and send it; blocks while `max_parallel_parts` parts are in flight."""
        if self._done:
            raise ValueError(f"the upload to {self.key} is already finished")
        if not 1 <= number <= MAX_PARTS:
            raise ValueError(f"part numbers run from 1 to {MAX_PARTS}, got {number}")
        if number in self._sizes:
            raise ValueError(f"part {number} was already uploaded")
        if self._failure is not None:
            raise self._failure
        chunk = bytes(data)
        self._sizes[number] = len(chunk)
        if number == 1 and len(self._sizes) == 1:
            self._held = chunk
            return
        self._send_held()
        self._send(number, chunk)

    def complete(self, *, rows: int, sha256: str) -> StoredObject:
        """Create the object if the key is free, with rows and sha256 as its metadata."""
        if self._done:
            raise ValueError(f"the upload to {self.key} is already finished")
        metadata = {"rows": str(rows), "sha256": sha256}
        size = sum(self._sizes.values())
        try:
            if self.upload_id is None:
                self._put_final(self._held or b"", metadata)
            else:
                etag = self._complete_staging()
                self._copy_to_final(size, etag, metadata)
                self._discard_staged()
        except ObjectExistsError:
            self.abort()
            raise
        self._done = True
        self._held = None
        self._shutdown_pool()
        return StoredObject(self.key, size, rows, sha256)

    def abort(self) -> None:
        """Drop everything this upload created. Idempotent, harmless after complete.

        Never raises: it runs while the caller's own error propagates, and that error is the
        one to report. What S3 cannot remove now is retried in the background.
        """
        if self._done and self._nothing_left():
            return
        self._done = True
        self._held = None
        try:
            # Parts still being sent finish (or fail) first: an abort that overtakes a part
            # upload can leave that part stored.
            self._shutdown_pool()
        except Exception:
            log.warning("upload_parts_not_stopped", key=self.key, exc_info=True)
        leftovers: list[Leftover] = []
        if self.upload_id is not None:
            leftovers.append(Leftover(self._staging_key, self.upload_id))
        if self._staged:
            leftovers.append(Leftover(self._staging_key))
        if self._final_upload_id is not None:
            leftovers.append(Leftover(self._final_key, self._final_upload_id))
        self.upload_id, self._staged, self._final_upload_id = None, False, None
        for leftover in leftovers:
            self._store.clean_up(leftover)

    # ------------------------------------------------------------ parts

    def _send_held(self) -> None:
        if self.upload_id is None:
            self.staged = True  # before asking: the answer may be lost, the upload not
            with s3_errors("begin an upload to", self._bucket, self.key):
                created = self._client.create_multipart_upload(
                    Bucket=self._bucket, Key=self._staging_key
                )
            self.upload_id = created["UploadId"]
        if self._held is not None:
            held, self._held = self._held, None
            self._send(1, held)

    def _send(self, number: int, chunk: bytes) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_parallel, thread_name_prefix="s3-part")
        self._slots.acquire()
        try:
            future = self._pool.submit(self._put_part, number, chunk)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(self._part_sent)
        self._etags[number] = future

    def _part_sent(self, future: Future[str]) -> None:
        self._slots.release()
        if not future.cancelled() and self._failure is None:
            self._failure = future.exception()

    def _put_part(self, number: int, chunk: bytes) -> str:
        assert self.upload_id is not None
        with s3_errors("upload a part of", self._bucket, self.key):
            sent = self._client.upload_part(
                Bucket=self._bucket,
                Key=self._staging_key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=chunk,
            )
        return sent["ETag"]

    def _shutdown_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # ------------------------------------------------------------ completion

    def _put_final(self, body: bytes, metadata: dict[str, str]) -> None:
        with self._taken_is_exists(), s3_errors("store", self._bucket, self.key):
            self._client.put_object(
                Bucket=self._bucket,
                Key=self._final_key,
                Body=body,
                Metadata=metadata,
                IfNoneMatch="*",
            )

    def _complete_staging(self) -> str:
        assert self.upload_id is not None
        self._send_held()
        parts: list[CompletedPartTypeDef] = [
            {"PartNumber": number, "ETag": self._etags[number].result()}
            for number in sorted(self._etags)
        ]
        # Counted as staged from the moment it is asked for: a completion whose answer was
        # lost (a timeout, a reset) may have stored the object, and abort must delete it.
        self._staged = True
        with s3_errors("complete the staged upload of", self._bucket, self.key):
            done = self._client.complete_multipart_upload(
                Bucket=self._bucket,
                Key=self._staging_key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},
            )
        self.upload_id = None
        return done["ETag"]

    def _copy_to_final(self, size: int, etag: str, metadata: dict[str, str]) -> None:
        if size == 0:  # nothing to copy: UploadPartCopy needs at least one byte
            self._put_final(b"", metadata)
            return
        with s3_errors("begin the final upload of", self._bucket, self.key):
            created = self._client.create_multipart_upload(
                Bucket=self._bucket, Key=self._final_key, Metadata=metadata
            )
        self._final_upload_id = upload_id = created["UploadId"]
        step = COPY_PART_BYTES
        pool = self._pool or ThreadPoolExecutor(self._max_parallel, thread_name_prefix="s3-copy")
        self._pool = pool
        copies = [
            pool.submit(self._copy_range, upload_id, number, start, min(start + step, size), etag)
            for number, start in enumerate(range(0, size, step), start=1)
        ]
        parts: list[CompletedPartTypeDef] = [
            {"PartNumber": number, "ETag": copy.result()}
            for number, copy in enumerate(copies, start=1)
        ]
        with self._taken_is_exists(), s3_errors("complete the upload of", self._bucket, self.key):
            self._client.complete_multipart_upload(
                Bucket=self._bucket,
                Key=self._final_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        self._final_upload_id = None

    def _copy_range(self, upload_id: str, number: int, start: int, end: int, etag: str) -> str:
        with s3_errors("copy a part of", self._bucket, self.key):
            copied = self._client.upload_part_copy(
                Bucket=self._bucket,
                Key=self._final_key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource={"Bucket": self._bucket, "Key": self._staging_key},
                CopySourceRange=f"bytes={start}-{end - 1}",
                CopySourceIfMatch=etag,
            )
        return copied["CopyPartResult"]["ETag"]

    @contextlib.contextmanager
    def _taken_is_exists(self) -> Iterator[None]:
        try:
            yield
        except QExportError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and error_code(cause) in _TAKEN:
                raise ObjectExistsError(f"an object is already stored at {self.key}") from cause
            raise

    # ------------------------------------------------------------ clean-up

    def _discard_staged(self) -> None:
        """After publishing: a staged copy left behind is only clutter, so do not fail for it."""
        self._staged = False
        self._store.clean_up(Leftover(self._staging_key))

    def _nothing_left(self) -> bool:
        return not self._staged and self._final_upload_id is None and self.upload_id is None


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
            if isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in _MISSING:
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
            if isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in _MISSING:
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
            if isinstance(exc.__cause__, ClientError) and error_code(exc.__cause__) in _TAKEN:
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
            if not (isinstance(cause, ClientError) and error_code(cause) in _GONE):
                raise

    def check_bucket(self) -> None:
        """Fail fast at start-up when the bucket is missing or not ours to use."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = error_code(exc)
            if code in {"404", "NoSuchBucket"}:
                raise StorageUnavailableError(f"bucket {self.bucket!r} does not exist") from exc
            raise _translate(exc, "reach bucket", self.bucket, repr(self.bucket)) from exc
        except BotoCoreError as exc:
            raise StorageUnavailableError(f"could not reach bucket {self.bucket!r}: {exc}") from exc
