"""PDF with ReportLab's platypus: title block, then each section as a table or a chart.

Sections are laid out as they arrive, and their rows dropped once on pages: platypus's own
`build()` wants every flowable up front, so the document is driven through the same steps it
takes (`_startBuild`, `handle_flowable`, `_endBuild`). ReportLab writes the file only when
it is saved, so the laid-out pages stay in memory until `finish` (about 0.45 KiB per table
row); the section rows do not. That is why a PDF holds at most `max_rows` rows
(QEXPORT_REPORT_PDF_MAX_ROWS): the default, 100,000, grows a worker by about 60 MiB.

"page N of M": M is not known while page N is drawn, so every page draws a reference to a
form XObject that the canvas defines, with the page count, just before it saves.
"""

from __future__ import annotations

import io
from typing import Any

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import (
    BaseDocTemplate,
    CondPageBreak,
    Flowable,
    Frame,
    PageBreak,
    PageTemplate,
    Paragraph,
    Spacer,
    Table,
    TableStyle,
)

from qexport.domain.failures import LimitExceededError
from qexport.domain.reports import Display
from qexport.ports import Sink
from qexport.reports.model import DocumentInfo, SectionData, cell_text, clip, is_numeric
from qexport.reports.pdf_charts import FONT, chart_drawings
from qexport.reports.pdf_text import pdf_markup, pdf_text

_PAGE_COUNT_FORM = "qexportPageCount"
_MARGIN = 15 * mm
_FOOTER_SIZE = 8
_CHART_HEIGHT = 230


class _CountingCanvas(Canvas):  # type: ignore[misc] # reportlab ships no type hints
    """Defines the page-count form (referenced by every page's footer) before saving."""

    def save(self) -> None:
        pages = self.getPageNumber() - 1  # save() comes after the last page was shown
        self.beginForm(_PAGE_COUNT_FORM)
        self.setFont(FONT, _FOOTER_SIZE)
        self.drawString(0, 0, str(pages))
        self.endForm()
        super().save()


def _footer(canvas: Canvas, doc: BaseDocTemplate) -> None:
    canvas.saveState()
    canvas.setFont(FONT, _FOOTER_SIZE)
    text = f"page {canvas.getPageNumber()} of "
    x = doc.pagesize[0] - _MARGIN - stringWidth(text + "000", FONT, _FOOTER_SIZE)
    y = _MARGIN / 2
    canvas.drawString(x, y, text)
    canvas.translate(x + stringWidth(text, FONT, _FOOTER_SIZE), y)
    canvas.doForm(_PAGE_COUNT_FORM)
    canvas.restoreState()


