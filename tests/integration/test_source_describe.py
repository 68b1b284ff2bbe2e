"""Both sources describe a statement without running it: the columns and the engine's types
of a good query; for a bad one the engine's message with its line and column; the same
statement checks as an export, before anything is read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import QueryInvalidError, QueryTimeoutError, TextPosition
from qexport.domain.queries import ResultColumn
from qexport.ports import Source
from qexport.sources.duckdb.source import DuckDBSource
from tests.integration.test_postgres_source import Database, database

__all__ = ["database"]

ALICE = Requester("alice", "w1")


@pytest.fixture
def docs_duck(tmp_path: Path) -> Iterator[DuckDBSource]:
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE docs AS SELECT i AS id, 'alice' AS owner, 'w1' AS workspace,"
            " 'body' AS body FROM range(3) t(i)"
        )
    source = DuckDBSource("shop", path)
    yield source
    source.close()


@pytest.fixture(params=["duckdb", "postgresql"])
def docs_source(request: pytest.FixtureRequest) -> Source:
    """A DuckDB file and a PostgreSQL database, each with a table `docs`."""
    if request.param == "duckdb":
        source: Source = request.getfixturevalue("docs_duck")
        return source
    db: Database = request.getfixturevalue("database")
    return db.source()


def _describe(source: Source, sql: str, **parameters: Any) -> list[ResultColumn]:
    return source.describe(sql, parameters, ALICE, timeout_seconds=5)


def _refusal(source: Source, sql: str, **parameters: Any) -> QueryInvalidError:
    with pytest.raises(QueryInvalidError) as caught:
        _describe(source, sql, **parameters)
    return caught.value


def test_duckdb_describes_names_and_types(docs_duck: DuckDBSource) -> None:
    """DuckDB's own type names, a parameter typed by its value, the requester context bound."""
    columns = _describe(
        docs_duck,
        "SELECT id, body, $since AS since, $user_id AS me FROM docs WHERE id > $n",
        since=dt.date(2024, 1, 1),
        n=0,
    )
    assert columns == [
        ResultColumn("id", "BIGINT"),
        ResultColumn("body", "VARCHAR"),
        ResultColumn("since", "DATE"),
        ResultColumn("me", "VARCHAR"),
    ]


def test_postgres_describes_names_and_types(database: Database) -> None:
    """PostgreSQL's own type names with their modifiers (numeric(38,10)), a parameter typed
    by its value."""
    columns = _describe(
        database.source(),
        "SELECT id, exact, ratio, $since AS since FROM amounts WHERE id > $n",
        since=dt.date(2024, 1, 1),
        n=0,
    )
    assert columns == [
        ResultColumn("id", "integer"),
        ResultColumn("exact", "numeric(38,10)"),
        ResultColumn("ratio", "double precision"),
        ResultColumn("since", "date"),
    ]


def test_describing_runs_nothing(database: Database) -> None:
    """A function that writes and a sequence are planned, never called: the counter and the
    sequence stay where they were."""
    before = database.scalar("SELECT n FROM counters")
    columns = _describe(database.source(), "SELECT bump() AS n, nextval('ticket') AS t")
    assert columns == [ResultColumn("n", "integer"), ResultColumn("t", "bigint")]
    assert database.scalar("SELECT n FROM counters") == before
    assert database.scalar("SELECT last_value FROM ticket") == 1
    assert database.scalar("SELECT is_called FROM ticket") is False


def test_a_huge_query_is_described_at_once(docs_source: Source) -> None:
    """A query over trillions of rows is described without computing any (well within the
    timeout, which would otherwise end it)."""
    sql = "SELECT count(*) AS n FROM generate_series(1, 1000000000000) AS t(i)"
    try:
        columns = _describe(docs_source, sql)
    except QueryTimeoutError:  # pragma: no cover - the failure this test is about
        pytest.fail("describing ran the query")
    assert [c.name for c in columns] == ["n"]


