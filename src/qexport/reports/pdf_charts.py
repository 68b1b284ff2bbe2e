"""Bar and line charts for the PDF, drawn with reportlab.graphics from a section's rows."""

from __future__ import annotations

from reportlab.graphics.charts.barcharts import VerticalBarChart
from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.linecharts import HorizontalLineChart
from reportlab.graphics.shapes import Drawing
from reportlab.lib import colors

from qexport.domain.reports import Display
from qexport.reports.charts import PALETTE, chart_data, nice_ticks
from qexport.reports.model import SectionData
from qexport.reports.pdf_text import pdf_text

FONT = "Helvetica"


def chart_drawing(section: SectionData, width: float, height: float = 230) -> Drawing:
    """The section as a bar or line chart: first column the categories, numeric ones series."""
    data = chart_data(section)
    drawing = Drawing(width, height)
    chart: VerticalBarChart | HorizontalLineChart
    chart = VerticalBarChart() if section.display is Display.BAR else HorizontalLineChart()
    chart.x, chart.y = 45, 60
    chart.width, chart.height = width - 60, height - 75
    chart.data = [tuple(values) for values in data.series]
    ticks = nice_ticks(data.low, data.high)
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
    for i in range(len(data.series)):
        color = colors.HexColor(PALETTE[i])
        if isinstance(chart, VerticalBarChart):
            chart.bars[i].fillColor = color
            chart.bars[i].strokeColor = None
        else:
            chart.lines[i].strokeColor = color
    drawing.add(chart)
    legend = Legend()
    legend.x, legend.y = 45, 8
    legend.fontName, legend.fontSize = FONT, 7
    legend.alignment = "right"
    legend.columnMaximum = 1
    legend.colorNamePairs = [
        (colors.HexColor(PALETTE[i]), pdf_text(name[:20])) for i, name in enumerate(data.names)
    ]
    drawing.add(legend)
    return drawing
