"""One upload to S3: parts sent by a small thread pool, held back while there is one, and the
object created if the key is free with its metadata (the package's docstring says how)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

import structlog
from botocore.exceptions import ClientError

from qexport.domain.failures import ObjectExistsError, QExportError
from qexport.ports import StoredObject
from qexport.storage.s3.cleanup import Leftover
from qexport.storage.s3.errors import TAKEN, error_code, s3_errors

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = structlog.get_logger()

MAX_PARTS = 10_000
# Ranges of the staged object copied per UploadPartCopy (S3 allows 5 MiB to 5 GiB).
COPY_PART_BYTES = 512 * 1024 * 1024


class UploadingStore(Protocol):
    """What an upload needs of its store (store.S3ObjectStore), named here so that the upload
    does not import the store that begins it."""

    bucket: str
    max_parallel_parts: int

    @property
    def client(self) -> S3Client: ...

    def object_key(self, key: str) -> str: ...

    def staging_prefix(self, key: str) -> str: ...

    def clean_up(self, leftover: Leftover) -> None: ...


class S3Upload:
    """One upload to `key`; used by one producer thread, parts sent by a small thread pool."""

    def __init__(self, store: UploadingStore, key: str) -> None:
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
            if isinstance(cause, ClientError) and error_code(cause) in TAKEN:
                raise ObjectExistsError(f"an object is already stored at {self.key}") from cause
            raise

    # ------------------------------------------------------------ clean-up

    def _discard_staged(self) -> None:
        """After publishing: a staged copy left behind is only clutter, so do not fail for it."""
        self._staged = False
        self._store.clean_up(Leftover(self._staging_key))

    def _nothing_left(self) -> bool:
        return not self._staged and self._final_upload_id is None and self.upload_id is None
