"""The DuckDB source on a real database file: streaming, binding, sandbox, errors, timeout."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import (
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.sources.duckdb.source import BATCH_ROWS, DuckDBSource, connect_sandboxed

REQUESTER = Requester(user_id="user-7", workspace_id="acme")


@pytest.fixture
def duckdb_path(tmp_path: Path) -> Path:
    path = tmp_path / "source.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE items AS SELECT * FROM (VALUES"
        " (1, 'apple', 'acme', 'user-7'),"
        " (2, 'pear', 'acme', 'user-8'),"
        " (3, 'plum', 'demo', 'user-9'),"
        " (4, 'x'' OR ''1''=''1', 'acme', 'user-7')"
        ") AS t(id, name, workspace_id, owner)"
    )
    con.close()
    return path


@pytest.fixture
def duckdb_source(duckdb_path: Path) -> Iterator[DuckDBSource]:
    duckdb_source = DuckDBSource("warehouse", duckdb_path)
    yield duckdb_source
    duckdb_source.close()


def _rows(
    source: DuckDBSource, sql: str, parameters: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    stream = source.execute(sql, parameters or {}, REQUESTER, timeout_seconds=30)
    try:
        rows: list[dict[str, Any]] = pa.Table.from_batches(
            list(stream), schema=stream.schema
        ).to_pylist()
        return rows
    finally:
        stream.close()


def _drain(source: DuckDBSource, sql: str, *, timeout_seconds: float = 5) -> None:
    stream = source.execute(sql, {}, REQUESTER, timeout_seconds=timeout_seconds)
    try:
        for _batch in stream:
            pass
    finally:
        stream.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_large_result_streams_in_several_batches(duckdb_source: DuckDBSource) -> None:
    """A result bigger than one batch arrives as several bounded record batches."""
    rows = 3 * BATCH_ROWS + 5
    stream = duckdb_source.execute(
        "SELECT range AS n, 'row ' || range AS label FROM range($rows)",
        {"rows": rows},
        REQUESTER,
        timeout_seconds=30,
    )
    sizes = [batch.num_rows for batch in stream]
    stream.close()

    assert stream.schema.names == ["n", "label"]
    assert len(sizes) >= 4
    assert max(sizes) <= BATCH_ROWS
    assert sum(sizes) == rows


def test_parameter_values_are_bound_never_interpolated(duckdb_source: DuckDBSource) -> None:
    """An injection attempt is compared as a plain value and matches only that literal name."""
    rows = _rows(duckdb_source, "SELECT id FROM items WHERE name = $name", {"name": "x' OR '1'='1"})
    assert rows == [{"id": 4}]


def test_typed_parameter_values_keep_their_types(duckdb_source: DuckDBSource) -> None:
    """str, int, Decimal, date, bool and None bind as their SQL types."""
    rows = _rows(
        duckdb_source,
        "SELECT $s AS s, $i + 1 AS i, $d AS d, $day AS day, $flag AS flag, $nothing IS NULL AS n",
        {
            "s": "Zoë",
            "i": 41,
            "d": Decimal("12.34"),
            "day": date(2024, 2, 29),
            "flag": True,
            "nothing": None,
        },
    )
    assert rows == [
        {
            "s": "Zoë",
            "i": 42,
            "d": Decimal("12.34"),
            "day": date(2024, 2, 29),
            "flag": True,
            "n": True,
        }
    ]


def test_requester_context_is_bound_as_user_id_and_workspace_id(
    duckdb_source: DuckDBSource,
) -> None:
    """$user_id and $workspace_id carry the requester, so a query can restrict rows by them."""
    rows = _rows(
        duckdb_source,
        "SELECT id, $USER_ID AS who FROM items WHERE workspace_id = $workspace_id "
        "AND owner = $user_id ORDER BY id",
    )
    assert rows == [{"id": 1, "who": "user-7"}, {"id": 4, "who": "user-7"}]


def test_dollar_names_inside_string_literals_and_comments_are_not_parameters(
    duckdb_source: DuckDBSource,
) -> None:
    """Only real parameter markers are bound; '$user_id' in quotes stays text."""
    rows = _rows(duckdb_source, "SELECT '$user_id' AS literal -- and $workspace_id here\n")
    assert rows == [{"literal": "$user_id"}]


def test_parameters_the_statement_does_not_use_are_ignored(duckdb_source: DuckDBSource) -> None:
    """A report's shared parameters may include some a given query does not mention."""
    rows = _rows(
        duckdb_source, "SELECT count(*) AS n FROM items WHERE id > $min", {"min": 1, "max": 9}
    )
    assert rows == [{"n": 3}]


