"""Chart data shared by the PDF, XLSX and HTML renderers, and the HTML renderer's inline SVG.

How rows become series:
- No series column: one series per value column, one x position per row (as read).
- A series column: the rows are pivoted. The x positions are the label column's distinct
  values, the series the series column's distinct values, both in first-seen order, so the
  query's ORDER BY decides (as it does for a table); an empty series value is the series
  "(empty)". Rows sharing a label and a series value are added up.
- At most MAX_SERIES series are drawn: beyond that, the MAX_SERIES - 1 with the largest
  total (of the first value column, in absolute value) are kept, in their order, and the
  rest are added up into one last series, "other (N)".

Scales: a chart is split into panels, small charts one above the other, each with its own
value axis, rather than given a second axis. A second axis only serves two measures, forces a
reader to match each line to its axis, and suggests crossings that only come from where the
two axes happen to start; panels work for any number of measures, in every format, the same
way. So:
- with a series column, each value column gets its own panel (its series share its axis:
  they are the same measure, and comparing them is the point); at most MAX_SERIES value
  columns are drawn, the first ones, as without a series column;
- without one, value columns share a panel when their largest values are within a factor
  of SCALE_RATIO, and otherwise go to separate panels (a count of orders is no longer
  drawn flat along zero under revenue in the hundred thousands).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from qexport.domain.reports import Display
from qexport.reports.model import (
    CHART_MAX_VALUE,
    MAX_LABEL_CHARS,
    SectionData,
    as_number,
    cell_text,
    clip,
)

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")
MAX_LABELS = 20  # category labels drawn on the x axis; the others are skipped
MAX_SERIES = len(PALETTE)
SCALE_RATIO = 10.0  # value columns whose largest values differ more get separate panels
EMPTY_SERIES = "(empty)"
MAX_LEGEND_CHARS = 20


@dataclass(frozen=True)
class Panel:
    """One small chart: its series (None = gap) against one value axis."""

    title: str | None  # what the panel measures, when the legend does not say it
    names: list[str]  # the legend, one per series
    series: list[list[float | None]]
    columns: tuple[int, ...] = ()  # without a series column: the value column of each series

    @property
    def low(self) -> float:
        values = [v for s in self.series for v in s if v is not None]
        return min([0.0, *values])

    @property
    def high(self) -> float:
        values = [v for s in self.series for v in s if v is not None]
        top = max([0.0, *values])
        return top if top > self.low else self.low + 1.0


@dataclass(frozen=True)
class ChartData:
    """A chart's x positions and its panels (usually one)."""

    labels: list[str]  # cut at MAX_LABEL_CHARS
    keys: list[Any]  # the label column's value at each x position
    panels: list[Panel]
    pivoted: bool  # by a series column: the series are not columns of the rows

    def label_step(self) -> int:
        return max(1, math.ceil(len(self.labels) / MAX_LABELS))


def chart_data(section: SectionData) -> ChartData:
    """The section's rows as a chart; RenderFailedError when its columns do not make one."""
    columns = section.chart_columns()
    if columns.series is None:
        return _by_column(section, columns.values)
    return _pivot(section, columns.series, columns.values)


def _by_column(section: SectionData, values: Sequence[int]) -> ChartData:
    drawn = values[:MAX_SERIES]
    measures = {i: [as_number(row[i]) for row in section.rows] for i in drawn}
    groups = scale_groups({i: _peak(v) for i, v in measures.items()})
    split = len(groups) > 1
    panels = [
        Panel(
            title=", ".join(section.columns[i] for i in group) if split else None,
            names=[section.columns[i] for i in group],
            series=[measures[i] for i in group],
            columns=tuple(group),
        )
        for group in groups
    ]
    return ChartData(
        labels=[clip(cell_text(row[0]), MAX_LABEL_CHARS) for row in section.rows],
        keys=[row[0] for row in section.rows],
        panels=panels,
        pivoted=False,
    )


def scale_groups(peaks: dict[int, float]) -> list[list[int]]:
    """Value columns (by index, with their largest absolute value) grouped into panels, in
    order: each joins the first panel whose values stay within SCALE_RATIO of each other."""
    groups: list[list[int]] = []
    bounds: list[tuple[float, float]] = []  # each group's smallest non-zero and largest peak
    for column, peak in peaks.items():
        for n, (low, high) in enumerate(bounds):
            smallest = min((p for p in (low, peak) if p > 0), default=0.0)
            largest = max(high, peak)
            if smallest == 0 or largest <= SCALE_RATIO * smallest:
                groups[n].append(column)
                bounds[n] = (smallest, largest)
                break
        else:
            groups.append([column])
            bounds.append((peak, peak))
    return groups


