"""Both sources preview a statement on real data: the first rows with the engine's types, the
tricky values exact (DECIMAL/numeric, TIMESTAMPTZ, BLOB/bytea, NaN, NULL, long text), read no
further than shown, with the same checks, binding and requester context as an export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
import sqlalchemy as sa

from qexport.domain.exports import Requester
from qexport.domain.failures import QueryInvalidError, QueryTimeoutError
from qexport.ports import PreviewRows, Source
from qexport.sources.duckdb.preview import without_trailing
from qexport.sources.duckdb.source import DuckDBSource
from qexport.writers.cells import CUT_MARK, preview_cells
from tests.integration.test_postgres_source import HOSTILE, Database, database

__all__ = ["database"]

ALICE = Requester("alice", "w1")
BOB = Requester("bob", "w1")
LONG = 5_000  # characters of the long text, far past the cap below
CAP = 100

DUCK_TRICKY = f"""
CREATE TABLE tricky AS SELECT * FROM (VALUES
    (1, 12345678.90::DECIMAL(10, 2), TIMESTAMPTZ '2024-05-01 12:30:00+02', '\\x00\\xFF'::BLOB,
     'nan'::DOUBLE, NULL::VARCHAR, repeat('é', {LONG})),
    (2, -0.01::DECIMAL(10, 2), NULL, NULL, 'inf'::DOUBLE, 'plain', 'short'),
    (3, NULL, TIMESTAMPTZ '1999-12-31 23:59:59.5+00', ''::BLOB, 0.1::DOUBLE, '', NULL)
) t(id, amount, stamp, raw, ratio, maybe, body)
"""
PG_TRICKY = f"""
CREATE TABLE tricky (id int, amount numeric(10, 2), stamp timestamptz, raw bytea, ratio float8,
    maybe text, body text);
INSERT INTO tricky VALUES
    (1, 12345678.90, '2024-05-01 12:30:00+02', '\\x00ff', 'NaN', NULL, repeat('é', {LONG})),
    (2, -0.01, NULL, NULL, 'Infinity', 'plain', 'short'),
    (3, NULL, '1999-12-31 23:59:59.5+00', '', 0.1, '', NULL);
"""
EXPECTED = [
    [
        1,
        "12345678.90",
        "2024-05-01T10:30:00.000000+00:00",
        "\\x00ff",
        "NaN",
        None,
        "é" * CAP + CUT_MARK,
    ],
    [2, "-0.01", None, None, "Infinity", "plain", "short"],
    [3, None, "1999-12-31T23:59:59.500000+00:00", "\\x", 0.1, "", None],
]


@pytest.fixture
def tricky_duck(tmp_path: Path) -> Iterator[DuckDBSource]:
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(DUCK_TRICKY)
        con.execute(
            "CREATE TABLE docs AS SELECT i AS id, 'alice' AS owner, 'body ' || i AS body"
            " FROM range(1000) t(i)"
        )
    source = DuckDBSource("shop", path)
    yield source
    source.close()


@pytest.fixture(scope="module")
def pg_tricky(database: Database) -> Database:
    reader = sa.make_url(database.url).username
    with psycopg.connect(database.admin_url, autocommit=True) as conn:
        conn.execute(PG_TRICKY)
        conn.execute(f'GRANT SELECT ON tricky TO "{reader}"')
    return database


@pytest.fixture(params=["duckdb", "postgresql"])
def tricky_source(request: pytest.FixtureRequest) -> Source:
    """A DuckDB file and a PostgreSQL database, each with the table `tricky`."""
    if request.param == "duckdb":
        source: Source = request.getfixturevalue("tricky_duck")
        return source
    db: Database = request.getfixturevalue("pg_tricky")
    return db.source()


def _preview(
    source: Source,
    sql: str,
    requester: Requester = ALICE,
    *,
    max_rows: int = 10,
    max_bytes: int = 1_000_000,
    timeout_seconds: float = 10,
    **parameters: Any,
) -> PreviewRows:
    return source.preview(
        sql,
        parameters,
        requester,
        timeout_seconds=timeout_seconds,
        max_rows=max_rows,
        max_cell_chars=CAP,
        max_bytes=max_bytes,
    )


def test_tricky_values_come_back_exact(tricky_source: Source) -> None:
    """Decimals with every digit, aware timestamps in UTC with their offset, binary as hex,
    NaN and infinity as text, NULL apart from the empty string, a long text cut with the
    mark; strict JSON throughout."""
    read = _preview(tricky_source, "SELECT * FROM tricky ORDER BY id")
    cells = preview_cells(read.table, max_chars=CAP, max_bytes=1_000_000)
    assert cells.rows == EXPECTED
    assert cells.cut == 1
    assert not read.more
    json.dumps(cells.rows, allow_nan=False)


def test_the_columns_carry_the_engines_type_names(
    tricky_source: Source, tricky_duck: Source
) -> None:
    """The preview names each column's type as the engine does (as describe does)."""
    read = _preview(tricky_source, "SELECT id, amount, stamp, raw FROM tricky")
    types = [c.type for c in read.columns]
    if tricky_source is tricky_duck:
        assert types == ["INTEGER", "DECIMAL(10,2)", "TIMESTAMP WITH TIME ZONE", "BLOB"]
    else:
        assert types == ["integer", "numeric(10,2)", "timestamp with time zone", "bytea"]


