"""Workers exporting into S3 through a fault-injecting proxy (503 SlowDown, resets, stalls).

The worker's store talks to moto through `FaultProxy`; every check of what was stored goes to
moto directly, so it sees the bucket as it is, not as the faults would show it.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import duckdb
import pytest

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester, Status
from qexport.domain.failures import FailureCode, StorageUnavailableError
from qexport.domain.queries import Query
from qexport.ports import StoredObject
from qexport.services.requests import record_request
from qexport.sources.duckdb.source import DuckDBSource
from qexport.storage.s3.store import S3ObjectStore
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore
from tests.support.containers import container_of
from tests.support.faultproxy import FAULT_KINDS, LOST_REPLY, FaultProxy, Request

pytest_plugins = ["tests.support.s3server"]

ALICE = Requester("alice", "w1")
PREFIX = "tenant"
BIG_ROWS = 600_000  # about 24 MiB of csv: three 8 MiB parts
# Ten times what moto takes to store an 8 MiB part, so that only injected stalls time out.
READ_TIMEOUT = 1.5
STALL_SECONDS = 2.0
# With this seed, the first ten fault decisions at 20% already include each kind of fault.
SEED = 2


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> DuckDBSource:
    """One source for the module: DuckDB shares an open database file within a process, and
    a second source would find the configuration of a first not yet collected locked."""
    path = tmp_path_factory.mktemp("faults") / "data.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE t AS SELECT i, md5(i::VARCHAR) AS h FROM range({BIG_ROWS}) r(i)")
    con.close()
    return DuckDBSource("data", path)


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint, seed=SEED, stall_seconds=STALL_SECONDS) as running:
        yield running


def _worker_store(proxy: FaultProxy, bucket: str) -> S3ObjectStore:
    """The store a worker uses: through the proxy, short timeouts, quick clean-up retries."""
    return S3ObjectStore(
        bucket,
        PREFIX,
        endpoint_url=proxy.url,
        read_timeout=READ_TIMEOUT,
        connect_timeout=1.0,
        retry_attempts=3,
        cleanup_retry_seconds=0.2,
        cleanup_retry_max_seconds=1.0,
    )


def _deps(
    store: S3ObjectStore, data: DuckDBSource, tmp_path: Path, *, max_attempts: int
) -> Container:
    metadata = InMemoryMetadataStore()
    metadata.add_query(Query(str(uuid.uuid4()), "w1", "big", "SELECT * FROM t ORDER BY i", "data"))
    metadata.add_query(
        Query(str(uuid.uuid4()), "w1", "small", "SELECT * FROM t WHERE i < 2000 ORDER BY i", "data")
    )
    settings = Settings(
        data_dir=tmp_path,
        max_attempts=max_attempts,
        retry_base_seconds=0.05,
        retry_max_seconds=0.2,
        poll_seconds=0.05,
    )
    return container_of(
        store=metadata,
        objects=store,
        sources=FixedSources({"data": data}),
        clock=SystemClock(),
        settings=settings,
    )


def _request(deps: Container, *exports: tuple[str, str]) -> list[str]:
    return [
        record_request(
            deps.exports,
            deps.catalog,
            deps.clock,
            ALICE,
            RequestExport(SubjectRef("query", query, by_name=True), fmt),
        ).id
        for query, fmt in exports
    ]


def _records(deps: Container, ids: list[str]) -> list[ExportRecord]:
    records = [deps.exports.get_export(export_id) for export_id in ids]
    assert all(record is not None for record in records)
    return [record for record in records if record is not None]


def _incomplete_upload_ids(endpoint: str, bucket: str) -> set[str]:
    found = boto3.client("s3", endpoint_url=endpoint).list_multipart_uploads(Bucket=bucket)
    return {upload["UploadId"] for upload in found.get("Uploads", [])}


def _object_keys(endpoint: str, bucket: str) -> set[str]:
    """The keys of the exports' objects in the bucket (the audit trail's checkpoints, which
    the workers write beside them, left out)."""
    found = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket)
    keys = {item["Key"] for item in found.get("Contents", [])}
    return {key for key in keys if not key.startswith(f"{PREFIX}/audit/")}


def _wait_for_cleanup(store: S3ObjectStore, seconds: float = 30.0) -> None:
    """Let the clean-up thread finish what S3 refused earlier (nothing, when it never did)."""
    deadline = time.monotonic() + seconds
    while store.cleanup.pending and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.cleanup.pending == []


def test_exports_succeed_with_a_fifth_of_s3_requests_failing(
    proxy: FaultProxy, moto_endpoint: str, s3_bucket: str, data: DuckDBSource, tmp_path: Path
) -> None:
    """At 20% faults every export succeeds, stored whole at its key and nothing else left."""
    proxy.fault_rate = 0.2
    store = _worker_store(proxy, s3_bucket)
    deps = _deps(store, data, tmp_path, max_attempts=5)
    ids = _request(
        deps,
        ("big", "csv"),
        ("big", "parquet"),
        ("small", "jsonl"),
        ("small", "xlsx"),
        ("small", "tsv"),
    )

    Worker(deps, concurrency=2, drain=True).run()

    records = _records(deps, ids)
    assert [record.status for record in records] == [Status.SUCCEEDED] * len(ids)
    direct = S3ObjectStore(s3_bucket, PREFIX, endpoint_url=moto_endpoint)
    for record in records:
        assert record.size_bytes is not None
        assert record.row_count is not None
        assert record.sha256 is not None
        expected = StoredObject(
            record.storage_key, record.size_bytes, record.row_count, record.sha256
        )
        assert direct.head(record.storage_key) == expected
        with direct.open(record.storage_key) as stream:
            data = stream.read()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (record.size_bytes, record.sha256)
    assert records[0].size_bytes is not None
    assert records[0].size_bytes > 2 * deps.settings.part_size  # three parts at least
    _wait_for_cleanup(store)
    assert _incomplete_upload_ids(moto_endpoint, s3_bucket) == set()
    # No staged copy is left: the bucket holds exactly the exports.
    assert _object_keys(moto_endpoint, s3_bucket) == {
        f"{PREFIX}/{record.storage_key}" for record in records
    }
    injected = proxy.counts()
    assert all(injected[kind] > 0 for kind in FAULT_KINDS), injected


def test_exports_fail_as_storage_unavailable_when_s3_stops_answering_mid_upload(
    proxy: FaultProxy, moto_endpoint: str, s3_bucket: str, data: DuckDBSource, tmp_path: Path
) -> None:
    """Every request failing from the first multipart upload on: each export settles
    failed/storage_unavailable after max_attempts; the uploads S3 could not abort then are
    aborted once it answers again."""

    def outage_from_first_upload(request: Request) -> None:
        if request.method == "POST" and request.path.endswith("?uploads"):
            proxy.fault_rate = 1.0

    proxy.after_forward = outage_from_first_upload
    store = _worker_store(proxy, s3_bucket)
    deps = _deps(store, data, tmp_path, max_attempts=2)
    # All of several parts, so none can complete before the outage starts.
    ids = _request(deps, ("big", "csv"), ("big", "tsv"), ("big", "jsonl"))

    Worker(deps, concurrency=3, drain=True).run()

    for record in _records(deps, ids):
        assert record.status is Status.FAILED
        assert record.failure_code is FailureCode.STORAGE_UNAVAILABLE
        assert record.attempt == deps.settings.max_attempts
        assert record.failure_detail
    # S3 refused the aborts too: the uploads are still there, each queued for clean-up.
    left = _incomplete_upload_ids(moto_endpoint, s3_bucket)
    assert left
    assert {leftover.upload_id for leftover in store.cleanup.pending} == left
    assert proxy.faults() > 0

    proxy.fault_rate = 0.0
    _wait_for_cleanup(store)

    assert _incomplete_upload_ids(moto_endpoint, s3_bucket) == set()
    assert _object_keys(moto_endpoint, s3_bucket) == set()


def _creates(path: str) -> bool:
    return path.endswith("?uploads")


@pytest.mark.parametrize("where", ["staging", "final"])
def test_an_upload_whose_creation_answer_was_lost_is_aborted_once_the_export_settles(
    proxy: FaultProxy,
    moto_endpoint: str,
    s3_bucket: str,
    data: DuckDBSource,
    tmp_path: Path,
    where: str,
) -> None:
    """S3 creates a multipart upload (staged, or at the final key), the reset loses its answer
    and botocore asks again: the first upload's id never reaches qexport, yet once the export
    has settled no upload is left in the bucket."""

    def at_the_chosen_key(request: Request) -> bool:
        staged = "/.staging/" in request.path
        return (
            request.method == "POST" and _creates(request.path) and staged == (where == "staging")
        )

    created: list[str] = []
    proxy.lose_reply(at_the_chosen_key)
    proxy.after_forward = lambda r: created.append(r.path) if _creates(r.path) else None
    store = _worker_store(proxy, s3_bucket)
    deps = _deps(store, data, tmp_path, max_attempts=1)
    (export_id,) = _request(deps, ("big", "csv"))

    Worker(deps, drain=True).run()

    (record,) = _records(deps, [export_id])
    assert (record.status, record.attempt) == (Status.SUCCEEDED, 1)
    assert proxy.counts()[LOST_REPLY] == 1
    assert len(created) == 3  # the lost one, its retry, and the other of the two uploads
    _wait_for_cleanup(store)
    assert _incomplete_upload_ids(moto_endpoint, s3_bucket) == set()
    assert _object_keys(moto_endpoint, s3_bucket) == {f"{PREFIX}/{record.storage_key}"}


def test_abort_during_an_outage_does_not_raise_and_is_done_once_s3_answers(
    moto_endpoint: str, s3_bucket: str
) -> None:
    """abort() never raises over the caller's error: what S3 refuses is queued and retried."""
    with FaultProxy(moto_endpoint, kinds=("reset",)) as resetting:
        store = _worker_store(resetting, s3_bucket)
        upload = store.begin_upload("exports/w1/e1/big.csv")
        upload.upload_part(1, b"a" * 8 * 1024 * 1024)
        upload.upload_part(2, b"tail")  # begins the multipart upload
        resetting.fault_rate = 1.0
        with pytest.raises(StorageUnavailableError):
            upload.complete(rows=1, sha256="0" * 64)

        upload.abort()

        left = _incomplete_upload_ids(moto_endpoint, s3_bucket)
        assert len(left) == 1
        assert [leftover.upload_id for leftover in store.cleanup.pending] == list(left)
        resetting.fault_rate = 0.0
        _wait_for_cleanup(store)
        assert _incomplete_upload_ids(moto_endpoint, s3_bucket) == set()


def test_a_stalled_s3_fails_the_start_up_check_on_its_read_timeout(
    moto_endpoint: str, s3_bucket: str
) -> None:
    """S3 accepting requests but never answering: check_bucket gives up after its tries, each
    ended by the read timeout, with a storage error naming the bucket (no hang)."""
    with FaultProxy(moto_endpoint, fault_rate=1.0, kinds=("stall",), stall_seconds=60) as stalled:
        store = _worker_store(stalled, s3_bucket)

        with pytest.raises(StorageUnavailableError, match="Read timeout") as raised:
            store.check_bucket()

        assert f"bucket '{s3_bucket}'" in str(raised.value)
        assert raised.value.code.retryable
        assert stalled.counts()["stall"] == store.retry_attempts


def test_missing_bucket_fails_the_start_up_check_at_once(proxy: FaultProxy, aws_env: None) -> None:
    """A bucket that does not exist is reported by name after one request: it is not retried."""
    store = _worker_store(proxy, "no-such-bucket-here")

    with pytest.raises(StorageUnavailableError, match="bucket 'no-such-bucket-here' does not"):
        store.check_bucket()

    assert proxy.counts()["forwarded"] == 1
