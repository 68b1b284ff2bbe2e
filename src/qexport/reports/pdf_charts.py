"""Bar and line charts for the PDF, drawn with reportlab.graphics from a section's rows."""

from __future__ import annotations

from reportlab.graphics.charts.barcharts import VerticalBarChart
from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.linecharts import HorizontalLineChart
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.pdfbase.pdfmetrics import stringWidth

from qexport.domain.reports import Display
from qexport.reports.charts import (
    MAX_LEGEND_CHARS,
    PALETTE,
    ChartData,
    Panel,
    chart_data,
    legend_shown,
    nice_ticks,
)
from qexport.reports.model import SectionData, clip
from qexport.reports.pdf_text import pdf_text

FONT = "Helvetica"
SMALL_CHART_HEIGHT = 170  # each panel, when a chart is split into several
_TITLE_H = 14
_LEGEND_ROW_H = 11
_LEGEND_ITEM_W = 95  # at most; names are cut at MAX_LEGEND_CHARS
_PANEL_GAP = 10


def chart_drawings(section: SectionData, width: float, height: float = 230) -> list[Drawing]:
    """The section as bar or line charts, one drawing per panel (usually one)."""
    data = chart_data(section)
    small = len(data.panels) > 1
    return [
        _panel_drawing(section, data, panel, width, SMALL_CHART_HEIGHT if small else height)
        for panel in data.panels
    ]


def _panel_drawing(
    section: SectionData, data: ChartData, panel: Panel, width: float, height: float
) -> Drawing:
    legend_on = legend_shown(data, panel)
    item_w = _legend_item_width(panel.names)
    per_row = max(int((width - 45) // item_w), 1)
    legend_rows = -(-len(panel.names) // per_row) if legend_on else 0
    bottom = 45 + legend_rows * _LEGEND_ROW_H  # x labels, then the legend
    pad = _PANEL_GAP if len(data.panels) > 1 else 0  # between a legend and the next title
    height += pad
    top = pad + (_TITLE_H + 6 if panel.title else 8)
    drawing = Drawing(width, height + max(legend_rows - 1, 0) * _LEGEND_ROW_H)
    chart: VerticalBarChart | HorizontalLineChart
    chart = VerticalBarChart() if section.display is Display.BAR else HorizontalLineChart()
    chart.x, chart.y = 45, bottom + 4
    chart.width, chart.height = width - 60, drawing.height - bottom - top - 4
    chart.data = [tuple(values) for values in panel.series]
    ticks = nice_ticks(panel.low, panel.high)
    chart.valueAxis.valueMin, chart.valueAxis.valueMax = ticks[0], ticks[-1]
    chart.valueAxis.valueStep = ticks[1] - ticks[0]
    chart.valueAxis.labels.fontName = FONT
    chart.valueAxis.labels.fontSize = 7
    step = data.label_step()
    chart.categoryAxis.categoryNames = [
        pdf_text(label) if i % step == 0 else "" for i, label in enumerate(data.labels)
    ]
    chart.categoryAxis.labels.fontName = FONT
    chart.categoryAxis.labels.fontSize = 7
    chart.categoryAxis.labels.angle = 35
    chart.categoryAxis.labels.boxAnchor = "ne"
    for i in range(len(panel.series)):
        color = colors.HexColor(PALETTE[i])
        if isinstance(chart, VerticalBarChart):
            chart.bars[i].fillColor = color
            chart.bars[i].strokeColor = None
        else:
            chart.lines[i].strokeColor = color
            chart.lines[i].strokeWidth = 1.5
    drawing.add(chart)
    if panel.title:
        drawing.add(
            String(
                45,
                drawing.height - pad - _TITLE_H + 2,
                pdf_text(clip(panel.title, 90)),
                fontName="Helvetica-Bold",
                fontSize=9,
            )
        )
    if legend_on:
        _add_legend(drawing, panel, per_row, legend_rows, item_w)
    return drawing


def _legend_item_width(names: list[str]) -> float:
    """Room for one legend entry: its swatch and the longest name, so short names share a row."""
    longest = max(
        (stringWidth(pdf_text(clip(n, MAX_LEGEND_CHARS)), FONT, 7) for n in names), default=0
    )
    return min(max(longest + 26, 50), _LEGEND_ITEM_W)


def _add_legend(drawing: Drawing, panel: Panel, per_row: int, rows: int, item_w: float) -> None:
    """The series' names in rows of `per_row` under the x labels."""
    for row in range(rows):
        legend = Legend()
        legend.x, legend.y = 45, 8 + (rows - 1 - row) * _LEGEND_ROW_H
        legend.fontName, legend.fontSize = FONT, 7
        legend.alignment = "right"
        legend.columnMaximum = 1
        legend.deltax = item_w
        legend.dxTextSpace = 4
        legend.colorNamePairs = [
            (colors.HexColor(PALETTE[i]), pdf_text(clip(name, MAX_LEGEND_CHARS)))
            for i, name in enumerate(panel.names)
            if i // per_row == row
        ]
        drawing.add(legend)