def _pivot(section: SectionData, series: int, columns: Sequence[int]) -> ChartData:
    # At most MAX_SERIES value columns, as without a series column: each is a panel with a
    # line per series across every row, and memory grows with their number.
    values = columns[:MAX_SERIES]
    xs: dict[Any, int] = {}  # label key -> x position
    keys: list[Any] = []
    found: dict[Any, str] = {}  # series key -> its name, in first-seen order
    cells: dict[tuple[int, Any], list[float | None]] = {}
    for row in section.rows:
        x = xs.setdefault(_key(row[0]), len(xs))
        if x == len(keys):
            keys.append(row[0])
        key = _key(row[series])
        found.setdefault(key, EMPTY_SERIES if row[series] is None else cell_text(row[series]))
        sums = cells.setdefault((x, key), [None] * len(values))
        for v, column in enumerate(values):
            sums[v] = _add(sums[v], as_number(row[column]))
    kept, others = _top_series(list(found), cells)
    names = [found[k] for k in kept] + ([f"other ({len(others)})"] if others else [])
    other = _others(cells, set(others), len(values))
    panels = []
    for v, column in enumerate(values):
        lines = [[_at(cells, x, k, v) for x in range(len(keys))] for k in kept]
        if others:
            lines.append([other[x][v] if x in other else None for x in range(len(keys))])
        panels.append(
            Panel(
                title=f"{section.columns[column]} by {section.columns[series]}",
                names=names,
                series=lines,
            )
        )
    return ChartData(
        labels=[clip(cell_text(k), MAX_LABEL_CHARS) for k in keys],
        keys=keys,
        panels=panels,
        pivoted=True,
    )


def _top_series(
    order: list[Any], cells: dict[tuple[int, Any], list[float | None]]
) -> tuple[list[Any], list[Any]]:
    """The series kept (in first-seen order) and those added up into "other". One pass over
    the cells: a section may have as many series as x positions (100,000 of each), and
    asking each series for each position would take hours."""
    if len(order) <= MAX_SERIES:
        return order, []
    totals = dict.fromkeys(order, 0.0)
    for (_, key), sums in cells.items():
        totals[key] += abs(sums[0] or 0.0)
    ranked = sorted(order, key=lambda k: -totals[k])  # stable: ties keep first-seen order
    kept = set(ranked[: MAX_SERIES - 1])
    return [k for k in order if k in kept], [k for k in order if k not in kept]


def _at(cells: dict[tuple[int, Any], list[float | None]], x: int, key: Any, v: int) -> float | None:
    found = cells.get((x, key))
    return None if found is None else found[v]


def _add(total: float | None, value: float | None) -> float | None:
    """The sum, kept within ±CHART_MAX_VALUE like each value (many values near it could add
    up to infinity, which no axis can show): such a sum is drawn at the chart's edge."""
    if value is None:
        return total
    return value if total is None else _finite(total + value)


def _finite(value: float) -> float:
    return max(-CHART_MAX_VALUE, min(CHART_MAX_VALUE, value))


def _others(
    cells: dict[tuple[int, Any], list[float | None]], others: set[Any], count: int
) -> dict[int, list[float | None]]:
    """The series in `others` added up at each x position where any has a value (one pass)."""
    found: dict[int, list[float | None]] = {}
    for (x, key), sums in cells.items():
        if key in others:
            total = found.setdefault(x, [None] * count)
            for v in range(count):
                total[v] = _add(total[v], sums[v])
    return found


def _key(value: Any) -> Any:
    """A dictionary key for a cell value: the value itself, or its text when unhashable
    (lists, maps); the type is part of it, so 1 and True stay apart."""
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, cell_text(value))
    return (type(value).__name__, value)


def _peak(values: list[float | None]) -> float:
    return max((abs(v) for v in values if v is not None), default=0.0)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    span = high - low
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(math.ceil((high - first) / step) + 1)]


def tick_label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10 or value == int(value) else f"{value:,.2f}"


# ---------------------------------------------------------------- SVG (HTML)

