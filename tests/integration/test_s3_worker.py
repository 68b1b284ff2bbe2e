"""A worker exporting into S3 (moto's server): the file lands at its key with its metadata."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import duckdb

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.queries import Query
from qexport.services.exports import open_download
from qexport.services.requests import record_request
from qexport.sources.duckdb.source import DuckDBSource
from qexport.storage.s3.store import S3ObjectStore
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore
from tests.support.containers import container_of

pytest_plugins = ["tests.support.s3server"]

ALICE = Requester("alice", "w1")


def test_exports_of_every_format_are_stored_in_s3(s3_store: S3ObjectStore, tmp_path: Path) -> None:
    """Multi-part (csv of ~15 MiB) and single-part files complete in S3 and download intact."""
    path = tmp_path / "data.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT i, md5(i::VARCHAR) AS h FROM range(400000) r(i)")
    con.close()
    store = InMemoryMetadataStore()
    store.add_query(Query(str(uuid.uuid4()), "w1", "t", "SELECT * FROM t ORDER BY i", "data"))
    deps = container_of(
        store=store,
        objects=s3_store,
        sources=FixedSources({"data": DuckDBSource("data", path)}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path),
    )
    ids = [
        record_request(
            store,
            store,
            deps.clock,
            ALICE,
            RequestExport(SubjectRef("query", "t", by_name=True), f),
        ).id
        for f in ("csv", "parquet", "xlsx")
    ]
    assert Worker(deps, drain=True).run() == {"succeeded": 3}
    for export_id in ids:
        record, stream = open_download(store, store, s3_store, deps.clock, ALICE, export_id)
        data = stream.read()
        assert record.status is Status.SUCCEEDED
        assert len(data) == record.size_bytes
        assert hashlib.sha256(data).hexdigest() == record.sha256
        assert record.row_count == 400_000
        assert s3_store.incomplete_uploads(record.storage_key) == []
    csv_record = store.get_export(ids[0])
    assert csv_record is not None
    assert csv_record.size_bytes is not None
    assert csv_record.size_bytes > 8 * 1024 * 1024  # more than one part: a multipart upload
