"""Limits a worker enforces on a real DuckDB source: the workspace's storage quota, the cap
on DuckDB's spill, and a spill folder that no other source's query can see."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester, Status
from qexport.domain.failures import FailureCode, QueryInvalidError
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.duckdb.source import DuckDBSource
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of

ALICE = Requester("alice", "w1")
# Wide rows in an order unrelated to storage: the sort spills once memory is tight.
SPILLING_SQL = "SELECT md5(i::VARCHAR) || md5((i * 7)::VARCHAR) AS s, i FROM range(500000) r(i)"
SPILLING_SQL += " ORDER BY s"


def _database(path: Path) -> Path:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE items AS SELECT i AS id, 'item ' || i AS name FROM range(1000) r(i)")
    con.close()
    return path


def _deps(tmp_path: Path, **settings: object) -> Container:
    path = _database(tmp_path / "data.duckdb")
    store = InMemoryMetadataStore()
    for name, sql in (("items", "SELECT * FROM items ORDER BY id"), ("spill", SPILLING_SQL)):
        store.add_query(Query(str(uuid.uuid4()), "w1", name, sql, "data"))
    config = Settings(data_dir=tmp_path, lease_seconds=30, **settings)  # type: ignore[arg-type] # test overrides
    source = DuckDBSource(
        "data", path, memory_limit=config.duckdb_memory_limit, temp_limit=config.duckdb_temp_limit
    )
    return container_of(
        store, InMemoryObjectStore(), FixedSources({"data": source}), SystemClock(), config
    )


def _run(deps: Container, query: str, fmt: str = "csv") -> ExportRecord:
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", query, by_name=True), fmt),
    )
    assert Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    return final


def test_an_export_past_the_workspace_quota_fails_and_leaves_no_file(tmp_path: Path) -> None:
    """The file that would take the workspace past its quota is deleted and the export
    fails limit_exceeded naming the quota; the exports before it stay downloadable."""
    deps = _deps(tmp_path)
    first = _run(deps, "items")
    assert first.size_bytes is not None
    # Room for exactly one more file of the same size.
    deps = replace(deps, settings=replace(deps.settings, workspace_quota=first.size_bytes * 2))
    second = _run(deps, "items")
    assert (first.status, second.status) == (Status.SUCCEEDED, Status.SUCCEEDED)
    third = _run(deps, "items")
    assert (third.status, third.failure_code) == (Status.FAILED, FailureCode.LIMIT_EXCEEDED)
    assert "storage quota" in (third.failure_detail or "")
    assert "QEXPORT_WORKSPACE_QUOTA" in (third.failure_detail or "")
    assert third.attempt == 1  # not retried: the next attempt would be refused the same way
    assert deps.objects.head(third.storage_key) is None
    assert deps.objects.incomplete_uploads(third.storage_key) == []
    assert deps.objects.head(first.storage_key) is not None


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_a_query_spilling_past_the_temp_limit_fails_limit_exceeded(
    tmp_path: Path, fmt: str
) -> None:
    """With a 1 MiB spill cap, a sort that spills more fails limit_exceeded naming the
    setting, on DuckDB's own writer and on the streaming one alike."""
    deps = _deps(tmp_path, duckdb_memory_limit="64MB", duckdb_temp_limit="1MiB")
    final = _run(deps, "spill", fmt)
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.LIMIT_EXCEEDED)
    assert "QEXPORT_DUCKDB_TEMP_LIMIT" in (final.failure_detail or "")


def test_the_same_sort_succeeds_within_the_default_limit(tmp_path: Path) -> None:
    """The spilling sort of the test above succeeds with the default 10 GiB cap: the failure
    there is the cap's, not the memory limit's."""
    deps = _deps(tmp_path, duckdb_memory_limit="64MB")
    final = _run(deps, "spill")
    assert (final.status, final.row_count) == (Status.SUCCEEDED, 500_000)


def _glob(source: DuckDBSource, pattern: str) -> list[object]:
    stream = source.execute(f"SELECT file FROM glob('{pattern}')", {}, ALICE, timeout_seconds=30)
    try:
        return list(pa.Table.from_batches(list(stream), schema=stream.schema).to_pylist())
    finally:
        stream.close()


def test_no_query_on_another_source_lists_or_reads_the_spill_folder(tmp_path: Path) -> None:
    """Each source spills into a private folder of its own; a query on another source is
    refused listing it, or the folder of its pipes, or reading the files in them."""
    deps = _deps(tmp_path, duckdb_memory_limit="64MB")
    assert _run(deps, "spill").status is Status.SUCCEEDED
    spilled = deps.sources.source_for("data", "w1")
    assert isinstance(spilled, DuckDBSource)
    other = DuckDBSource("other", _database(tmp_path / "other.duckdb"))
    try:
        scratch = spilled.scratch_root
        assert scratch is not None
        assert (scratch / "spill").is_dir()
        for pattern in (f"{scratch}/spill/**", f"{scratch}/pipes/*", f"{scratch}/*"):
            with pytest.raises(QueryInvalidError, match=r"glob\(\) is not allowed"):
                _glob(other, pattern)
        with pytest.raises(QueryInvalidError, match=r"read_blob\(\) is not allowed"):
            other.execute(
                f"SELECT * FROM read_blob('{scratch}/spill/duckdb/*')",
                {},
                ALICE,
                timeout_seconds=30,
            )
    finally:
        other.close()
        spilled.close()