_W = 760
_LEFT, _RIGHT, _TOP, _AXIS = 70, 20, 20, 70  # _AXIS: room under the plot for the x labels
_PLOT_H, _SMALL_PLOT_H = 230, 160  # one chart; each of several panels
_TITLE_H = 22
_LEGEND_ITEM_W, _LEGEND_ROW_H = 125, 18


def svg_chart(section: SectionData) -> str:
    """The section as inline SVG bar or line charts, one per panel (no scripts, no external
    references)."""
    data = chart_data(section)
    if not data.labels:
        return '<p class="empty">No rows.</p>'
    plot_h = _PLOT_H if len(data.panels) == 1 else _SMALL_PLOT_H
    return "\n".join(_svg_panel(section, data, panel, plot_h) for panel in data.panels)


def _svg_panel(section: SectionData, data: ChartData, panel: Panel, plot_h: int) -> str:
    legend = legend_shown(data, panel)
    longest = max((len(clip(n, MAX_LEGEND_CHARS - 2)) for n in panel.names), default=0)
    item_w = min(_LEGEND_ITEM_W, 24 + 7 * longest)  # ~7 px a character at 11 px
    per_row = (_W - _LEFT) // item_w
    legend_rows = math.ceil(len(panel.names) / per_row) if legend else 0
    top = _TOP + (_TITLE_H if panel.title else 0)
    height = top + plot_h + _AXIS + legend_rows * _LEGEND_ROW_H
    ticks = nice_ticks(panel.low, panel.high)
    low, high = ticks[0], ticks[-1]
    plot_w = _W - _LEFT - _RIGHT
    n = len(data.labels)
    slot = plot_w / n

    def y(value: float) -> float:
        return top + plot_h - (value - low) / (high - low) * plot_h

    label = section.heading + (f": {panel.title}" if panel.title else "")
    parts = [f'<svg viewBox="0 0 {_W} {height}" role="img" aria-label="{escape(label)}">']
    if panel.title:
        parts.append(
            f'<text x="{_LEFT}" y="{_TOP + 8}" class="title">{escape(clip(panel.title, 90))}</text>'
        )
    for tick in ticks:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"'
            ' class="grid"/>'
            f'<text x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
            f"{escape(tick_label(tick))}</text>"
        )
    parts += _svg_series(section.display, panel, low, slot, y)
    axis = top + plot_h + 14
    for i in range(0, n, data.label_step()):
        x = _LEFT + (i + 0.5) * slot
        parts.append(
            f'<text x="{x:.1f}" y="{axis}" text-anchor="end"'
            f' transform="rotate(-35 {x:.1f} {axis})">'
            f"{escape(data.labels[i])}</text>"
        )
    if legend:
        for s, name in enumerate(panel.names):
            x = _LEFT + (s % per_row) * item_w
            row_y = top + plot_h + _AXIS + (s // per_row) * _LEGEND_ROW_H
            parts.append(
                f'<rect x="{x}" y="{row_y}" width="10" height="10" fill="{PALETTE[s]}"/>'
                f'<text x="{x + 14}" y="{row_y + 9}">'
                f"{escape(clip(name, MAX_LEGEND_CHARS - 2))}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _svg_series(
    display: Display, panel: Panel, low: float, slot: float, y: Callable[[float], float]
) -> list[str]:
    """The panel's series as bars side by side in each label's slot, or as lines through the
    slots' middles; `y` places a value on the plot."""
    parts: list[str] = []
    if display is Display.BAR:
        width = slot * 0.8 / len(panel.series)
        for s, values in enumerate(panel.series):
            for i, value in enumerate(values):
                if value is None:
                    continue
                bar_top, bottom = sorted((y(value), y(max(low, 0.0))))
                x = _LEFT + i * slot + slot * 0.1 + s * width
                parts.append(
                    f'<rect x="{x:.1f}" y="{bar_top:.1f}" width="{width:.1f}"'
                    f' height="{bottom - bar_top:.1f}" fill="{PALETTE[s]}"/>'
                )
        return parts
    for s, values in enumerate(panel.series):
        points = " ".join(
            f"{_LEFT + (i + 0.5) * slot:.1f},{y(v):.1f}"
            for i, v in enumerate(values)
            if v is not None
        )
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{PALETTE[s]}" stroke-width="1.5"/>'
        )
    return parts


def legend_shown(data: ChartData, panel: Panel) -> bool:
    """A legend names the series; a panel of one value column is named by its title."""
    return data.pivoted or len(panel.names) > 1 or panel.title is None
