"""A DuckDB source over a read-only data lake: Parquet, CSV and JSON files under the folders
named by `?allow=` are read, exported, described and previewed; every other file, every write
and every attempt to widen the sandbox stays refused."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import (
    InvalidRequestError,
    QueryInvalidError,
    SourceUnavailableError,
)
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.services.source_urls import check_source_url
from qexport.sources.duckdb.source import DuckDBSource
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of

ALICE = Requester("alice", "w1")


@dataclass
class Lake:
    root: Path
    folder: Path
    shared: Path
    outside: Path
    settings: Settings

    def url(self, *folders: Path) -> str:
        allow = ",".join(str(f) for f in folders or (self.folder, self.shared))
        return f"duckdb://{self.root / 'lake.duckdb'}?allow={allow}"

    def source(self, url: str | None = None) -> DuckDBSource:
        built = bootstrap.source_from_url("lake", url or self.url(), self.settings)
        assert isinstance(built, DuckDBSource)
        return built


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    folder, shared, outside = tmp_path / "lake", tmp_path / "shared", tmp_path / "outside"
    for made in (folder, folder / "2024", shared, outside, tmp_path / "data"):
        made.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "owner": ["alice", "bob"]}), folder / "a.parquet")
    pq.write_table(pa.table({"id": [3], "owner": ["alice"]}), folder / "b.parquet")
    pq.write_table(pa.table({"id": [4], "owner": ["carol"]}), folder / "2024" / "c.parquet")
    (folder / "people.csv").write_text("id,name\n1,Ann\n2,Bo\n")
    (shared / "events.json").write_text('{"id": 1, "kind": "open"}\n{"id": 2, "kind": "shut"}\n')
    (outside / "secret.csv").write_text("token\nhunter2\n")
    pq.write_table(pa.table({"token": ["hunter2"]}), outside / "secret.parquet")
    os.symlink(outside / "secret.csv", folder / "linked.csv")
    os.symlink(outside, folder / "linked_dir")
    with duckdb.connect(str(tmp_path / "lake.duckdb")) as con:
        con.execute("CREATE TABLE owners AS SELECT 'alice' AS owner, 'Alice A.' AS full_name")
    return Lake(tmp_path, folder, shared, outside, Settings(data_dir=tmp_path / "data"))


@pytest.fixture
def lake_source(lake: Lake) -> Iterator[DuckDBSource]:
    built = lake.source()
    yield built
    built.close()


def _rows(source: DuckDBSource, sql: str, parameters: dict[str, Any] | None = None) -> list[Any]:
    stream = source.execute(sql, parameters or {}, ALICE, timeout_seconds=30)
    try:
        table = pa.Table.from_batches(list(stream), schema=stream.schema)
    finally:
        stream.close()
    return [tuple(row.values()) for row in table.to_pylist()]


def _refusal(source: DuckDBSource, sql: str) -> str:
    with pytest.raises(QueryInvalidError) as caught:
        _rows(source, sql)
    return str(caught.value)


def test_parquet_csv_and_json_files_in_the_lake_are_read(
    lake_source: DuckDBSource, lake: Lake
) -> None:
    """Each reader reads a file of its kind in an allowed folder, joined with the database's
    own tables, with the requester's context bound."""
    sql = (
        f"SELECT p.id, o.full_name FROM read_parquet('{lake.folder}/a.parquet') p"
        " JOIN owners o USING (owner) WHERE p.owner = $user_id"
    )
    assert _rows(lake_source, sql) == [(1, "Alice A.")]
    csv = f"SELECT name FROM read_csv('{lake.folder}/people.csv') ORDER BY id"
    assert _rows(lake_source, csv) == [("Ann",), ("Bo",)]
    events = f"SELECT kind FROM read_json('{lake.shared}/events.json') WHERE id = $id"
    assert _rows(lake_source, events, {"id": 2}) == [("shut",)]


def test_a_glob_inside_the_lake_reads_every_file_it_matches(
    lake_source: DuckDBSource, lake: Lake
) -> None:
    """A glob, as a replacement scan or given to a reader, and `**` into sub-folders."""
    assert _rows(lake_source, f"SELECT id FROM '{lake.folder}/*.parquet' ORDER BY id") == [
        (1,),
        (2,),
        (3,),
    ]
    deep = f"SELECT count(*) FROM read_parquet('{lake.folder}/**/*.parquet')"
    assert _rows(lake_source, deep) == [(4,)]
    files = f"['{lake.folder}/a.parquet', '{lake.folder}/b.parquet']"
    listed = f"SELECT count(*) FROM read_parquet({files})"
    assert _rows(lake_source, listed) == [(3,)]


@pytest.mark.parametrize(
    "path",
    [
        "{outside}/secret.csv",
        "{folder}/../outside/secret.csv",
        "{folder}/2024/../../outside/secret.csv",
        "{outside}/*.csv",
        "/etc/passwd",
        "secret.csv",
    ],
)
def test_files_outside_the_lake_are_refused_before_anything_runs(
    lake_source: DuckDBSource, lake: Lake, path: str
) -> None:
    """A path outside every allowed folder, `..` out of one, or a relative one is refused,
    naming the path."""
    named = path.format(outside=lake.outside, folder=lake.folder)
    message = _refusal(lake_source, f"SELECT * FROM read_csv('{named}')")
    assert named in message
    assert "hunter2" not in message


