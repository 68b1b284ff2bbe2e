"""What a renderer is given: the document's title block and each section's rows, read."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from qexport.domain.failures import RenderFailedError
from qexport.domain.reports import Display


@dataclass(frozen=True)
class DocumentInfo:
    """The title block: the report's title and description, who asked and when."""

    title: str
    description: str
    requester: str
    generated_at: dt.datetime  # in the workspace's time zone

    @property
    def generated_label(self) -> str:
        return self.generated_at.strftime("%Y-%m-%d %H:%M %Z").strip()


@dataclass(frozen=True)
class SectionData:
    """One section's result as read: at most its row cap, one tuple of Python values a row."""

    heading: str
    display: Display
    columns: tuple[str, ...]
    types: tuple[pa.DataType, ...]
    rows: Sequence[tuple[Any, ...]]
    truncated: bool  # the query had more rows than the section's row cap
    series: str | None = None  # the section's series column, as named
    values: tuple[str, ...] = ()  # the section's value columns, as named

    def chart_columns(self) -> ChartColumns:
        """Where the chart's series and value columns are (the checks of `chart_columns`)."""
        return chart_columns(self, self.columns, self.types)


class ChartSpec(Protocol):
    """What a chart is asked to draw: a saved section, or a section's data as read."""

    @property
    def heading(self) -> str: ...
    @property
    def display(self) -> Display: ...
    @property
    def series(self) -> str | None: ...
    @property
    def values(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class ChartColumns:
    """Indexes of a chart's columns: the label column is always the first."""

    series: int | None
    values: tuple[int, ...]


def chart_columns(
    spec: ChartSpec, names: Sequence[str], types: Sequence[pa.DataType]
) -> ChartColumns:
    """The columns a chart plots, checked against the query's result: the named series and
    value columns must be in it, the value columns numeric; with no value column named, the
    numeric ones after the label column (and other than the series column). RenderFailedError
    otherwise; a table section plots nothing and never fails."""
    if spec.display is Display.TABLE:
        return ChartColumns(None, ())
    where = f"section {spec.heading!r} is a {spec.display.value} chart, but"
    series = None
    if spec.series is not None:
        series = _column_index(where, "series", spec.series, names)
        if series == 0:
            raise RenderFailedError(
                f"{where} its series column {spec.series!r} is the first column, which labels"
                " the x axis; put the labels first and the series column after them"
            )
    if spec.values:
        values = tuple(_column_index(where, "value", name, names) for name in spec.values)
        for name, i in zip(spec.values, values, strict=True):
            if i == 0 or not is_numeric(types[i]):
                raise RenderFailedError(
                    f"{where} its value column {name!r} is not numeric ({types[i]}); name"
                    " numeric columns after the first (label) column"
                )
        return ChartColumns(series, values)
    numeric = tuple(i for i in range(1, len(types)) if i != series and is_numeric(types[i]))
    if not numeric:
        raise RenderFailedError(
            f"{where} its query has no numeric column after the first (label) column; show"
            " it as a table, or add a numeric column"
        )
    return ChartColumns(series, numeric)


def _column_index(where: str, role: str, name: str, names: Sequence[str]) -> int:
    if name not in names:
        raise RenderFailedError(
            f"{where} its {role} column {name!r} is not in the query's result"
            f" (columns: {', '.join(names)})"
        )
    return list(names).index(name)


def is_numeric(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_integer(dtype) or pa.types.is_floating(dtype)) or bool(
        pa.types.is_decimal(dtype)
    )


# A table cell shows at most this many characters in PDF and HTML (a chart label, fewer):
# the rest is cut with an ellipsis, so that one long value cannot swell the document.
MAX_CELL_CHARS = 1_000
MAX_LABEL_CHARS = 16


def clip(text: str, chars: int) -> str:
    """At most `chars` characters, with an ellipsis where it was cut."""
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "…"


def cell_text(value: Any) -> str:
    """A value as a table cell shows it in PDF and HTML, cut at MAX_CELL_CHARS."""
    if isinstance(value, bytes):  # hex doubles the length: convert only what is shown
        return clip(value[:MAX_CELL_CHARS].hex(), MAX_CELL_CHARS)
    return clip(as_text(value), MAX_CELL_CHARS)


def as_text(value: Any) -> str:  # noqa: PLR0911 - one return per kind of value
    """A value as text, in full."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float | decimal.Decimal):
        return f"{value:,.2f}" if abs(float(value)) < 1e15 else f"{value:.6g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


# What a chart draws lies within ±CHART_MAX_VALUE, and a value nearer zero than
# CHART_MIN_MAGNITUDE is drawn as zero: an axis over values near the ends of the float range
# (or over a subnormal one against zero) has a span or a step that overflows or underflows,
# and the chart fails to render. The table shows the values as they are.
CHART_MAX_VALUE = 1e300
CHART_MIN_MAGNITUDE = 1e-300


def as_number(value: Any) -> float | None:
    """A chart value: None where the cell is empty or not a finite number; within
    ±CHART_MAX_VALUE, and 0.0 when nearer zero than CHART_MIN_MAGNITUDE."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number):
        return None
    if abs(number) < CHART_MIN_MAGNITUDE:
        return 0.0
    return max(-CHART_MAX_VALUE, min(CHART_MAX_VALUE, number))


class DocumentWriter(Protocol):
    """A document being written into the sink, one section at a time."""

    def add(self, section: SectionData) -> None: ...
    def finish(self) -> None:
        """Write what remains of the document into the sink."""
        ...

    def close(self) -> None:
        """Release temporary files; called whether or not the document was finished."""
        ...
