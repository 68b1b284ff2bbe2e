"""qexport on PostgreSQL + S3 (moto's server), with worker processes as real subprocesses."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import boto3
import psycopg
import pytest

from qexport.domain.audit_keys import AuditKeys
from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Parameter, ParamType
from qexport.store.audit.chain import use_keys
from qexport.store.engine import create_engine
from tests.e2e.conftest import Env, wait_for
from tests.e2e.test_worker_faults import BIG_SQL, HUGE_STRING_SQL, MEMORY_LEASE
from tests.support.stores import SqlMetadataStore

pytest_plugins = ["tests.support.s3server"]

PREFIX = "qx"
REGION = "us-east-1"  # as tests.support.s3server (imported as a plugin, so not imported here)
FORMATS = ("csv", "tsv", "jsonl", "parquet", "xlsx")
_K = Parameter("k", ParamType.INTEGER)
FAST = {"QEXPORT_LEASE_SECONDS": "2", "QEXPORT_POLL_SECONDS": "0.1"}


@pytest.fixture
def cluster(
    tmp_path: Path, demo_db: Path, pg_url: str, moto_endpoint: str, s3_bucket: str
) -> Iterator[Env]:
    """The CLI and workers on a PostgreSQL metadata database and an S3 bucket."""
    (tmp_path / "demo.duckdb").symlink_to(demo_db)
    engine = create_engine(pg_url)
    secret = "scale-out-test-key-" + "k" * 40
    use_keys(engine, AuditKeys.from_secrets(secret))  # the commands' audit chain keys
    env = Env(
        tmp_path,
        extra={
            "QEXPORT_DATABASE_URL": pg_url,
            "QEXPORT_STORAGE_URL": f"s3://{s3_bucket}/{PREFIX}",
            "QEXPORT_S3_ENDPOINT_URL": moto_endpoint,
            # Required on PostgreSQL: the master secret is never kept in a shared database.
            "QEXPORT_SECRET_KEY": secret,
        },
        _store=SqlMetadataStore(engine),
    )
    yield env
    env.stop_all()
    engine.dispose()


def _s3(endpoint: str) -> object:
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION)


def _assert_stored(env: Env, record: ExportRecord, endpoint: str, bucket: str) -> None:
    """The object at the record's key is complete and is exactly what the record describes."""
    body = (
        _s3(endpoint)  # type: ignore[attr-defined]
        .get_object(Bucket=bucket, Key=f"{PREFIX}/{record.storage_key}")["Body"]
        .read()
    )
    assert len(body) == record.size_bytes
    assert hashlib.sha256(body).hexdigest() == record.sha256


def _incomplete_uploads(endpoint: str, bucket: str) -> list[str]:
    found = _s3(endpoint).list_multipart_uploads(Bucket=bucket)  # type: ignore[attr-defined]
    return [upload["Key"] for upload in found.get("Uploads", [])]


def _object_keys(endpoint: str, bucket: str) -> list[str]:
    found = _s3(endpoint).list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
    return sorted(item["Key"] for item in found.get("Contents", []))


def _valid_seconds(link: str) -> float:
    """How long a presigned GET stays valid (SigV4 `X-Amz-Expires`, or SigV2 `Expires`)."""
    query = parse_qs(urlparse(link).query)
    if "X-Amz-Expires" in query:
        return float(query["X-Amz-Expires"][0])
    return float(query["Expires"][0]) - time.time()


def test_four_processes_drain_200_exports_of_mixed_formats(
    cluster: Env, moto_endpoint: str, s3_bucket: str
) -> None:
    cluster.add_query(
        "slice",
        "SELECT * FROM orders WHERE order_id % 100 = $k ORDER BY order_id LIMIT 2000",
        _K,
    )
    ids = [cluster.request("slice", FORMATS[i % 5], k=str(i % 100)) for i in range(200)]
    supervisor = cluster.start_worker("--processes", "4", "--concurrency", "2", "--drain")
    assert supervisor.wait(timeout=600) == 0
    records = [cluster.record(i) for i in ids]
    assert [r.status for r in records] == [Status.SUCCEEDED] * 200
    assert {r.attempt for r in records} == {1}
    assert len({r.worker_id for r in records}) >= 2
    for record in records:
        assert record.row_count == 2000
        _assert_stored(cluster, record, moto_endpoint, s3_bucket)
    assert _incomplete_uploads(moto_endpoint, s3_bucket) == []