@pytest.mark.parametrize("name", ["user_id", "WORKSPACE_ID"])
def test_a_query_parameter_may_not_shadow_the_requester_context(
    duckdb_source: DuckDBSource, name: str
) -> None:
    """Passing user_id/workspace_id as a query parameter would impersonate someone: refused."""
    with pytest.raises(QueryInvalidError, match="reserved"):
        duckdb_source.execute(
            "SELECT $user_id", {name: "someone-else"}, REQUESTER, timeout_seconds=5
        )


def test_a_missing_parameter_value_is_named(duckdb_source: DuckDBSource) -> None:
    """A parameter without a value is query_invalid and the message names it."""
    with pytest.raises(QueryInvalidError, match=r"\$since"):
        duckdb_source.execute(
            "SELECT * FROM items WHERE id > $since", {}, REQUESTER, timeout_seconds=5
        )


def test_positional_parameters_are_refused(duckdb_source: DuckDBSource) -> None:
    """Only named parameters are supported, with a message saying how to write them."""
    with pytest.raises(QueryInvalidError, match="named"):
        duckdb_source.execute("SELECT * FROM items WHERE id = ?", {}, REQUESTER, timeout_seconds=5)


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("INSERT INTO items VALUES (9, 'new', 'acme', 'me')", "got INSERT"),
        ("UPDATE items SET name = 'x'", "got UPDATE"),
        ("DELETE FROM items", "got DELETE"),
        ("DROP TABLE items", "got DROP"),
        ("CREATE TABLE stolen AS SELECT * FROM items", "got CREATE"),
        ("COPY items TO '{out}'", "got COPY"),
        ("ATTACH '{other}' AS other", "got ATTACH"),
        ("INSTALL httpfs", "allowed"),
        ("LOAD httpfs", "allowed"),
        ("UPDATE EXTENSIONS", "got a statement of another kind"),  # unknown to the binding
        ("SET enable_external_access = true", "got SET"),
        ("PRAGMA version", "got PRAGMA"),
        ("CALL pragma_version()", "got CALL"),
        ("SELECT 1; DROP TABLE items", "got 2 statements"),
        ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
        ("SELECT * FROM read_text('/etc/passwd')", "read_text"),
        ("SELECT * FROM glob('/*')", "glob"),
        ("SELECT * FROM '/etc/passwd'", "/etc/passwd"),
        ("SELECT * FROM read_parquet('{out}')", "read_parquet"),
    ],
)
def test_every_sandbox_escape_is_refused_and_changes_nothing(
    duckdb_source: DuckDBSource, duckdb_path: Path, tmp_path: Path, sql: str, reason: str
) -> None:
    """Writes, file access, attaching, extensions: all query_invalid, and the file is unchanged."""
    out, other = tmp_path / "leak.csv", tmp_path / "other.duckdb"
    before = _digest(duckdb_path)

    with pytest.raises(QueryInvalidError, match=reason):
        _drain(duckdb_source, sql.format(out=out, other=other))

    assert _digest(duckdb_path) == before
    assert not out.exists()
    assert not other.exists()
    assert _rows(duckdb_source, "SELECT count(*) AS n FROM items") == [{"n": 4}]


def test_configuration_stays_locked_for_every_query(duckdb_path: Path, tmp_path: Path) -> None:
    """The sandbox settings are in force and locked, so no statement can loosen them."""
    con = connect_sandboxed(duckdb_path, tmp_path)
    try:
        rows = con.execute(
            "SELECT current_setting('enable_external_access'), "
            "current_setting('lock_configuration')"
        ).fetchall()
        assert rows == [(False, True)]
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()


