"""The failure detail people read (`readable_detail`), from real DuckDB and PostgreSQL errors:
no caret art, no suggestion naming the engine's catalogue, at most two sentences, the
position in words kept; and the export's events keep the engine's words."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import READABLE_MAX_CHARS, QueryInvalidError, readable_detail
from qexport.sources.duckdb.source import DuckDBSource
from tests.integration.test_postgres_source import Database, MemorySink, csv_of, database, rows_of

__all__ = ["database"]  # the PostgreSQL source's fixture

REQUESTER = Requester(user_id="user-7", workspace_id="acme")
CONVERSION = "SELECT id,\n  'not a number'::INTEGER AS n FROM orders"
MISSING_WITH_INTERNAL_SUGGESTION = "SELECT *\nFROM no_such_table"
MISSING_WITH_USEFUL_SUGGESTION = "SELECT * FROM ordrs"
SYNTAX = "SELECT id FROM orders WHERE"


def _sentences(text: str) -> int:
    return len(re.findall(r"[.!?](?:\s|$)", text + " ")) or 1


def _assert_readable(text: str) -> None:
    assert text
    assert "LINE" not in text
    assert "^" not in text
    assert "\n" not in text
    assert len(text) <= READABLE_MAX_CHARS
    assert _sentences(text) <= 2, text


@pytest.fixture
def orders_duck(tmp_path: Path) -> Iterator[DuckDBSource]:
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE orders AS SELECT i AS id FROM range(3) t(i)")
    source = DuckDBSource("shop", path)
    yield source
    source.close()


def _drain(source: DuckDBSource, sql: str) -> None:
    stream = source.execute(sql, {}, REQUESTER, timeout_seconds=30)
    try:
        for _ in stream:
            pass
    finally:
        stream.close()


def _duck_stream_error(source: DuckDBSource, sql: str) -> QueryInvalidError:
    with pytest.raises(QueryInvalidError) as caught:
        _drain(source, sql)
    return caught.value


def _duck_copy_error(source: DuckDBSource, sql: str) -> QueryInvalidError:
    with pytest.raises(QueryInvalidError) as caught:
        source.copy(
            sql,
            {},
            REQUESTER,
            fmt="csv",
            neutralize_formulas=True,
            sink=MemorySink(),
            timeout_seconds=30,
            max_rows=100,
        )
    return caught.value


def _raw_duckdb(sql: str) -> str:
    """DuckDB's own message, caret art and all, as another adapter might pass it on."""
    con = duckdb.connect()
    con.execute("CREATE TABLE orders AS SELECT 1 AS id")
    try:
        con.execute(sql).fetchall()
    except duckdb.Error as exc:
        return str(exc)
    finally:
        con.close()
    raise AssertionError(f"{sql!r} ran")


@pytest.mark.parametrize("run", [_duck_stream_error, _duck_copy_error])
def test_duckdb_errors_read_cleanly_by_either_path(orders_duck: DuckDBSource, run: Any) -> None:
    """A conversion error, a missing table DuckDB answers with "Did you mean "pg_tables"?",
    and a syntax error: each detail is readable; the internal suggestion is gone, a useful
    one ("orders" for "ordrs") is kept."""
    conversion = readable_detail(run(orders_duck, CONVERSION).detail)
    _assert_readable(conversion)
    assert conversion.startswith("Conversion Error: Could not convert string")
    assert "not a number" not in conversion  # a value is row data
    missing = readable_detail(run(orders_duck, MISSING_WITH_INTERNAL_SUGGESTION).detail)
    _assert_readable(missing)
    assert "no_such_table does not exist" in missing
    assert "pg_tables" not in missing
    assert "Did you mean" not in missing
    useful = readable_detail(run(orders_duck, MISSING_WITH_USEFUL_SUGGESTION).detail)
    _assert_readable(useful)
    assert 'Did you mean "orders"?' in useful
    syntax = readable_detail(run(orders_duck, SYNTAX).detail)
    _assert_readable(syntax)
    assert 'syntax error at or near "WHERE"' in syntax


def test_duckdb_caret_art_is_removed_from_its_raw_message() -> None:
    """DuckDB's message as it raises it (`LINE 2: ...` and a line of carets), and the same
    squeezed into one stored paragraph, read as the headline only."""
    raw = _raw_duckdb(MISSING_WITH_INTERNAL_SUGGESTION)
    assert "LINE 2:" in raw
    assert "^^^" in raw
    for text in (raw, " ".join(raw.split())):
        cleaned = readable_detail(text)
        _assert_readable(cleaned)
        assert cleaned == "Catalog Error: Table with name no_such_table does not exist!"


def test_a_long_duckdb_message_keeps_two_sentences() -> None:
    """A function mismatch lists every candidate signature: people read the headline and
    its hint, not the list."""
    raw = _raw_duckdb("SELECT strftime(1)")
    assert "Candidate functions" in raw
    cleaned = readable_detail(raw)
    _assert_readable(cleaned)
    assert cleaned.endswith("You might need to add explicit type casts.")
    settings_hint = readable_detail(_raw_duckdb("SELECT (SELECT 1 UNION SELECT 2)"))
    assert "SET" not in settings_hint  # an engine setting is not the author's to change
    assert settings_hint.startswith("Invalid Input Error: More than one row returned")


@pytest.mark.parametrize("run", [rows_of, csv_of])
def test_postgresql_errors_read_cleanly_by_either_path(database: Database, run: Any) -> None:
    """A conversion error, a missing table and a syntax error from the PostgreSQL source."""
    cases = {
        "SELECT body::int FROM docs": "invalid input syntax for type integer",
        "SELECT * FROM no_such_table": 'relation "no_such_table" does not exist',
        "SELECT id + * 2 FROM docs": 'syntax error at or near "*"',
    }
    for sql, expected in cases.items():
        with pytest.raises(QueryInvalidError) as caught:
            run(database.source(), sql)
        cleaned = readable_detail(caught.value.detail)
        _assert_readable(cleaned)
        assert expected in cleaned


def test_postgresql_caret_art_in_its_full_message_is_removed(database: Database) -> None:
    """psycopg's full message carries `LINE 1: ...` and a caret, as a source adapter that
    passes `str(exc)` on would store it: the readable detail is the server's headline."""
    with psycopg.connect(database.url) as con, pytest.raises(psycopg.Error) as caught:
        con.execute("SELECT *\nFROM no_such_table")
    raw = str(caught.value)
    assert "LINE 2:" in raw
    assert "^" in raw
    for text in (raw, " ".join(raw.split())):
        assert readable_detail(text) == 'relation "no_such_table" does not exist'
