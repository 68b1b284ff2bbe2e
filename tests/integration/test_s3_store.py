"""The S3 object store against moto's S3 server: staging and range copies, presigned URLs,
errors and faults, leftovers, lifecycle.

What every ObjectStore does is in test_object_store_contract.py."""

from __future__ import annotations

import hashlib
import threading
import time
import urllib.request
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from qexport.domain.failures import (
    QExportError,
    StorageUnavailableError,
)
from qexport.ports import StoredObject
from qexport.storage.s3 import upload as s3_upload
from qexport.storage.s3.errors import s3_errors
from qexport.storage.s3.lifecycle import apply_lifecycle, check_lifecycle, lifecycle_rules
from qexport.storage.s3.store import S3ObjectStore

# The moto server and per-test bucket fixtures (a plugin, so fixture arguments shadow nothing).
pytest_plugins = ["tests.support.s3server"]

KEY = "exports/demo/exp-1/orders.csv"
MIB = 1024 * 1024
PART = 8 * MIB


def _parts(count: int, tail: bytes) -> list[bytes]:
    """`count` distinct 8 MiB parts and a tail: misplaced or truncated parts change the bytes."""
    return [bytes([65 + number]) * (PART - 1) + b"\n" for number in range(count)] + [tail]


def _upload(store: S3ObjectStore, parts: list[bytes], rows: int, key: str = KEY) -> StoredObject:
    upload = store.begin_upload(key)
    buffer = bytearray()
    for number, data in enumerate(parts, start=1):
        # The caller reuses one buffer for every part: the store must copy what it keeps.
        buffer[:] = data
        upload.upload_part(number, buffer)
    buffer[:] = b"X" * len(buffer)
    return upload.complete(rows=rows, sha256=hashlib.sha256(b"".join(parts)).hexdigest())


def _read(store: S3ObjectStore, key: str = KEY) -> bytes:
    with store.open(key) as stream:
        return stream.read()


