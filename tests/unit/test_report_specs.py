"""Sections and fixed values written as text, as the CLI's options and the web form take them."""

from __future__ import annotations

import pytest

from qexport.domain.failures import InvalidRequestError
from qexport.domain.reports import (
    DEFAULT_ROW_CAP,
    Display,
    Section,
    display_spec,
    parse_fixed_spec,
    parse_section_spec,
)


def test_a_section_spec_reads_heading_query_display_and_an_optional_row_cap() -> None:
    """Parts are trimmed; the row cap defaults; the query is kept as written."""
    assert parse_section_spec(" Orders | orders | bar ") == Section(
        "Orders", "orders", display=Display.BAR, row_cap=DEFAULT_ROW_CAP
    )
    assert parse_section_spec("A|q-1|line|20").row_cap == 20


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("Only a heading", "expects HEADING|QUERY|DISPLAY[|ROW_CAP]"),
        ("A|orders|pie", "has an unknown display 'pie'"),
        ("A|orders|table|lots", "has a row cap 'lots' that is not a whole number"),
    ],
)
def test_a_malformed_section_spec_is_refused(spec: str, message: str) -> None:
    """The message reads after where the spec came from (`--section ...`, `Line 2 ...`)."""
    with pytest.raises(InvalidRequestError, match=message.replace("|", r"\|").replace("[", r"\[")):
        parse_section_spec(spec)


def test_a_fixed_value_names_a_section_from_one() -> None:
    """`N:NAME=VALUE` gives the index from 0; a section number out of range is refused."""
    assert parse_fixed_spec("2: since =2024-01-01", 2) == (1, "since", "2024-01-01")
    with pytest.raises(InvalidRequestError, match="names section 3; there are sections 1 to 2"):
        parse_fixed_spec("3:since=x", 2)
    with pytest.raises(InvalidRequestError, match="expects N:NAME=VALUE"):
        parse_fixed_spec("since=x", 2)


@pytest.mark.parametrize(
    ("display", "values", "series"),
    [
        ("line of revenue by category", ("revenue",), "category"),
        ("bar by country", (), "country"),
        ("bar of orders, revenue", ("orders", "revenue"), None),
        ("line of rate of return by desk", ("rate of return",), "desk"),
        ("line", (), None),
    ],
)
def test_a_chart_display_may_name_its_value_and_series_columns(
    display: str, values: tuple[str, ...], series: str | None
) -> None:
    """`DISPLAY of VALUES by SERIES` reads into the section's columns, and a section writes
    its display back the same way (the web form shows it so)."""
    section = parse_section_spec(f"Revenue|revenue_by_month|{display}|50")
    assert (section.values, section.series, section.row_cap) == (values, series, 50)
    assert display_spec(section) == display


def test_a_display_with_an_empty_value_column_is_refused() -> None:
    """`of revenue,` names an empty column: refused with the syntax."""
    with pytest.raises(InvalidRequestError, match="has an empty value column"):
        parse_section_spec("A|q|bar of revenue, by x")
