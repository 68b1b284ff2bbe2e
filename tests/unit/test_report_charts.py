"""Chart sections that group rows by a series column, and the scales they are drawn on."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from reportlab.graphics import renderPDF

from qexport.domain.failures import InvalidRequestError, RenderFailedError
from qexport.domain.reports import MAX_ROW_CAP, Display, Section, check_chart_columns
from qexport.reports.charts import EMPTY_SERIES, MAX_SERIES, chart_data, scale_groups, svg_chart
from qexport.reports.model import SectionData
from qexport.reports.pdf_charts import chart_drawings

JAN, FEB, MAR = dt.date(2025, 1, 1), dt.date(2025, 2, 1), dt.date(2025, 3, 1)
MONTHLY_TYPES = (pa.date32(), pa.string(), pa.int64(), pa.float64())


def _section(
    rows: Sequence[tuple[Any, ...]],
    *,
    series: str | None = None,
    values: tuple[str, ...] = (),
    columns: tuple[str, ...] = ("month", "category", "orders", "revenue"),
    types: tuple[pa.DataType, ...] = MONTHLY_TYPES,
    display: Display = Display.LINE,
) -> SectionData:
    return SectionData(
        heading="Revenue per month",
        display=display,
        columns=columns,
        types=types,
        rows=list(rows),
        truncated=False,
        series=series,
        values=values,
    )


def test_a_series_column_gives_one_line_per_value_in_first_seen_order() -> None:
    """One row per month and category becomes one x position per month and one series per
    category, in the order the query returned them (a category first seen in February comes
    last); a month without a category's row is a gap, and two rows of the same month and
    category add up."""
    rows = [
        (JAN, "Toys", 3, 30.0),
        (JAN, "Home", 1, 10.0),
        (FEB, "Toys", 2, 20.0),
        (FEB, "Home", 4, 40.0),
        (FEB, "Home", 1, 5.0),
        (FEB, "Office", 7, 70.0),
        (MAR, "Toys", 1, 10.0),
    ]
    data = chart_data(_section(rows, series="category", values=("revenue",)))
    assert data.labels == ["2025-01-01", "2025-02-01", "2025-03-01"]
    assert data.keys == [JAN, FEB, MAR]
    [panel] = data.panels
    assert panel.title == "revenue by category"
    assert panel.names == ["Toys", "Home", "Office"]
    assert panel.series == [[30.0, 20.0, 10.0], [10.0, 45.0, None], [None, 70.0, None]]


def test_each_value_column_of_a_grouped_chart_gets_its_own_panel() -> None:
    """With a series column and no value column named, every numeric column after the label
    column (orders and revenue) is drawn in a panel of its own, with the same series."""
    rows = [(JAN, "Toys", 3, 3000.0), (JAN, "Home", 1, 1000.0)]
    data = chart_data(_section(rows, series="category"))
    assert [p.title for p in data.panels] == ["orders by category", "revenue by category"]
    assert [p.names for p in data.panels] == [["Toys", "Home"], ["Toys", "Home"]]
    assert [p.series for p in data.panels] == [[[3.0], [1.0]], [[3000.0], [1000.0]]]


def test_an_empty_series_value_is_a_series_of_its_own() -> None:
    """Rows whose series column is null are drawn as the series "(empty)", not dropped."""
    rows = [(JAN, "Toys", 1, 10.0), (JAN, None, 2, 20.0), (FEB, None, 3, 30.0)]
    [panel] = chart_data(_section(rows, series="category", values=("revenue",))).panels
    assert panel.names == ["Toys", EMPTY_SERIES]
    assert panel.series == [[10.0, None], [20.0, 30.0]]


def test_beyond_seven_series_the_six_largest_are_kept_and_the_rest_add_up_to_other() -> None:
    """Nine categories: the six with the largest totals keep their own series, in the order
    they were first seen, and the three smallest are added up, month by month, as
    "other (3)", drawn last."""
    totals = {"a": 5, "b": 90, "c": 80, "d": 1, "e": 70, "f": 60, "g": 2, "h": 50, "i": 40}
    rows = [
        (month, name, 1, float(total)) for month in (JAN, FEB) for name, total in totals.items()
    ]
    [panel] = chart_data(_section(rows, series="category", values=("revenue",))).panels
    assert len(panel.names) == MAX_SERIES
    assert panel.names == ["b", "c", "e", "f", "h", "i", "other (3)"]
    assert panel.series[-1] == [8.0, 8.0]  # a + d + g, each month
    assert panel.series[0] == [90.0, 90.0]


def test_value_columns_of_very_different_scales_are_drawn_in_separate_panels() -> None:
    """Without a series column, orders (tens) and revenue (tens of thousands) no longer
    share an axis on which orders would lie flat along zero: each gets a panel, named; two
    columns of similar scale still share one chart, with a legend and no title."""
    rows = [(JAN, "x", 30, 31_000.0), (FEB, "x", 45, 52_000.0)]
    split = chart_data(_section(rows))
    assert [(p.title, p.names) for p in split.panels] == [
        ("orders", ["orders"]),
        ("revenue", ["revenue"]),
    ]
    close = [(JAN, "x", 30, 210.0), (FEB, "x", 45, 120.0)]
    [panel] = chart_data(_section(close)).panels
    assert (panel.title, panel.names) == (None, ["orders", "revenue"])


def test_scale_groups_join_columns_within_a_factor_of_ten() -> None:
    """Columns join the first panel whose largest values stay within 10x of each other; an
    all-zero (or empty) column joins the first panel."""
    assert scale_groups({1: 100.0, 2: 900.0, 3: 5.0, 4: 0.0, 5: 20.0}) == [[1, 2, 4], [3, 5]]
    assert scale_groups({1: 0.0, 2: 7.0, 3: 700.0}) == [[1, 2], [3]]


def test_named_value_columns_choose_what_is_drawn() -> None:
    """Naming only revenue draws only revenue, even though orders is numeric too."""
    rows = [(JAN, "x", 30, 31_000.0)]
    [panel] = chart_data(_section(rows, values=("revenue",))).panels
    assert panel.names == ["revenue"]


@pytest.mark.parametrize(
    ("series", "values", "types", "message"),
    [
        ("colour", (), MONTHLY_TYPES, "its series column 'colour' is not in the query's result"),
        (None, ("profit",), MONTHLY_TYPES, "its value column 'profit' is not in the query's"),
        ("month", (), MONTHLY_TYPES, "its series column 'month' is the first column"),
        (None, ("category",), MONTHLY_TYPES, "its value column 'category' is not numeric"),
        (
            "category",
            (),
            (pa.date32(), pa.string(), pa.string(), pa.string()),
            "no numeric column after the first",
        ),
    ],
)
def test_columns_that_do_not_make_a_chart_fail_render_failed(
    series: str | None, values: tuple[str, ...], types: tuple[pa.DataType, ...], message: str
) -> None:
    """A series or value column missing from the result, a series column that is the label
    column, a value column that is not numeric, or nothing numeric at all: the section
    cannot be drawn, and the reason names the section and the column."""
    section = _section([], series=series, values=values, types=types)
    with pytest.raises(RenderFailedError, match=message) as caught:
        chart_data(section)
    assert "'Revenue per month' is a line chart" in str(caught.value)


@pytest.mark.parametrize(
    ("section", "field", "message"),
    [
        (
            Section("A", "q", display=Display.LINE, series="revenue", values=("revenue",)),
            "sections.0.series",
            "cannot also be a value column",
        ),
        (Section("A", "q", series="category"), "sections.0.series", "a table has no series"),
        (Section("A", "q", values=("revenue",)), "sections.0.values", "a table has no value"),
        (
            Section("A", "q", display=Display.BAR, values=("a", "a")),
            "sections.0.values",
            "named twice",
        ),
        (
            Section("A", "q", display=Display.BAR, values=tuple("abcdefg")),
            "sections.0.values",
            "at most 6 value columns",
        ),
        (Section("A", "q", display=Display.BAR, series=" x"), "sections.0.series", "spaces"),
    ],
)
def test_chart_columns_are_checked_when_the_report_is_saved(
    section: Section, field: str, message: str
) -> None:
    """What can be told without running the query is refused at save time, on the field."""
    with pytest.raises(InvalidRequestError, match=message) as caught:
        check_chart_columns(section, "sections.0")
    assert caught.value.field == field


def test_a_grouped_section_is_stored_and_read_back_and_old_ones_still_read() -> None:
    """A section's series and value columns survive its JSON; one stored before sections had
    them reads as a chart of every numeric column, as it always did."""
    section = Section(
        "A", "q", display=Display.LINE, series="category", values=("revenue", "orders")
    )
    assert Section.from_json(section.to_json()) == section
    old = {"heading": "A", "query_id": "q", "display": "bar", "row_cap": 10, "parameters": {}}
    assert Section.from_json(old) == Section("A", "q", display=Display.BAR, row_cap=10)


@pytest.mark.parametrize(
    ("rows", "series", "display"),
    [
        ([(JAN, "a", 1, -1e308), (FEB, "a", 1, 1e308)], None, Display.LINE),
        ([(JAN, "a", 1, 1e308), (FEB, "a", 1, -1e308)], None, Display.BAR),
        ([(JAN, "a", 1, 1e308), (JAN, "a", 1, 1e308), (FEB, "a", 1, 1.0)], "category", Display.BAR),
        ([(JAN, "a", 1, 5e-324), (FEB, "a", 1, 0.0)], None, Display.LINE),
    ],
    ids=["span-beyond-float-range", "bars-beyond-float-range", "sum-overflows", "subnormal"],
)
def test_extreme_values_still_draw_a_chart(
    rows: list[tuple[Any, ...]], series: str | None, display: Display
) -> None:
    """Values near the ends of the float range (their span, or two of them added up, beyond
    it) or a tiny non-zero one still give a chart in HTML and PDF, with finite coordinates
    only: the report renders rather than failing as an internal error."""
    section = _section(rows, series=series, values=("revenue",), display=display)
    svg = svg_chart(section)
    assert svg.startswith("<svg")
    assert "nan" not in svg.lower()
    assert "inf" not in svg.lower()
    for drawing in chart_drawings(section, 500):  # the PDF's charts, drawn by ReportLab
        assert renderPDF.drawToString(drawing).startswith(b"%PDF")


def test_a_section_of_the_largest_row_cap_with_a_series_per_row_is_charted() -> None:
    """100,000 rows (the largest row cap), each its own x position and its own series: the
    six largest keep their lines and the other 99,994 are added up into one, per x
    position, in one pass over the rows (ranking and adding them up position by position
    took hours of a worker's time, and the report's export never finished)."""
    count = MAX_ROW_CAP
    rows = [(i, f"s{i}", 1, float(i)) for i in range(count)]
    section = _section(
        rows,
        series="category",
        values=("revenue",),
        columns=("x", "category", "orders", "revenue"),
        types=(pa.int64(), pa.string(), pa.int64(), pa.float64()),
    )
    [panel] = chart_data(section).panels
    assert panel.names == [*(f"s{i}" for i in range(count - 6, count)), f"other ({count - 6})"]
    assert panel.series[-1][:3] == [0.0, 1.0, 2.0]
    assert panel.series[-1][count - 6 :] == [None] * 6
    assert panel.series[0][count - 6] == float(count - 6)


def test_a_grouped_chart_draws_at_most_seven_value_columns() -> None:
    """A query with a series column and 500 numeric columns gets seven panels (the first
    seven value columns, as a chart without a series column draws at most seven), not one
    per column: each panel holds a line per series across every row, and 500 of them over
    100,000 rows would take more memory than a worker has."""
    count = 500
    columns = ("month", "category", *(f"v{i}" for i in range(count)))
    types = (pa.date32(), pa.string(), *([pa.float64()] * count))
    rows = [(JAN, "a", *range(count)), (FEB, "b", *range(count))]
    data = chart_data(_section(rows, series="category", columns=columns, types=types))
    assert [p.title for p in data.panels] == [f"v{i} by category" for i in range(MAX_SERIES)]
    assert data.panels[-1].series == [[6.0, None], [None, 6.0]]