def test_multipart_upload_reads_back_byte_exact_with_its_metadata(
    s3_store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three 8 MiB parts and a tail are joined in order; head reports size, rows and sha256."""
    # Copy the staged object to the key in 8 MiB ranges, so that several ranges are stitched.
    monkeypatch.setattr(s3_upload, "COPY_PART_BYTES", PART)
    parts = _parts(3, b"tail,row\n")
    data = b"".join(parts)

    stored = _upload(s3_store, parts, rows=42)

    expected = StoredObject(KEY, len(data), 42, hashlib.sha256(data).hexdigest())
    assert stored == expected
    assert s3_store.head(KEY) == expected
    assert _read(s3_store) == data
    assert s3_store.incomplete_uploads(KEY) == []
    listed = s3_store.client.list_objects_v2(Bucket=s3_store.bucket).get("Contents", [])
    assert [item.get("Key") for item in listed] == [f"tenant/{KEY}"]  # the staged copy is gone


def test_an_aborted_upload_takes_no_more_parts(s3_store: S3ObjectStore) -> None:
    """A part sent after abort is refused at once: the upload is finished."""
    upload = s3_store.begin_upload(KEY)
    upload.upload_part(1, b"a" * PART)
    upload.upload_part(2, b"b" * PART)
    upload.abort()
    with pytest.raises(ValueError, match="already finished"):
        upload.upload_part(3, b"c")


def test_presigned_url_downloads_the_bytes_as_an_attachment(s3_store: S3ObjectStore) -> None:
    """The presigned GET serves the object with Content-Disposition naming the file."""
    _upload(s3_store, [b"id,name\n1,a\n"], rows=1)

    url = s3_store.presigned_url(KEY, "orders 2030.csv")

    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (the moto server)
        body = response.read()
        disposition = response.headers["Content-Disposition"]
    assert body == b"id,name\n1,a\n"
    assert disposition.startswith('attachment; filename="orders 2030.csv"')


def test_missing_bucket_is_reported_by_name(moto_endpoint: str, aws_env: None) -> None:
    """Every operation on a bucket that does not exist says which bucket, as a storage error."""
    store = S3ObjectStore("no-such-bucket-here", endpoint_url=moto_endpoint)

    with pytest.raises(StorageUnavailableError, match="bucket 'no-such-bucket-here' does not"):
        store.check_bucket()
    with pytest.raises(StorageUnavailableError, match="bucket 'no-such-bucket-here' does not"):
        store.begin_upload(KEY).complete(rows=0, sha256="0" * 64)
    with pytest.raises(StorageUnavailableError, match="bucket 'no-such-bucket-here' does not"):
        store.incomplete_uploads(KEY)


def test_check_bucket_passes_for_an_existing_bucket(s3_store: S3ObjectStore) -> None:
    """The start-up check is quiet when the bucket is there and usable."""
    s3_store.check_bucket()


def test_upload_aborted_behind_the_attempts_back_is_a_retryable_storage_error(
    s3_store: S3ObjectStore,
) -> None:
    """An upload that vanished (aborted by another attempt or a lifecycle rule) fails the
    attempt with a retryable error, so the export is tried again rather than failed."""
    upload = s3_store.begin_upload(KEY)
    upload.upload_part(1, b"a" * PART)
    upload.upload_part(2, b"tail")
    client, bucket = s3_store.client, s3_store.bucket
    staging = s3_store.staging_prefix(KEY)
    (begun,) = client.list_multipart_uploads(Bucket=bucket, Prefix=staging)["Uploads"]
    where = {"Bucket": bucket, "Key": begun["Key"], "UploadId": begun["UploadId"]}
    for _ in range(100):  # the parts are sent in the background: let both arrive first
        if len(client.list_parts(**where).get("Parts", [])) == 2:
            break
        time.sleep(0.05)
    client.abort_multipart_upload(**where)

    # S3 answers 404 NoSuchUpload; moto 5.2.5 answers 500. Both must mean "try again".
    with pytest.raises(StorageUnavailableError) as raised:
        upload.complete(rows=1, sha256="0" * 64)
    assert raised.value.code.retryable
    upload.abort()  # the upload is gone already: nothing to do, nothing queued for later
    assert s3_store.cleanup.pending == []
    assert s3_store.incomplete_uploads(KEY) == []


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (404, "NoSuchUpload", True),
        (503, "SlowDown", True),
        (429, "TooManyRequests", True),
        (409, "OperationAborted", True),
        (400, "RequestTimeout", True),
        (500, "InternalError", True),
        (400, "EntityTooSmall", False),
    ],
)
def test_s3_refusals_are_retryable_only_when_a_later_try_can_succeed(
    status: int, code: str, retryable: bool
) -> None:
    """Throttling, 5xx, timeouts and a vanished upload are retryable; a malformed request is not."""
    refusal = ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "UploadPart"
    )

    with pytest.raises(QExportError) as raised, s3_errors("store", "bucket-x", KEY):
        raise refusal

    assert raised.value.code.retryable is retryable
    assert raised.value.__cause__ is refusal


def test_unreachable_endpoint_is_a_retryable_storage_error(aws_env: None) -> None:
    """A connection refused becomes StorageUnavailableError, whose code is retryable."""
    config = Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=1)
    # Port 9 (discard) on loopback: nothing listens there in a test environment.
    client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", config=config)
    store = S3ObjectStore("bucket-x", client=client)

    with pytest.raises(StorageUnavailableError) as raised:
        store.head(KEY)
    assert raised.value.code.retryable


def test_constructor_connects_nothing_and_from_url_reads_the_prefix() -> None:
    """from_url splits bucket and prefix; no client exists before the first call."""
    store = S3ObjectStore.from_url("s3://my-bucket/some/prefix/", endpoint_url="http://x")

    assert (store.bucket, store.prefix, store.endpoint_url) == (
        "my-bucket",
        "some/prefix/",
        "http://x",
    )
    assert store._client is None
    assert store.object_key(KEY) == f"some/prefix/{KEY}"
    with pytest.raises(ValueError, match="may not start with a dot"):
        store.begin_upload(".staging/x")


def test_lifecycle_applied_is_in_sync_and_a_changed_retention_is_drift(
    s3_store: S3ObjectStore,
) -> None:
    """After apply, check finds nothing; with another retention it names the expiry rule."""
    rules = lifecycle_rules(timedelta(days=7, hours=1), s3_store.prefix)["Rules"]
    assert rules[0]["Expiration"]["Days"] == 9  # 7 days 1 hour + 1 day, rounded up

    apply_lifecycle(s3_store, timedelta(days=7))

    assert check_lifecycle(s3_store, timedelta(days=7)) == []
    drift = check_lifecycle(s3_store, timedelta(days=30))
    assert len(drift) == 1
    assert "expire-exports" in drift[0]
    assert "after 8 days, expected" in drift[0]


def test_lifecycle_check_reports_every_rule_missing_on_a_bare_bucket(
    s3_store: S3ObjectStore,
) -> None:
    """A bucket without lifecycle configuration drifts by every rule."""
    assert len(check_lifecycle(s3_store, timedelta(days=7))) == 3


def _bucket_state(store: S3ObjectStore) -> tuple[list[str], list[str]]:
    """The keys of the incomplete uploads and of the objects in the bucket, sorted."""
    client, bucket = store.client, store.bucket
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    objects = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(u["Key"] for u in uploads), sorted(o["Key"] for o in objects)


def test_discard_staging_leaves_only_the_completed_object_of_the_key(
    s3_store: S3ObjectStore,
) -> None:
    """What dead attempts left at a key (uploads staged or at the key itself, whose ids nobody
    knows, and a staged copy) is removed; the object and another key's upload stay."""
    client, bucket = s3_store.client, s3_store.bucket
    stored = _upload(s3_store, _parts(1, b"tail"), rows=1)
    staging, final = s3_store.staging_prefix(KEY), s3_store.object_key(KEY)
    for key in (f"{staging}dead1", f"{staging}dead2", final):
        client.create_multipart_upload(Bucket=bucket, Key=key)
    client.put_object(Bucket=bucket, Key=f"{staging}dead3", Body=b"a staged copy")
    # A key that extends this one is another export's: its upload is not this key's.
    longer = f"{KEY}x"
    running = s3_store.begin_upload(longer)
    running.upload_part(1, b"a" * PART)
    running.upload_part(2, b"b")

    assert s3_store.discard_staging(KEY) == 4

    uploads, objects = _bucket_state(s3_store)
    assert len(uploads) == 1
    assert s3_store.incomplete_uploads(longer) == [running.upload_id]
    assert objects == [final]
    assert s3_store.head(KEY) == stored
    assert s3_store.cleanup.pending == []
    assert s3_store.discard_staging(KEY) == 0
    assert running.complete(rows=2, sha256="0" * 64).size_bytes == PART + 1


def test_staged_keys_name_each_key_with_something_left(s3_store: S3ObjectStore) -> None:
    """Keys with an incomplete upload (staged or at the key) or a staged copy, each once."""
    client, bucket = s3_store.client, s3_store.bucket
    other, third = "exports/demo/exp-2/a.csv", "exports/demo/exp-3/b.parquet"
    _upload(s3_store, [b"done"], rows=1, key="exports/demo/exp-0/done.csv")
    client.create_multipart_upload(Bucket=bucket, Key=f"{s3_store.staging_prefix(KEY)}x")
    client.create_multipart_upload(Bucket=bucket, Key=f"{s3_store.staging_prefix(KEY)}y")
    client.create_multipart_upload(Bucket=bucket, Key=s3_store.object_key(other))
    client.put_object(Bucket=bucket, Key=f"{s3_store.staging_prefix(third)}z", Body=b"")
    client.create_multipart_upload(Bucket=bucket, Key="not-ours/.hidden")  # outside the prefix

    assert s3_store.staged_keys() == [KEY, other, third]


def test_unexpected_refusal_is_an_internal_error(s3_store: S3ObjectStore) -> None:
    """A request S3 refuses (a part under 5 MiB before the last) is a non-retryable error."""
    with pytest.raises(ValueError, match="part numbers"):
        s3_store.begin_upload(KEY).upload_part(0, b"x")
    upload = s3_store.begin_upload(KEY)
    upload.upload_part(1, b"too small")
    upload.upload_part(2, b"tail")

    with pytest.raises(QExportError, match=r"S3 refused it \(EntityTooSmall\)") as raised:
        upload.complete(rows=0, sha256="0" * 64)
    assert not raised.value.code.retryable
    upload.abort()
    assert s3_store.incomplete_uploads(KEY) == []


def test_parts_in_flight_are_bounded_by_max_parallel_parts(
    moto_endpoint: str, s3_bucket: str
) -> None:
    """With max_parallel_parts=2, never more than two parts are being sent at once."""
    store = S3ObjectStore(s3_bucket, endpoint_url=moto_endpoint, max_parallel_parts=2)
    send = store.client.upload_part
    lock = threading.Lock()
    in_flight, most = 0, 0

    def slow_send(**kwargs: Any) -> Any:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        try:
            time.sleep(0.05)
            return send(**kwargs)
        finally:
            with lock:
                in_flight -= 1

    store.client.upload_part = slow_send  # type: ignore[method-assign]
    parts = _parts(5, b"")
    stored = _upload(store, parts, rows=5)

    assert most == 2
    assert stored.size_bytes == 5 * PART
    assert _read(store) == b"".join(parts)


def test_failed_part_surfaces_as_storage_error_and_abort_cleans_up(
    s3_store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part that cannot be sent fails the upload with a retryable error; abort leaves nothing."""
    send = s3_store.client.upload_part

    def failing_send(**kwargs: Any) -> Any:
        if kwargs["PartNumber"] == 2:
            raise EndpointConnectionError(endpoint_url="http://s3.invalid")
        return send(**kwargs)

    monkeypatch.setattr(s3_store.client, "upload_part", failing_send)
    upload = s3_store.begin_upload(KEY)
    upload.upload_part(1, b"a" * PART)
    upload.upload_part(2, b"b" * PART)

    with pytest.raises(StorageUnavailableError, match="could not upload a part"):
        upload.complete(rows=2, sha256="0" * 64)
    upload.abort()

    assert s3_store.incomplete_uploads(KEY) == []
    assert s3_store.head(KEY) is None