def test_long_values_are_cut_in_the_engine(tricky_source: Source, tricky_duck: Source) -> None:
    """A long text arrives cut to the cap plus one character (so it reads as longer), binary
    to the cap plus one byte, a nested value as its text cut the same: the engine never hands
    over more than is shown (a 50 MB text a row made a DuckDB batch of 500 MB before)."""
    if tricky_source is tricky_duck:
        sql = (
            "SELECT repeat('x', 100000) AS t, repeat('\\xAB'::BLOB, 100000) AS b,"
            " [repeat('n', 100000)] AS l"
        )
    else:
        sql = (
            "SELECT repeat('x', 100000) AS t, decode(repeat('ab', 100000), 'hex') AS b,"
            " ARRAY[repeat('n', 100000)] AS l"
        )
    read = _preview(tricky_source, sql)
    assert read.table.column("t").to_pylist() == ["x" * (CAP + 1)]
    assert read.table.column("b").to_pylist() == [b"\xab" * (CAP + 1)]
    (nested,) = read.table.column("l").to_pylist()
    assert len(nested) == CAP + 1
    assert nested.startswith(('["nnn', "{nnn"))


def test_only_the_rows_shown_are_read(tricky_source: Source, tricky_duck: Source) -> None:
    """A billion-row statement previews at once: it stops one row past the limit, and says
    more rows follow. (Read whole, it would run into the timeout instead.)"""
    sql = (
        "SELECT i FROM range(1000000000) t(i)"
        if tricky_source is tricky_duck
        else "SELECT generate_series(1, 1000000000) AS i"
    )
    read = _preview(tricky_source, sql, max_rows=5, timeout_seconds=20)
    assert read.table.num_rows == 5
    assert read.more
    exact = _preview(tricky_source, "SELECT * FROM tricky", max_rows=3)
    assert exact.table.num_rows == 3
    assert not exact.more


def test_reading_stops_at_the_byte_bound(tricky_source: Source, tricky_duck: Source) -> None:
    """Past `max_bytes` of values the source stops reading (a few rows at a time) and says
    there is more: sixty columns of cut text make rows of some 6 KB."""
    wide = ", ".join(f"repeat('y', 500) AS c{i}" for i in range(60))
    rows = "range(100) t(i)" if tricky_source is tricky_duck else "generate_series(1, 100)"
    read = _preview(tricky_source, f"SELECT {wide} FROM {rows}", max_rows=50, max_bytes=20_000)
    assert 1 <= read.table.num_rows < 50
    assert read.more
    assert {len(v) for v in read.table.column("c0").to_pylist()} == {CAP + 1}


