"""Checking a query when it is saved, on the in-memory fakes: what the source's refusals
become, the values a statement is described with, and where DuckDB's caret points."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import (
    AccessLostError,
    InvalidRequestError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
    StatementRefusedError,
    TextPosition,
)
from qexport.domain.queries import Parameter, ParamType, ResultColumn
from qexport.services.describe import describe_statement, describe_timeout, describe_values
from qexport.sources.duckdb.errors import located
from tests.fakes.previews import InProcessPreviews
from tests.fakes.sources import FixedSources
from tests.unit.fakes import FakeSource

ANN = Requester("ann", "acme")


def _describe(source: FakeSource, *params: Parameter) -> tuple[ResultColumn, ...]:
    sources = FixedSources({"shop": source}, ["acme"])
    return describe_statement(
        sources,
        InProcessPreviews(sources),
        ANN,
        source="shop",
        sql="SELECT 1",
        parameters=params,
        timeout_seconds=5,
    ).columns


def test_the_described_columns_are_returned() -> None:
    """A source's description comes back as the query's columns, in order."""
    source = FakeSource(pa.table({"id": [1], "name": ["x"]}))
    assert _describe(source) == (ResultColumn("id", "int64"), ResultColumn("name", "string"))
    assert source.calls == [("SELECT 1", {}, ANN)]


def test_parameters_are_described_with_typed_values() -> None:
    """A default is coerced as a request's value would be; a parameter without one gets a
    value of its type, so the columns it feeds are typed."""
    values = describe_values(
        [
            Parameter("since", ParamType.DATE, required=False, default="2024-02-03"),
            Parameter("n", ParamType.INTEGER),
            Parameter("price", ParamType.NUMBER, required=False),
            Parameter("word", ParamType.STRING),
            Parameter("flag", ParamType.BOOLEAN),
        ]
    )
    assert values == {
        "since": dt.date(2024, 2, 3),
        "n": 0,
        "price": Decimal(0),
        "word": "",
        "flag": False,
    }


def test_a_refused_statement_is_refused_on_the_sql_field_with_its_position() -> None:
    """The source's message and position become a refusal of the `sql` field."""
    error = QueryInvalidError("syntax error (line 2, column 3)", position=TextPosition(2, 3))
    with pytest.raises(StatementRefusedError) as caught:
        _describe(FakeSource(error=error))
    assert caught.value.field == "sql"
    assert caught.value.position == TextPosition(2, 3)
    assert caught.value.detail == "syntax error (line 2, column 3)"


def test_a_describe_past_the_timeout_is_refused_on_the_sql_field() -> None:
    """A statement the source cannot describe in time is refused, naming the time."""
    with pytest.raises(StatementRefusedError, match="longer than 5 s"):
        _describe(FakeSource(error=QueryTimeoutError("statement timeout")))


@pytest.mark.parametrize(
    "error",
    [SourceUnavailableError("cannot be reached"), AccessLostError("refused qexport's login")],
)
def test_a_source_that_cannot_answer_refuses_the_save(error: Exception) -> None:
    """An unreachable source, or one refusing qexport's login: SourceUnavailableError
    saying the query was not saved (the caller answers 503)."""
    with pytest.raises(SourceUnavailableError, match="The query was not saved"):
        _describe(FakeSource(error=error))


def test_a_source_the_workspace_may_not_use_is_refused_on_the_source_field() -> None:
    """Another workspace's source: refused on `source`, and never asked."""
    source = FakeSource()
    with pytest.raises(InvalidRequestError) as caught:
        describe_statement(
            FixedSources({"shop": source}, ["other"]),
            InProcessPreviews(FixedSources({"shop": source}, ["other"])),
            ANN,
            source="shop",
            sql="SELECT 1",
            parameters=(),
            timeout_seconds=5,
        )
    assert caught.value.field == "source"
    assert source.calls == []


def test_the_describe_timeout_is_short() -> None:
    """At most 10 s, or the statement timeout when shorter; 10 s when there is none."""
    assert describe_timeout(300) == 10
    assert describe_timeout(2) == 2
    assert describe_timeout(0) == 10


def test_duckdbs_caret_becomes_a_line_and_column() -> None:
    """The caret art is dropped from the message; its place is counted in the SQL."""
    sql = "SELECT a\n  FORM t"
    message = 'Parser Error: syntax error at or near "t"\n\nLINE 2:   FORM t\n               ^'
    assert located(message, sql) == (
        'Parser Error: syntax error at or near "t" (line 2, column 8)',
        TextPosition(2, 8),
    )


def test_a_caret_in_a_cut_line_is_placed_in_the_whole_line() -> None:
    """DuckDB shows a long line cut, with "..."; the column is still the one in the SQL."""
    line = "SELECT " + ", ".join(f"c{i}" for i in range(200)) + " FORM t"
    at = line.index("FORM")
    shown = "..." + line[at - 20 : at + 7]
    message = f"Parser Error: syntax error\n\nLINE 1: {shown}\n{' ' * (8 + 23 + 5)}^"
    text, position = located(message, line)
    assert position == TextPosition(1, at + 6)
    assert text == "Parser Error: syntax error (line 1, column " + str(at + 6) + ")"


def test_a_message_without_a_caret_is_kept() -> None:
    """No caret, no position: the message as DuckDB wrote it."""
    assert located("Catalog Error: Table with name x does not exist!", "SELECT 1") == (
        "Catalog Error: Table with name x does not exist!",
        None,
    )