def test_a_missing_lake_file_is_named_to_members(lake_source: DuckDBSource, lake: Lake) -> None:
    """A glob that matches nothing in the lake: source_unavailable naming the pattern, a
    path of the lake, which the query's authors read (any other path in DuckDB's words is
    replaced, withheld.py)."""
    pattern = f"{lake.folder}/nothing-*.csv"
    with pytest.raises(SourceUnavailableError) as caught:
        _rows(lake_source, f"SELECT * FROM read_csv('{pattern}')")
    assert pattern in str(caught.value)


def test_a_refusal_names_the_path_but_not_the_lake_folders(
    lake_source: DuckDBSource, lake: Lake
) -> None:
    """The refusal reaches viewers too, who are not told where the installation keeps its
    files: it names the query's own path and where its authors find the folders (the
    source's URL), not the folders."""
    named = f"{lake.outside}/secret.csv"
    message = _refusal(lake_source, f"SELECT * FROM read_csv('{named}')")
    assert named in message
    assert "?allow=" in message
    assert str(lake.folder) not in message
    assert str(lake.shared) not in message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('{folder}/linked.csv')",
        "SELECT * FROM read_parquet('{folder}/linked_dir/secret.parquet')",
        "SELECT * FROM '{folder}/linked_dir/*.parquet'",
        "SELECT * FROM read_csv('{folder}/*.csv')",  # the glob matches the link too
    ],
)
def test_links_that_leave_the_lake_are_refused(
    lake_source: DuckDBSource, lake: Lake, sql: str
) -> None:
    """A symbolic link in the lake to a file or a folder outside it reads nothing, whether
    named or matched by a glob."""
    message = _refusal(lake_source, sql.format(folder=lake.folder))
    assert "hunter2" not in message


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1 AS x) TO '{folder}/out.csv'",
        "COPY owners TO '{folder}/out.parquet' (FORMAT parquet)",
        "ATTACH '{folder}/other.duckdb' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET allowed_directories = ['/']",
        "SET enable_external_access = true",
        "RESET enable_external_access",
        "CREATE TABLE stolen AS SELECT * FROM read_csv('{folder}/people.csv')",
    ],
)
def test_writing_attaching_and_widening_the_sandbox_are_refused(
    lake_source: DuckDBSource, lake: Lake, sql: str
) -> None:
    """The lake is read-only: COPY ... TO (into an allowed folder too), ATTACH, extensions and
    any setting are refused, and no file appears."""
    _refusal(lake_source, sql.format(folder=lake.folder))
    assert sorted(p.name for p in lake.folder.iterdir()) == sorted(
        ["a.parquet", "b.parquet", "2024", "people.csv", "linked.csv", "linked_dir"]
    )
    _refusal(lake_source, f"SELECT count(*) FROM read_csv('{lake.outside}/secret.csv')")


def test_the_sandbox_cannot_be_widened_from_sql(lake_source: DuckDBSource, lake: Lake) -> None:
    """The configuration is locked: even on the source's own connection, no SET gets
    through, and a file outside stays out of reach afterwards."""
    _rows(lake_source, "SELECT 1")  # opens the connection
    opened = lake_source._opened  # the connection itself, past the statement check
    assert opened is not None
    with pytest.raises(duckdb.Error):
        opened.connection.execute("SET enable_external_access = true")
    with pytest.raises(duckdb.Error):
        opened.connection.execute("SET allowed_directories = ['/']")
    with pytest.raises(duckdb.Error):
        opened.connection.execute(f"SELECT * FROM read_csv('{lake.outside}/secret.csv')")


def test_other_file_readers_and_computed_paths_stay_refused(
    lake_source: DuckDBSource, lake: Lake
) -> None:
    """Only the Parquet, CSV and JSON readers, with the path written out: a path built from an
    expression or a parameter cannot be checked, and read_text/glob stay refused."""
    for sql in (
        f"SELECT * FROM read_text('{lake.folder}/people.csv')",
        f"SELECT * FROM glob('{lake.folder}/*')",
        f"SELECT * FROM read_csv('{lake.folder}/' || 'people.csv')",
        "SELECT * FROM read_csv($path)",
    ):
        _refusal(lake_source, sql)


def test_the_private_pipes_folder_is_no_part_of_the_lake(
    lake_source: DuckDBSource, lake: Lake
) -> None:
    """DuckDB may write into the source's pipes folder, but a query may not read it."""
    _rows(lake_source, "SELECT 1")
    assert lake_source.scratch_root is not None
    pipe = lake_source.scratch_root / "pipes" / "x.csv"
    pipe.write_text("a\n1\n")
    assert str(pipe) in _refusal(lake_source, f"SELECT * FROM read_csv('{pipe}')")