def test_parameters_are_bound_never_interpolated(tricky_source: Source) -> None:
    """A hostile value (quotes, `; DROP TABLE`, dollar quotes) comes back as itself and
    matches nothing; the table is still there."""
    read = _preview(tricky_source, "SELECT $p AS p", p=HOSTILE)
    assert read.table.column("p").to_pylist() == [HOSTILE]
    read = _preview(tricky_source, "SELECT id FROM tricky WHERE maybe = $p", p=HOSTILE)
    assert read.table.num_rows == 0
    assert _preview(tricky_source, "SELECT count(*) AS n FROM tricky").table.to_pylist() == [
        {"n": 3}
    ]


def test_the_requester_context_is_bound(tricky_source: Source) -> None:
    """$user_id and $workspace_id are the requester's, as in an export."""
    read = _preview(tricky_source, "SELECT $user_id AS u, $workspace_id AS w", BOB)
    assert read.table.to_pylist() == [{"u": "bob", "w": "w1"}]


def test_postgres_row_level_security_applies(pg_tricky: Database) -> None:
    """The policy that gives each requester their own rows in an export does in a preview."""
    sql = "SELECT id FROM docs ORDER BY id"
    assert _preview(pg_tricky.source(), sql, ALICE).table.to_pylist() == [{"id": 1}]
    assert _preview(pg_tricky.source(), sql, BOB).table.to_pylist() == [{"id": 2}, {"id": 4}]


@pytest.mark.parametrize(
    "sql",
    ["DELETE FROM tricky", "SELECT 1; SELECT 2", "UPDATE tricky SET id = 9"],
    ids=["delete", "two statements", "update"],
)
def test_anything_but_one_select_is_refused(tricky_source: Source, sql: str) -> None:
    """The statement check of an export: query_invalid, nothing run."""
    with pytest.raises(QueryInvalidError, match="only a single SELECT"):
        _preview(tricky_source, sql)
    assert _preview(tricky_source, "SELECT count(*) AS n FROM tricky").table.to_pylist() == [
        {"n": 3}
    ]


def test_a_refused_statement_says_why(tricky_source: Source) -> None:
    """A missing table is query_invalid with the engine's words."""
    with pytest.raises(QueryInvalidError, match="no_such_table"):
        _preview(tricky_source, "SELECT * FROM no_such_table")


def test_the_timeout_ends_a_slow_preview(tricky_source: Source, tricky_duck: Source) -> None:
    """A statement that runs past the timeout is query_timeout."""
    sql = (
        "SELECT count(*) AS n FROM range(100000000000) t(i)"
        if tricky_source is tricky_duck
        else "SELECT pg_sleep(30) AS s"
    )
    with pytest.raises(QueryTimeoutError):
        _preview(tricky_source, sql, timeout_seconds=0.5)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 AS one -- the answer\n; -- done",
        "SELECT 1 AS one; /* done; */",
        "SELECT 1 AS one --",
    ],
    ids=["comment and semicolon", "block comment", "dangling comment"],
)
def test_a_trailing_semicolon_and_comment_are_accepted(tricky_source: Source, sql: str) -> None:
    """The text as people write it previews as it exports."""
    assert _preview(tricky_source, sql).table.to_pylist() == [{"one": 1}]


def test_duckdb_trims_only_what_trails() -> None:
    """A `;` or `--` inside a string or a dollar quote stays; only the statement's own tail
    goes."""
    assert without_trailing("SELECT ';' AS x ; -- é") == "SELECT ';' AS x"
    assert without_trailing("SELECT $$;--$$ AS d;") == "SELECT $$;--$$ AS d"
    assert without_trailing("SELECT 'é' AS x /* ; */ ;") == "SELECT 'é' AS x"
    assert without_trailing("SELECT 1") == "SELECT 1"