class PdfDocument:
    def __init__(self, info: DocumentInfo, sink: Sink, *, max_rows: int) -> None:
        self._sink = sink
        self._max_rows = max_rows
        self._rows = 0
        self._out = io.BytesIO()
        self._doc = BaseDocTemplate(
            self._out,
            pagesize=A4,
            leftMargin=_MARGIN,
            rightMargin=_MARGIN,
            topMargin=_MARGIN,
            bottomMargin=_MARGIN,
            title=pdf_text(info.title),
            author=pdf_text(info.requester),
            creator="qexport",
            invariant=True,  # no random document id: the same input makes the same bytes
        )
        frame = Frame(
            _MARGIN, _MARGIN, self._doc.width, self._doc.height, id="body", showBoundary=0
        )
        self._doc.addPageTemplates([PageTemplate(id="page", frames=[frame], onPage=_footer)])
        styles = getSampleStyleSheet()
        self._title = styles["Title"]
        self._heading = styles["Heading2"]
        self._body = styles["BodyText"]
        self._note = ParagraphStyle("note", parent=self._body, textColor=colors.grey)
        self._doc._startBuild(canvasmaker=_CountingCanvas)
        self._doc.canv._doctemplate = self._doc
        block: list[Flowable] = [Paragraph(pdf_markup(info.title), self._title)]
        if info.description:
            block.append(Paragraph(pdf_markup(info.description), self._body))
        block.append(
            Paragraph(
                f"Requested by {pdf_markup(info.requester)}"
                f" &middot; generated {pdf_markup(info.generated_label)}",
                self._note,
            )
        )
        self._flow(block)

    def _flow(self, flowables: list[Flowable]) -> None:
        """Lay `flowables` out onto pages now (the loop of BaseDocTemplate.build)."""
        while flowables:
            self._doc.clean_hanging()
            self._doc.handle_flowable(flowables)

    def add(self, section: SectionData) -> None:
        self._rows += len(section.rows)
        if self._rows > self._max_rows:  # refused before any of the section is laid out
            raise LimitExceededError(
                f"section {section.heading!r} brings the PDF to {self._rows:,} rows; a PDF"
                f" report holds at most {self._max_rows:,} (QEXPORT_REPORT_PDF_MAX_ROWS)."
                " Export it as xlsx or html, or lower the sections' row_cap"
            )
        # A heading starts a new page rather than end one: room for it and a few rows (or
        # the whole chart). keepWithNext would move a long table whole to the next page.
        room = 40 * mm if section.display is Display.TABLE else _CHART_HEIGHT + 25 * mm
        self._flow(
            [
                CondPageBreak(room),
                Spacer(1, 4 * mm),
                Paragraph(pdf_markup(section.heading), self._heading),
            ]
        )
        if section.display is Display.TABLE:
            self._table(section)
        elif section.rows:
            self._flow(list(chart_drawings(section, self._doc.width, _CHART_HEIGHT)))
        if not section.rows:
            self._flow([Paragraph("No rows.", self._note)])
        elif section.truncated:
            self._flow(
                [Paragraph(f"Only the first {len(section.rows):,} rows are shown.", self._note)]
            )

    def _table(self, section: SectionData) -> None:
        """The rows as one Table per page, each under the header row.

        Splitting one long Table across pages copies its remaining rows at every page (time
        and memory grow with the square of the rows); a page's worth at a time does not."""
        columns = max(len(section.columns), 1)
        size = 8 if columns <= 8 else 6
        width = self._doc.width / columns
        chars = max(int(width / (size * 0.55)), 3)  # Helvetica's average glyph: ~0.5 em
        numeric = [is_numeric(t) for t in section.types]
        header = [clip(pdf_text(name), chars) for name in section.columns]
        style = [
            ("FONT", (0, 0), (-1, -1), FONT, size),
            ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", size),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#eef2f7")),
            ("GRID", (0, 0), (-1, -1), 0.25, colors.HexColor("#bbbbbb")),
            ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
            ("TOPPADDING", (0, 0), (-1, -1), 1),
            ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
        ]
        style += [("ALIGN", (i, 1), (i, -1), "RIGHT") for i, num in enumerate(numeric) if num]
        row_height = size + 4  # fixed: a page's row count is known before laying it out
        start = 0
        fresh_page = False
        while True:
            fit = self._rows_fitting(row_height)
            if fit < 1 and section.rows and not fresh_page:
                self._flow([PageBreak()])
                fresh_page = True
                continue
            fit, fresh_page = max(fit, 1), False  # a fresh page always takes a row
            chunk = section.rows[start : start + fit]
            data: list[list[Any]] = [header]
            data.extend([clip(pdf_text(cell_text(v)), chars) for v in row] for row in chunk)
            self._flow(
                [
                    Table(
                        data,
                        colWidths=[width] * columns,
                        rowHeights=[row_height] * len(data),
                        repeatRows=1,  # the header again should the page's rows not fit after all
                        style=TableStyle(style),
                        hAlign="LEFT",
                    )
                ]
            )
            start += len(chunk)
            if start >= len(section.rows):
                return

    def _rows_fitting(self, row_height: float) -> int:
        """Rows that fit under a header row in what is left of the current page.

        Read from the frame's cursor (`_y`) and bottom (`_y1p`): ReportLab has no public
        accessor for the space left, and the document is driven through its internals anyway."""
        self._doc.clean_hanging()  # a page break just flowed: begin the new page
        frame = self._doc.frame
        return int((frame._y - frame._y1p) // row_height) - 1

    def finish(self) -> None:
        self._doc._endBuild()
        view = self._out.getbuffer()
        try:
            self._sink.write(view)
        finally:
            view.release()

    def close(self) -> None:
        self._out = io.BytesIO()  # drop the laid-out document