ESCAPES = [
    "SELECT * FROM glob(current_setting('temp_directory') || '/*')",
    "SELECT * FROM glob('{scratch}/pipes/*')",
    "SELECT * FROM GLOB('{scratch}/*')",
    "SELECT * FROM main.glob('{scratch}/spill/**')",
    "SELECT * FROM system.main.glob('{scratch}/*')",
    "SELECT * FROM read_blob('{scratch}/spill/duckdb/*')",
    "SELECT * FROM read_text('{db}')",
    "SELECT * FROM read_csv('{scratch}/pipes/x.csv')",
    "SELECT * FROM read_csv_auto('{scratch}/pipes/x.csv')",
    "SELECT * FROM read_json('{scratch}/pipes/x.json')",
    "SELECT * FROM read_ndjson_objects('{scratch}/pipes/x.json')",
    "SELECT * FROM read_parquet('{scratch}/pipes/x.parquet')",
    "SELECT * FROM parquet_scan('{scratch}/pipes/x.parquet')",
    "SELECT * FROM parquet_metadata('{scratch}/pipes/x.parquet')",
    "SELECT * FROM sniff_csv('{scratch}/pipes/x.csv')",
    "SELECT * FROM read_duckdb('{db}')",
    "SELECT * FROM query('SELECT * FROM glob(''/*'')')",
    "SELECT * FROM '{scratch}/pipes/x.csv'",
    'SELECT * FROM "{scratch}/pipes/x.csv"',
    'SELECT * FROM "x.csv"',
    "SELECT * FROM main.csv",
    "SELECT * FROM items JOIN '{db}' USING (id)",
    "DESCRIBE '{db}'",
    "SUMMARIZE '{scratch}/pipes/x.csv'",
    "SELECT current_setting('temp_directory') AS dir",
    "SELECT upper(CURRENT_SETTING('allowed_directories')[1]) AS dir",
    "SELECT list_transform([1], x -> current_setting('temp_directory')) AS dirs",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_databases()",
    "SELECT * FROM duckdb_databases",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM pg_catalog.pg_settings",
    "SELECT * FROM duckdb_temporary_files()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT json_serialize_plan('SELECT * FROM glob(''/*'')') AS plan",
    "WITH x AS (SELECT * FROM glob('/*')) SELECT * FROM items",
    "SELECT id, (SELECT count(*) FROM read_blob('{db}')) AS n FROM items",
    "SELECT * FROM items WHERE name IN (SELECT content FROM read_text('{db}'))",
    "SELECT * FROM items, LATERAL (SELECT * FROM glob('/*'))",
    "SELECT * FROM items UNION ALL SELECT 1, file, '', '' FROM glob('/*')",
]


@pytest.mark.parametrize("sql", ESCAPES)
def test_no_query_reads_files_or_learns_the_servers_paths(
    duckdb_source: DuckDBSource, duckdb_path: Path, sql: str
) -> None:
    """File readers, listers, replacement scans and the settings and views that show paths are
    refused before anything runs, wherever they hide in the statement."""
    assert _rows(duckdb_source, "SELECT count(*) AS n FROM items") == [{"n": 4}]  # scratch made
    scratch = duckdb_source.scratch_root
    assert scratch is not None
    with pytest.raises(QueryInvalidError, match="is not allowed: queries may not read files"):
        _drain(duckdb_source, sql.format(scratch=scratch, db=duckdb_path))


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("SELECT * FROM Main.Glob('/x')", "glob"),
        ("SELECT current_setting('temp_directory')", "current_setting"),
        ("SELECT * FROM '/etc/passwd'", "'/etc/passwd'"),
        ("SELECT * FROM main.csv", "'main.csv'"),
        ("SELECT * FROM pragma_database_list", "pragma_database_list"),
    ],
)
def test_the_refusal_names_what_it_refuses(
    duckdb_source: DuckDBSource, sql: str, named: str
) -> None:
    """The message names the function or file reference, so the author knows what to change."""
    with pytest.raises(QueryInvalidError) as caught:
        _drain(duckdb_source, sql)
    assert named in caught.value.detail.lower()
    assert "may not read files" in caught.value.detail


ORDINARY = {
    "join": "SELECT a.id, b.name FROM items a JOIN main.items b USING (id) ORDER BY a.id",
    "cte": "WITH acme AS (SELECT * FROM items WHERE workspace_id = 'acme') "
    "SELECT count(*) FROM acme",
    "window": "SELECT id, row_number() OVER (PARTITION BY workspace_id ORDER BY id) FROM items",
    "range": "SELECT range AS n FROM range(3)",
    "generate_series": "SELECT * FROM generate_series(1, 3)",
    "unnest": "SELECT unnest([1, 2, 3]) AS n",
    "unnest_table": "SELECT * FROM unnest(['a', 'b'])",
    "strings": "SELECT upper(name), name || '/x.csv', regexp_replace(name, 'p', 'b') FROM items",
    "path_literal": "SELECT 'data/x.csv' AS not_a_file",
    "recursive": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
    "SELECT sum(n) FROM r",
    "lambda": "SELECT list_transform([1, 2], lambda x: x * 2) AS doubled",
    "catalog": "SELECT table_name FROM information_schema.tables",
    "columns": "SELECT column_name FROM duckdb_columns() WHERE table_name = 'items'",
    "qualified": "SELECT count(*) FROM source.main.items",
    "describe": "DESCRIBE items",
    "summarize": "SUMMARIZE items",
    "from_first": "FROM items SELECT id",
    "values": "SELECT * FROM (VALUES (1, 'a')) v(n, s)",
    "parameters": "SELECT * FROM items WHERE owner = $user_id",
}