def test_a_syntax_error_has_the_engines_message_and_position(docs_source: Source) -> None:
    """The engine's words, and the line and column of the mistake in the query as written
    (after a parameter, whose value is longer than its name on PostgreSQL)."""
    error = _refusal(docs_source, "SELECT id, $n AS n\n  FROM docs WHERE ((", n=12345678)
    assert "syntax error" in error.detail
    assert error.position is not None
    assert error.position.line == 2
    assert f"(line 2, column {error.position.column})" in error.detail
    assert "^" not in error.detail


def test_a_missing_column_is_placed_after_a_parameter(database: Database) -> None:
    """PostgreSQL points at the unknown column; the place is counted in the query as written,
    not in the text with the parameter's value written in."""
    sql = "SELECT $word AS w, nope FROM docs"
    error = _refusal(database.source(), sql, word="a much longer value than the name")
    assert 'column "nope" does not exist' in error.detail
    assert error.position == TextPosition(1, sql.index("nope") + 1)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT * FROM no_such_table", "no_such_table"),
        ("DELETE FROM docs", "only a single SELECT statement is allowed; got DELETE"),
        (
            "SELECT * FROM docs WHERE id = $id",
            "the SQL uses $id, but the query declares no such parameter",
        ),
        ("SELECT 1; SELECT 2", "only a single SELECT statement is allowed; got 2 statements"),
    ],
)
def test_what_an_export_refuses_is_refused(docs_source: Source, sql: str, message: str) -> None:
    """A missing table, a DELETE, an unbound parameter, two statements."""
    assert message in _refusal(docs_source, sql).detail


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM '/etc/passwd'",
        "SELECT current_setting('temp_directory') AS t",
    ],
)
def test_duckdb_refuses_file_readers_before_describing(docs_duck: DuckDBSource, sql: str) -> None:
    """The file-access check comes first: a reader is refused by name and never bound (which
    would open the file)."""
    assert "is not allowed" in _refusal(docs_duck, sql).detail


def test_postgres_describes_with_the_sources_role(database: Database) -> None:
    """A table the source's role may not read is refused when described, as when exported."""
    error = _refusal(database.source(), "SELECT * FROM secrets")
    assert "permission denied" in error.detail


_HIDDEN = "COMMIT; UPDATE counters SET n = n + 100; SELECT * FROM (SELECT 1 AS a"


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT 1 AS a --\r) AS x; {_HIDDEN}",
        f"SELECT 1 AS a --\r\n) AS x; {_HIDDEN}",
        f"SELECT $\u20ac$'$\u20ac$ AS a) AS x; {_HIDDEN} --'",
        f"SELECT $\u0661$'$\u0661$ AS a) AS x; {_HIDDEN} --'",
        f"SELECT 1 AS \u00a0$b$) AS x; {_HIDDEN}, 2 AS \u00a0$b$",
    ],
    ids=[
        "comment-ended-by-cr",
        "comment-ended-by-crlf",
        "dollar-tag-euro",
        "dollar-tag-digit",
        "identifier-starting-with-nbsp",
    ],
)
def test_a_second_statement_hidden_from_the_check_is_refused(database: Database, sql: str) -> None:
    """PostgreSQL ends a `--` comment at a carriage return as at a line feed, and takes any
    non-ASCII character in a dollar quote's tag (`$€$...$€$`) or an identifier (a no-break
    space starts one, `\u00a0$b$`, rather than being blank before a `$b$` quote): what the
    check had read as a comment or a string literal is SQL there. A query that hides
    `COMMIT; UPDATE ...` so is refused when saved, and nothing is written (describing it
    once left the read-only transaction and ran the UPDATE with the source's role)."""
    before = database.scalar("SELECT n FROM counters")
    error = _refusal(database.source(), sql)
    assert "only a single SELECT statement is allowed" in error.detail
    assert database.scalar("SELECT n FROM counters") == before