def test_without_allow_no_file_is_read(lake: Lake) -> None:
    """A URL without ?allow= is the sandboxed source it always was: no file reader at all."""
    plain = lake.source(f"duckdb://{lake.root / 'lake.duckdb'}")
    try:
        assert plain.lake is None
        _refusal(plain, f"SELECT * FROM read_parquet('{lake.folder}/a.parquet')")
        _refusal(plain, f"SELECT * FROM '{lake.folder}/a.parquet'")
        assert _rows(plain, "SELECT owner FROM owners") == [("alice",)]
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("allow", "named", "why"),
    [
        ("relative/lake", "relative/lake", "is not an absolute path"),
        ("{root}/missing", "{root}/missing", "does not exist"),
        ("{root}/lake/people.csv", "{root}/lake/people.csv", "is not a folder"),
        ("{root}/lake,{root}/gone", "{root}/gone", "does not exist"),
        ("{root}", "{root}", "holds qexport's own files"),
        ("/", "/", "holds qexport's own files"),
    ],
)
def test_bad_lake_folders_are_refused_at_configuration(
    lake: Lake, allow: str, named: str, why: str
) -> None:
    """Each folder must be absolute, exist, be a folder and not hold qexport's own files (its
    data folder, the temporary folder): the error names the bad one, for a configured source
    and for one registered with `qexport sources add`."""
    url = f"duckdb://{lake.root / 'lake.duckdb'}?allow={allow.format(root=lake.root)}"
    expected = repr(named.format(root=lake.root))
    with pytest.raises(ValueError, match=why) as caught:
        bootstrap.source_from_url("lake", url, lake.settings)
    assert expected in str(caught.value)
    if why != "holds qexport's own files":  # the data folder is the worker's to know
        with pytest.raises(InvalidRequestError, match=why):
            check_source_url(url)


def test_an_unknown_option_is_refused(lake: Lake) -> None:
    """A misspelt ?allow= is not silently ignored."""
    with pytest.raises(ValueError, match="unknown DuckDB source option 'alow'"):
        bootstrap.source_from_url("lake", f"{lake.url()}&alow=/x", lake.settings)


def test_a_registered_lake_url_is_accepted(lake: Lake) -> None:
    """`qexport sources add` takes the same ?allow= URL."""
    check_source_url(lake.url())


def test_describe_and_preview_work_on_a_lake_query(lake_source: DuckDBSource, lake: Lake) -> None:
    """The columns of a lake query come from the file's schema; the preview shows its rows."""
    sql = f"SELECT id, owner FROM '{lake.folder}/*.parquet' WHERE owner = $user_id ORDER BY id"
    columns = lake_source.describe(sql, {}, ALICE, timeout_seconds=10)
    assert [(c.name, c.type) for c in columns] == [("id", "BIGINT"), ("owner", "VARCHAR")]
    shown = lake_source.preview(
        sql, {}, ALICE, timeout_seconds=10, max_rows=1, max_cell_chars=100, max_bytes=10_000
    )
    assert shown.table.to_pylist() == [{"id": 1, "owner": "alice"}]
    assert shown.more
    with pytest.raises(QueryInvalidError):
        lake_source.describe(
            f"SELECT * FROM '{lake.outside}/secret.csv'", {}, ALICE, timeout_seconds=10
        )


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_a_lake_query_exports_through_the_worker(lake: Lake, fmt: str) -> None:
    """A worker exports a lake query: DuckDB's own writer for csv and parquet, the Arrow path
    for jsonl, the same rows in each."""
    source = lake.source()
    store = InMemoryMetadataStore()
    sql = (
        f"SELECT p.id, c.name FROM '{lake.folder}/*.parquet' p"
        f" JOIN read_csv('{lake.folder}/people.csv') c USING (id) ORDER BY p.id"
    )
    store.add_query(Query(str(uuid.uuid4()), "w1", "joined", sql, "lake"))
    deps = container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"lake": source}),
        clock=SystemClock(),
        settings=lake.settings,
    )
    try:
        record = record_request(
            deps.exports,
            deps.catalog,
            deps.clock,
            ALICE,
            RequestExport(SubjectRef("query", "joined", by_name=True), fmt),
        )
        Worker(deps, worker_id="w").run_once()
        final = deps.exports.get_export(record.id)
        assert final is not None
        assert final.status is Status.SUCCEEDED, final.failure_detail
        assert final.row_count == 2
        with deps.objects.open(record.storage_key) as body:
            data = body.read()
    finally:
        source.close()
    if fmt == "csv":
        assert data == b"id,name\r\n1,Ann\r\n2,Bo\r\n"
    elif fmt == "parquet":
        assert pq.read_table(io.BytesIO(data)).to_pylist() == [
            {"id": 1, "name": "Ann"},
            {"id": 2, "name": "Bo"},
        ]
    else:
        assert [json.loads(line) for line in data.splitlines()] == [
            {"id": 1, "name": "Ann"},
            {"id": 2, "name": "Bo"},
        ]