@pytest.mark.parametrize("sql", ORDINARY.values(), ids=ORDINARY.keys())
def test_ordinary_queries_still_run(duckdb_source: DuckDBSource, sql: str) -> None:
    """Joins, CTEs, window functions, range(), unnest, lambdas and the catalogue pass the check."""
    assert _rows(duckdb_source, sql)  # refused would raise; every one of them returns rows


def test_syntax_error_message_is_duckdbs_own(duckdb_source: DuckDBSource) -> None:
    """A syntax error is query_invalid and says where the parser stopped."""
    with pytest.raises(QueryInvalidError) as caught:
        duckdb_source.execute("SELEC id FROM items", {}, REQUESTER, timeout_seconds=5)
    assert 'syntax error at or near "SELEC"' in caught.value.detail
    assert "Traceback" not in caught.value.detail


def test_unknown_column_is_query_invalid_with_the_binders_message(
    duckdb_source: DuckDBSource,
) -> None:
    """A binder error names the missing column."""
    with pytest.raises(QueryInvalidError, match="colour"):
        duckdb_source.execute("SELECT colour FROM items", {}, REQUESTER, timeout_seconds=5)


def test_an_error_raised_while_streaming_is_query_invalid(duckdb_source: DuckDBSource) -> None:
    """A conversion failing after some batches were read still settles query_invalid."""
    stream = duckdb_source.execute(
        "SELECT CASE WHEN range < 300000 THEN range ELSE ('x' || range)::BIGINT END AS v "
        "FROM range(400000)",
        {},
        REQUESTER,
        timeout_seconds=30,
    )
    with pytest.raises(QueryInvalidError, match="Could not convert"):
        for _batch in stream:
            pass


def test_an_empty_query_is_query_invalid(duckdb_source: DuckDBSource) -> None:
    """Whitespace or a lone comment is not a statement."""
    with pytest.raises(QueryInvalidError, match="empty"):
        duckdb_source.execute("  -- nothing\n", {}, REQUESTER, timeout_seconds=5)


def test_a_slow_statement_hits_the_statement_timeout(duckdb_source: DuckDBSource) -> None:
    """A statement still running at the deadline is interrupted: query_timeout."""
    with pytest.raises(QueryTimeoutError, match=r"statement timeout of 0\.5 s reached"):
        _drain(
            duckdb_source,
            "SELECT count(*) FROM range(1000000000) a, range(1000000000) b",
            timeout_seconds=0.5,
        )


def test_the_timeout_also_covers_reading_the_stream(duckdb_source: DuckDBSource) -> None:
    """A result read past the deadline is interrupted mid-stream: query_timeout."""
    stream = duckdb_source.execute(
        "SELECT range AS n, md5(range::VARCHAR) AS h FROM range(100000000000)",
        {},
        REQUESTER,
        timeout_seconds=0.5,
    )
    with pytest.raises(QueryTimeoutError):
        for _batch in stream:
            pass


def test_closing_a_stream_early_releases_it(duckdb_source: DuckDBSource) -> None:
    """A stream closed after one batch stops its query; the source keeps working."""
    stream = duckdb_source.execute(
        "SELECT range AS n FROM range(100000000000)", {}, REQUESTER, timeout_seconds=0.5
    )
    first = next(iter(stream))
    stream.close()
    stream.close()

    assert first.num_rows > 0
    assert _rows(duckdb_source, "SELECT 1 AS one") == [{"one": 1}]


def test_a_missing_database_is_source_unavailable(tmp_path: Path) -> None:
    """Construction connects to nothing; the first query finds the file missing."""
    source = DuckDBSource("gone", tmp_path / "missing.duckdb")
    with pytest.raises(SourceUnavailableError, match="gone"):
        source.execute("SELECT 1", {}, REQUESTER, timeout_seconds=5)
    assert not (tmp_path / "missing.duckdb").exists()


