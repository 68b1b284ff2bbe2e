"""Chart geometry shared by the PDF and HTML renderers, and the HTML renderer's inline SVG."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from qexport.domain.reports import Display
from qexport.reports.model import MAX_LABEL_CHARS, SectionData, as_number, cell_text, clip

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")
MAX_LABELS = 20  # category labels drawn on the x axis; the others are skipped
MAX_SERIES = len(PALETTE)


@dataclass(frozen=True)
class ChartData:
    """A chart's categories (first column) and series (the numeric columns, None = gap)."""

    labels: list[str]  # cut at MAX_LABEL_CHARS
    names: list[str]
    series: list[list[float | None]]

    @property
    def low(self) -> float:
        values = [v for s in self.series for v in s if v is not None]
        return min([0.0, *values])

    @property
    def high(self) -> float:
        values = [v for s in self.series for v in s if v is not None]
        top = max([0.0, *values])
        return top if top > self.low else self.low + 1.0

    def label_step(self) -> int:
        return max(1, math.ceil(len(self.labels) / MAX_LABELS))


def chart_data(section: SectionData) -> ChartData:
    """The section's rows as a chart; RenderFailedError when nothing in it is numeric."""
    numeric = section.numeric_columns()[:MAX_SERIES]
    return ChartData(
        labels=[clip(cell_text(row[0]), MAX_LABEL_CHARS) for row in section.rows],
        names=[section.columns[i] for i in numeric],
        series=[[as_number(row[i]) for row in section.rows] for i in numeric],
    )


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

_W, _H = 760, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 20, 70


def svg_chart(section: SectionData) -> str:
    """An inline SVG bar or line chart of the section (no scripts, no external references)."""
    data = chart_data(section)
    if not data.labels:
        return '<p class="empty">No rows.</p>'
    ticks = nice_ticks(data.low, data.high)
    low, high = ticks[0], ticks[-1]
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    n = len(data.labels)
    slot = plot_w / n

    def y(value: float) -> float:
        return _TOP + plot_h - (value - low) / (high - low) * plot_h

    parts = [f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(section.heading)}">']
    for tick in ticks:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"'
            ' class="grid"/>'
            f'<text x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
            f"{escape(tick_label(tick))}</text>"
        )
    if section.display is Display.BAR:
        width = slot * 0.8 / len(data.series)
        for s, values in enumerate(data.series):
            for i, value in enumerate(values):
                if value is None:
                    continue
                top, bottom = sorted((y(value), y(max(low, 0.0))))
                x = _LEFT + i * slot + slot * 0.1 + s * width
                parts.append(
                    f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.1f}"'
                    f' height="{bottom - top:.1f}" fill="{PALETTE[s]}"/>'
                )
    else:
        for s, values in enumerate(data.series):
            points = " ".join(
                f"{_LEFT + (i + 0.5) * slot:.1f},{y(v):.1f}"
                for i, v in enumerate(values)
                if v is not None
            )
            parts.append(f'<polyline points="{points}" fill="none" stroke="{PALETTE[s]}"/>')
    for i in range(0, n, data.label_step()):
        x = _LEFT + (i + 0.5) * slot
        parts.append(
            f'<text x="{x:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="end"'
            f' transform="rotate(-35 {x:.1f} {_H - _BOTTOM + 14})">'
            f"{escape(data.labels[i])}</text>"
        )
    for s, name in enumerate(data.names):
        x = _LEFT + s * 140
        parts.append(
            f'<rect x="{x}" y="{_H - 14}" width="10" height="10" fill="{PALETTE[s]}"/>'
            f'<text x="{x + 14}" y="{_H - 5}">{escape(name[:20])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
