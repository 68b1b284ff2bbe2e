"""XLSX with XlsxWriter: one sheet per section with typed cells; the title block (title,
requester, generation time) goes into the workbook's document properties.

Strings are always written with write_string, so no cell value ever becomes a formula (or a
link, or a number) in the workbook, and stored exactly (see `_ExactWorksheet`). NaN and
infinities are the strings `NaN`, `Infinity` and `-Infinity`, as in an exported xlsx.
XlsxWriter needs a seekable file, so the workbook is
written in constant-memory mode to a file in a private temporary directory, then copied into
the sink; memory stays at one row whatever the row count.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import xlsxwriter
from xlsxwriter.worksheet import Worksheet

from qexport.domain.reports import Display
from qexport.ports import Sink
from qexport.reports.charts import PALETTE, ChartData, Panel, chart_data, legend_shown
from qexport.reports.model import DocumentInfo, SectionData
from qexport.writers.textual import non_finite_label
from qexport.writers.xlsx_parts import ooxml_escape, valid_sheet_name, without_controls

_EXACT_INT = 2**53  # larger integers would lose digits as Excel numbers: kept as text
_COPY_CHUNK = 1024 * 1024
_WIDTH_SAMPLE = 100  # rows looked at to size the columns
_CHART_COLUMNS = 12  # a 720 px chart covers about 12 columns of the default width...
_CHART_ROWS = 19  # ...and 18 rows of 20 px: the next chart goes a row below


class XlsxDocument:
    def __init__(self, info: DocumentInfo, sink: Sink) -> None:
        self._sink = sink
        self._dir = Path(tempfile.mkdtemp(prefix="qexport-report-"))  # mode 0700: private
        self._path = self._dir / "report.xlsx"
        self._book = xlsxwriter.Workbook(
            str(self._path),
            {
                "constant_memory": True,
                "tmpdir": str(self._dir),
                "strings_to_formulas": False,
                "strings_to_urls": False,
                "strings_to_numbers": False,
                "default_date_format": "yyyy-mm-dd",
            },
        )
        self._bold = self._book.add_format({"bold": True})
        self._date = self._book.add_format({"num_format": "yyyy-mm-dd"})
        self._datetime = self._book.add_format({"num_format": "yyyy-mm-dd hh:mm:ss"})
        self._time = self._book.add_format({"num_format": "hh:mm:ss"})
        self._taken: set[str] = set()
        self._closed = False
        comments = f"Requested by {info.requester}, generated {info.generated_label}"
        self._book.set_properties(
            {
                "title": without_controls(info.title),
                "author": without_controls(info.requester),
                "comments": without_controls(
                    f"{info.description}\n{comments}" if info.description else comments
                ),
                # Stored as UTC (the comments keep the workspace's time zone).
                "created": info.generated_at.astimezone(dt.UTC),
            }
        )

    def add(self, section: SectionData) -> None:
        sheet = self._book.add_worksheet(
            valid_sheet_name(section.heading, self._taken), worksheet_class=_ExactWorksheet
        )
        chart = (
            chart_data(section) if section.display is not Display.TABLE and section.rows else None
        )
        blocks = _pivot_blocks(section, chart)
        for col, name in enumerate(section.columns):
            sheet.write_string(0, col, name, self._bold)
            sheet.set_column(col, col, _width(section, col))
        for first, panel in blocks:
            sheet.set_column(first, first + len(panel.names), 14)
            sheet.write_string(0, first, panel.title or "", self._bold)
            for s, name in enumerate(panel.names, start=1):
                sheet.write_string(0, first + s, name, self._bold)
        sheet.freeze_panes(1, 0)
        for r, row in enumerate(section.rows, start=1):
            for c, value in enumerate(row):
                self._cell(sheet, r, c, value)
            if chart is not None and r <= len(chart.keys):  # rows must be written in order
                self._pivot_row(sheet, r, chart, blocks)
        if chart is not None:
            self._charts(sheet, section, chart, blocks)

    def _pivot_row(
        self, sheet: Worksheet, r: int, chart: ChartData, blocks: list[tuple[int, Panel]]
    ) -> None:
        """Row `r` of each panel's pivoted values: the label, then one number per series."""
        for first, panel in blocks:
            self._cell(sheet, r, first, chart.keys[r - 1])
            for s, values in enumerate(panel.series, start=1):
                self._cell(sheet, r, first + s, values[r - 1])

    def _cell(self, sheet: Worksheet, row: int, col: int, value: Any) -> None:  # noqa: PLR0912 - one branch per type
        if value is None:
            return
        if isinstance(value, bool):
            sheet.write_boolean(row, col, value)
        elif isinstance(value, int):
            if abs(value) <= _EXACT_INT:
                sheet.write_number(row, col, value)
            else:
                sheet.write_string(row, col, str(value))
        elif isinstance(value, float | decimal.Decimal):
            nan = isinstance(value, decimal.Decimal) and value.is_nan()  # sNaN has no float
            number = math.nan if nan else float(value)
            if math.isfinite(number):
                sheet.write_number(row, col, number)
            else:
                sheet.write_string(row, col, non_finite_label(number))
        elif isinstance(value, dt.datetime):
            if value.tzinfo is not None:  # Excel has no time zones: shown in UTC
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
            sheet.write_datetime(row, col, value, self._datetime)
        elif isinstance(value, dt.date):
            sheet.write_datetime(row, col, value, self._date)
        elif isinstance(value, dt.time):
            sheet.write_datetime(row, col, value.replace(tzinfo=None), self._time)
        elif isinstance(value, bytes):
            sheet.write_string(row, col, value.hex())
        else:
            sheet.write_string(row, col, str(value))

    def _charts(
        self,
        sheet: Worksheet,
        section: SectionData,
        data: ChartData,
        blocks: list[tuple[int, Panel]],
    ) -> None:
        """Native Excel charts of the sheet's own cells, to the right of the data, one per
        panel: of the value columns, or of a pivoted block when the section has a series
        column (Excel charts plot cells, so the pivot is written into the sheet too)."""
        for n, panel in enumerate(data.panels):
            chart = self._book.add_chart(
                {"type": "column" if section.display is Display.BAR else "line"}
            )
            if blocks:
                first, _ = blocks[n]
                columns = [first + s for s in range(1, len(panel.names) + 1)]
                labels, last = first, len(data.keys)
            else:
                columns, labels, last = list(panel.columns), 0, len(section.rows)
            for s, col in enumerate(columns):
                color = {"color": PALETTE[s]}
                chart.add_series(
                    {
                        "name": [sheet.name, 0, col],
                        "categories": [sheet.name, 1, labels, last, labels],
                        "values": [sheet.name, 1, col, last, col],
                        **(
                            {"fill": color, "border": {"none": True}}
                            if section.display is Display.BAR
                            else {"line": {**color, "width": 1.75}, "marker": {"type": "none"}}
                        ),
                    }
                )
            title = f"{section.heading}: {panel.title}" if panel.title else section.heading
            chart.set_title({"name": title[:255], "name_font": {"size": 12}})
            axis_format = _label_format(section)
            if axis_format:  # else a date axis shows serial numbers in some readers
                chart.set_x_axis({"num_format": axis_format})
            if not legend_shown(data, panel):
                chart.set_legend({"none": True})
            else:
                chart.set_legend({"position": "bottom"})
            chart.set_size({"width": 720, "height": 360})
            sheet.insert_chart(1 + n * _CHART_ROWS, len(section.columns) + 1, chart)

    def finish(self) -> None:
        self._closed = True
        self._book.close()
        with self._path.open("rb") as fh:
            while chunk := fh.read(_COPY_CHUNK):
                self._sink.write(chunk)

    def close(self) -> None:
        if not self._closed:  # abandoned: close the workbook's own temp files, then drop all
            self._closed = True
            with contextlib.suppress(Exception):
                self._book.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class _ExactWorksheet(Worksheet):  # type: ignore[misc]  # XlsxWriter ships no type hints
    """XlsxWriter's worksheet, with inline strings escaped as the export writer does.

    In constant-memory mode XlsxWriter passes every string cell through this hook before
    escaping its markup. Its own version reads `_x0041_x0042_` back as `_x0041B`, and a
    string shaped `<r>...</r>` then goes into the sheet unescaped, as rich-text markup.
    """

    @staticmethod
    def _escape_control_characters(data: Any) -> Any:
        if not isinstance(data, str):  # other element data (numbers): as XlsxWriter does
            return data
        # CR as `_x000D_`: raw in the element, an XML parser would read it as LF.
        text = ooxml_escape(data).replace("\r", "_x000D_")
        if text.startswith("<r>") and text.endswith("</r>"):
            text = "_x003C_" + text[1:]  # the same character, no longer taken as markup
        return text


def _pivot_blocks(section: SectionData, data: ChartData | None) -> list[tuple[int, Panel]]:
    """Where each panel's pivoted values go (first column, panel), right of the charts;
    none when the chart plots the section's own columns."""
    if data is None or not data.pivoted:
        return []
    blocks = []
    first = len(section.columns) + 1 + _CHART_COLUMNS + 1
    for panel in data.panels:
        blocks.append((first, panel))
        first += len(panel.names) + 2  # the labels, the series, an empty column
    return blocks


def _label_format(section: SectionData) -> str | None:
    """The number format of the x axis labels when the label column holds dates or times."""
    dtype = section.types[0]
    if pa.types.is_timestamp(dtype):
        return "yyyy-mm-dd hh:mm:ss"
    if pa.types.is_date(dtype):
        return "yyyy-mm-dd"
    return None


def _width(section: SectionData, col: int) -> float:
    """A column width from the header and the first rows (Excel units ~ characters)."""
    sample = [len(str(row[col])) for row in section.rows[:_WIDTH_SAMPLE] if row[col] is not None]
    return float(min(max([len(section.columns[col]), 10, *sample]) + 2, 60))