def test_a_file_that_is_not_a_database_is_source_unavailable(tmp_path: Path) -> None:
    """An unreadable database file is an unavailable source, not a query error."""
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(SourceUnavailableError):
        DuckDBSource("garbage", path).execute("SELECT 1", {}, REQUESTER, timeout_seconds=5)


def test_a_second_source_on_the_same_file_says_so(
    duckdb_source: DuckDBSource, duckdb_path: Path
) -> None:
    """Two sources on one DuckDB file in one process: DuckDB would hand the second the first's
    instance, sandboxed around the first's folders. The second is refused with the reason and
    the way out (share the first); the first reads on."""
    assert _rows(duckdb_source, "SELECT count(*) AS n FROM items") == [{"n": 4}]
    second = DuckDBSource("warehouse_b", duckdb_path)
    try:
        with pytest.raises(SourceUnavailableError) as refused:
            second.execute("SELECT 1", {}, REQUESTER, timeout_seconds=5)
    finally:
        second.close()
    assert "'warehouse_b'" in str(refused.value)
    assert "its file is already open in this process through another source" in str(refused.value)
    assert str(duckdb_path) not in str(refused.value)  # where the file is: the operator's log only
    assert "qexport sources share" in str(refused.value)
    assert _rows(duckdb_source, "SELECT count(*) AS n FROM items") == [{"n": 4}]


def test_concurrent_exports_each_read_their_own_rows(duckdb_source: DuckDBSource) -> None:
    """Several threads streaming at once each get exactly their own result."""
    totals: dict[int, int] = {}
    errors: list[BaseException] = []

    def export(k: int) -> None:
        try:
            stream = duckdb_source.execute(
                "SELECT range * $k AS v FROM range(200000)",
                {"k": k},
                Requester(f"user-{k}", "acme"),
                timeout_seconds=30,
            )
            totals[k] = sum(pc.sum(batch["v"]).as_py() for batch in stream)
            stream.close()
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=export, args=(k,)) for k in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    base = sum(range(200000))
    assert totals == {k: k * base for k in range(1, 5)}


def test_a_negative_timeout_is_a_programming_error(duckdb_source: DuckDBSource) -> None:
    """timeout_seconds must be >= 0 (0 means no limit)."""
    with pytest.raises(ValueError, match="timeout_seconds"):
        duckdb_source.execute("SELECT 1", {}, REQUESTER, timeout_seconds=-1)


def _replace_database(path: Path, label: str) -> None:
    """Build a new database beside `path` and move it into place, as the demo rebuild does."""
    building = path.with_name(f".{path.name}.building")
    con = duckdb.connect(str(building))
    con.execute("CREATE TABLE items AS SELECT 1 AS id, $label AS name", {"label": label})
    # A view the file brings along reads a file: past the statement check, the sandbox stops it.
    con.execute("CREATE VIEW leak AS SELECT content FROM read_text('/etc/hostname')")
    con.close()
    building.replace(path)


def test_a_replaced_database_file_is_read_by_the_next_export(
    duckdb_source: DuckDBSource, duckdb_path: Path
) -> None:
    """The source keeps its database open between exports, yet a file moved into place is what
    the next export reads, once no export still reads the old file; the old one is read to
    its end by the export that had started on it."""
    assert len(_rows(duckdb_source, "SELECT * FROM items")) == 4
    reading = duckdb_source.execute(
        "SELECT name FROM items ORDER BY id", {}, REQUESTER, timeout_seconds=30
    )

    _replace_database(duckdb_path, "new")
    # An export still reads the old file: the next one does too (DuckDB would hand out the
    # instance open on that path), and the old export finishes on it.
    assert len(_rows(duckdb_source, "SELECT * FROM items")) == 4
    assert pa.Table.from_batches(list(reading), schema=reading.schema).num_rows == 4
    reading.close()

    assert _rows(duckdb_source, "SELECT name FROM items") == [{"name": "new"}]
    with pytest.raises(QueryInvalidError, match="Permission Error"):  # reopened sandboxed
        _rows(duckdb_source, "SELECT * FROM leak")
    _replace_database(duckdb_path, "newer")
    assert _rows(duckdb_source, "SELECT name FROM items") == [{"name": "newer"}]