def test_a_worker_killed_mid_upload_is_redelivered_into_the_same_key(
    cluster: Env, moto_endpoint: str, s3_bucket: str
) -> None:
    """SIGKILL mid-upload on PostgreSQL + S3: the next worker completes the export into the
    same key, and the killed attempt's upload is aborted once it has settled."""
    cluster.add_query("big", BIG_SQL)
    export_id = cluster.request("big", "csv")  # ~90 MiB: a multipart upload
    key = cluster.record(export_id).storage_key
    first = cluster.start_worker(**FAST)
    wait_for(lambda: cluster.record(export_id).progress_rows > 0, timeout=120)
    wait_for(lambda: _incomplete_uploads(moto_endpoint, s3_bucket), timeout=120)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert cluster.start_worker("--drain", **FAST).wait(timeout=300) == 0
    record = cluster.record(export_id)
    assert (record.status, record.attempt, record.storage_key) == (Status.SUCCEEDED, 2, key)
    assert record.row_count == 3 * 400_000
    _assert_stored(cluster, record, moto_endpoint, s3_bucket)
    # The killed attempt's upload was aborted when the export settled, not a day later.
    assert _incomplete_uploads(moto_endpoint, s3_bucket) == []
    stored = _object_keys(moto_endpoint, s3_bucket)
    # Beside the file, only the workers' checkpoints of the audit trail (outside exports/).
    assert [k for k in stored if not k.startswith(f"{PREFIX}/audit/")] == [f"{PREFIX}/{key}"]
    assert any(k.startswith(f"{PREFIX}/audit/checkpoints/demo/") for k in stored)


def test_workers_reconnect_when_postgresql_connections_are_killed(
    cluster: Env, pg_url: str, moto_endpoint: str, s3_bucket: str
) -> None:
    """Every connection of the metadata database is terminated again and again while two
    worker processes run: they reconnect, and every export settles once, succeeded."""
    cluster.add_query("part", "SELECT * FROM orders WHERE order_id % 40 = $k", _K)
    ids = [cluster.request("part", FORMATS[i % 5], k=str(i % 40)) for i in range(40)]
    supervisor = cluster.start_worker("--processes", "2", **FAST)
    # The workers are up (past their start-up check, which gives up at once by design) once
    # they claim something; from then on every connection may be killed.
    wait_for(lambda: any(cluster.record(i).attempt > 0 for i in ids), timeout=120)
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            while not stop.wait(0.4):
                found = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                kills.append(int(found[0]) if found else 0)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        wait_for(lambda: sum(kills) >= 10 and len(kills) >= 10, timeout=120)
    finally:
        stop.set()
        thread.join()
    wait_for(lambda: all(cluster.record(i).settled for i in ids), timeout=300)
    records = [cluster.record(i) for i in ids]
    assert [r.status for r in records] == [Status.SUCCEEDED] * len(ids)
    for record in records:
        _assert_stored(cluster, record, moto_endpoint, s3_bucket)
    assert supervisor.poll() is None
    log = (cluster.data_dir / "worker-0.log").read_text()
    assert "worker_process_exited" not in log  # the processes reconnected rather than died
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0


def test_s3_lifecycle_rules_download_links_and_a_missing_bucket(
    cluster: Env, moto_endpoint: str, s3_bucket: str
) -> None:
    drift = cluster.run("storage", "lifecycle", "--check", check=False)
    assert drift.returncode == 1
    assert "expire-exports' is missing" in drift.stdout
    cluster.run("storage", "lifecycle", "--apply")
    assert "lifecycle rules in place" in cluster.run("storage", "lifecycle", "--check").stdout
    rules = _s3(moto_endpoint).get_bucket_lifecycle_configuration(  # type: ignore[attr-defined]
        Bucket=s3_bucket
    )["Rules"]
    assert {r["Filter"]["Prefix"]: r.get("Expiration", {}).get("Days") for r in rules}[
        f"{PREFIX}/exports/"
    ] == 8  # retention 7 days + 1

    cluster.add_query("few", "SELECT * FROM customers LIMIT 10")
    export_id = cluster.request("few", "csv")
    assert cluster.start_worker("--drain").wait(timeout=120) == 0
    link = cluster.run("exports", "download", export_id, "--url").stdout.strip()
    with urllib.request.urlopen(link, timeout=10) as response:  # noqa: S310 (moto, local)
        body = response.read()
        disposition = response.headers["Content-Disposition"]
    record = cluster.record(export_id)
    assert hashlib.sha256(body).hexdigest() == record.sha256
    assert record.filename in disposition
    assert 290 <= _valid_seconds(link) <= 300
    listed = cluster.run("audit", "list", "--json", "--action", "file.presigned").stdout
    (handed,) = json.loads(listed)["items"]  # the local link is recorded like the API's
    assert (handed["actor"]["kind"], handed["target"]["id"]) == ("operator", export_id)
    # A link never outlives its file: with 90 s left, it is valid for at most 90 s.
    short = cluster.request("few", "csv")
    assert cluster.start_worker("--drain", QEXPORT_RETENTION="90s").wait(timeout=120) == 0
    short_link = cluster.run("exports", "download", short, "--url").stdout.strip()
    assert 0 < _valid_seconds(short_link) <= 90

    missing = Env(cluster.data_dir, extra={**cluster.extra, "QEXPORT_STORAGE_URL": "s3://absent"})
    proc = missing.run("worker", check=False, timeout=60)
    assert proc.returncode == 3
    assert "bucket 'absent' does not exist" in proc.stderr


@pytest.mark.parametrize("service", ["worker", "scheduler", "serve"])
def test_services_on_postgresql_refuse_to_start_without_a_secret_key(
    cluster: Env, service: str
) -> None:
    """On a PostgreSQL metadata database, worker, scheduler and serve exit 2 with one line
    naming QEXPORT_SECRET_KEY when it is not set."""
    unkeyed = {k: v for k, v in cluster.extra.items() if k != "QEXPORT_SECRET_KEY"}
    unkeyed["QEXPORT_PUBLIC_BASE_URL"] = "https://qexport.example.com"
    refused = Env(cluster.data_dir, extra=unkeyed).run(service, check=False, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert f"{service} cannot start: QEXPORT_SECRET_KEY is required" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_an_export_past_the_memory_limit_fails_once_under_a_supervisor(
    cluster: Env, moto_endpoint: str, s3_bucket: str
) -> None:
    """On PostgreSQL + S3 with `--processes 2`: the 1 GB string export fails limit_exceeded
    after one attempt, naming QEXPORT_WORKER_MAX_MEMORY, no worker process dies (a child
    renewed for its memory is replaced at once, not as a crash), and the next export
    completes."""
    cluster.add_query("huge", HUGE_STRING_SQL)
    cluster.add_query("few", "SELECT * FROM customers LIMIT 50")
    supervisor = cluster.start_worker(
        "--processes", "2", QEXPORT_WORKER_MAX_MEMORY="512MiB", **MEMORY_LEASE
    )
    export_id = cluster.request("huge", "csv")
    wait_for(lambda: cluster.record(export_id).settled, timeout=180)
    failed = cluster.record(export_id)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.LIMIT_EXCEEDED,
        1,
    )
    assert "QEXPORT_WORKER_MAX_MEMORY (512 MiB)" in (failed.failure_detail or "")
    normal = cluster.request("few", "csv")
    wait_for(lambda: cluster.record(normal).settled, timeout=120)
    done = cluster.record(normal)
    assert done.status is Status.SUCCEEDED
    _assert_stored(cluster, done, moto_endpoint, s3_bucket)
    assert supervisor.poll() is None
    assert "worker_process_exited" not in (cluster.data_dir / "worker-0.log").read_text()
