"""XLSX with XlsxWriter: one sheet per section with typed cells; the title block (title,
requester, generation time) goes into the workbook's document properties.

Each cell holds what it would in an exported xlsx: the section's values go, a block of rows at
a time, through the export writer's rule (writers/xlsx_values.column_rule), so numbers,
integers past 2**53, NaN and infinities, dates, times and zones, decimals and their formats,
binary and nested values are the same cells in both. Strings are always written with
write_string, so no cell value ever becomes a formula (or a link, or a number); formula-
looking text is marked "quote prefix", as exports do by default; strings are stored exactly
(see `_ExactWorksheet`), numbers with their exact text (see `_ExactNumber`).
XlsxWriter needs a seekable file, so the workbook is written in constant-memory mode to a file
in a private temporary directory, then copied into the sink; memory stays at one row whatever
the row count (and a block of rows' cells as they are made).

Why XlsxWriter here, when exports use qexport's own streaming writer (writers/xlsx.py).
Measured with bench/xlsx_writers.py (CPU time, best of 5, three runs on a shared 2-core
machine): the same 200,000 rows of BIGINT, DOUBLE, VARCHAR, DATE, DECIMAL(12,2) and TIMESTAMP
take 0.50-0.59 s through the export writer and 6.4-7.3 s through this one (12-13x: about
33 us a row here, 2.5 us there), 7.0-7.9 s as a bar chart (0.2 s of the difference is the
chart's data, reports/charts.py, which any writer needs). So the rows would be far cheaper
through the streaming writer, and a chart adds under a second even over 200,000 rows; but that
writer has none of what a report needs beyond the rows: named sheets of different columns in
one workbook, the pivoted blocks beside the rows, document properties, and the drawing and
chart parts (DrawingML) that XlsxWriter writes. A section holds at most 100,000 rows (1,000 by
default): about 3.3 s (33 ms) of CPU here. So a report keeps XlsxWriter; the cell rules are
shared (writers/xlsx_values.py), so the two differ in speed only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import xlsxwriter
from xlsxwriter.format import Format
from xlsxwriter.worksheet import Worksheet

from qexport.domain.reports import Display
from qexport.ports import Sink
from qexport.reports.charts import PALETTE, ChartData, Panel, chart_data, legend_shown
from qexport.reports.model import DocumentInfo, SectionData
from qexport.writers.neutralize import looks_like_formula
from qexport.writers.xlsx_parts import ooxml_escape, valid_sheet_name, without_controls
from qexport.writers.xlsx_values import Cells, ColumnRule, column_rule

_ROWS_AT_ONCE = 4_096  # rows whose cells are made together, a column at a time
_TEXT_RULE = column_rule(pa.string())
_FLOAT_RULE = column_rule(pa.float64())  # a chart's pivoted values
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
            },
        )
        self._bold = self._book.add_format({"bold": True})
        self._bold_quoted = self._book.add_format({"bold": True, "quote_prefix": True})
        self._quoted = self._book.add_format({"quote_prefix": True})
        self._number_formats: dict[str, Format] = {}
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
        columns = [_data_column(section, col) for col in range(len(section.columns))]
        for col, name in enumerate(section.columns):
            self._header(sheet, col, name)
            sheet.set_column(col, col, _width(section, col, columns[col].rule.width))
        for first, panel in blocks:
            sheet.set_column(first, first + len(panel.names), 14)
            self._header(sheet, first, panel.title or "")
            for s, name in enumerate(panel.names, start=1):
                self._header(sheet, first + s, name)
        sheet.freeze_panes(1, 0)
        if chart is not None:
            for first, panel in blocks:
                columns += _pivot_columns(section, chart, first, panel)
        self._rows(sheet, columns)
        if chart is not None:
            self._charts(sheet, section, chart, blocks)

    def _header(self, sheet: Worksheet, col: int, name: str) -> None:
        quoted = looks_like_formula(name)
        sheet.write_string(0, col, name, self._bold_quoted if quoted else self._bold)

    def _rows(self, sheet: Worksheet, columns: list[_SheetColumn]) -> None:
        """Every column's cells from row 1 down; rows in order, as constant-memory mode needs."""
        height = max((column.height for column in columns), default=0)
        indexes = [column.index for column in columns]
        formats = [self._number_format(column.rule.number_format) for column in columns]
        for start in range(0, height, _ROWS_AT_ONCE):
            block = [column.cells(start, start + _ROWS_AT_ONCE) for column in columns]
            for row, cells in enumerate(zip_longest(*block), start=start + 1):
                for col, value, number_format in zip(indexes, cells, formats, strict=True):
                    if value is not None:
                        self._cell(sheet, row, col, value, number_format)

    def _cell(
        self, sheet: Worksheet, row: int, col: int, value: Any, number_format: Format | None
    ) -> None:
        if value.__class__ is str:
            sheet.write_string(row, col, value, self._quoted if looks_like_formula(value) else None)
        elif value.__class__ is bool:
            sheet.write_boolean(row, col, value)
        else:
            sheet.write_number(row, col, value, number_format)

    def _number_format(self, code: str | None) -> Format | None:
        if code is None:
            return None
        if code not in self._number_formats:
            self._number_formats[code] = self._book.add_format({"num_format": code})
        return self._number_formats[code]

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


class _ExactNumber(float):
    """A number that XlsxWriter writes with the exact text `xlsx_values` gives it, as an
    exported xlsx holds it. XlsxWriter formats a number with `{number:.16G}`, which rounds a
    float that needs 17 digits (0.30000000000000004) and a decimal's digits past the 16th;
    formatting this one gives its text."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> Self:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __format__(self, spec: str) -> str:
        return self.text


@dataclass(frozen=True)
class _SheetColumn:
    """One column of a sheet below its header: where it goes, the rule of its Arrow type, and
    its values (rows start..stop of them, as Python values)."""

    index: int
    arrow_type: pa.DataType
    rule: ColumnRule
    height: int
    values: Callable[[int, int], list[Any]]

    def cells(self, start: int, stop: int) -> list[Any]:
        """Rows start..stop as cells: an _ExactNumber, a bool, a str, or None (no cell)."""
        values = self.values(start, stop)
        try:
            cells = self.rule.cells(pa.array(values, self.arrow_type))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            # A type Arrow cannot build from Python values (a union): each value's text, as
            # an export writes it.
            texts = pa.array([None if v is None else str(v) for v in values], pa.string())
            cells = _TEXT_RULE.cells(texts)
        return _as_python(cells, len(values))


def _data_column(section: SectionData, col: int) -> _SheetColumn:
    arrow_type = section.types[col]
    rows = section.rows
    return _SheetColumn(
        col,
        arrow_type,
        column_rule(arrow_type),
        len(rows),
        lambda start, stop: [row[col] for row in rows[start:stop]],
    )


def _pivot_columns(
    section: SectionData, chart: ChartData, first: int, panel: Panel
) -> list[_SheetColumn]:
    """A panel's pivoted block: the label column's values, then one number per series."""
    label_type = section.types[0]
    columns = [
        _SheetColumn(
            first, label_type, column_rule(label_type), len(chart.keys), _slicer(chart.keys)
        )
    ]
    for s, values in enumerate(panel.series, start=1):
        columns.append(
            _SheetColumn(first + s, pa.float64(), _FLOAT_RULE, len(values), _slicer(values))
        )
    return columns


def _slicer(values: Sequence[Any]) -> Callable[[int, int], list[Any]]:
    return lambda start, stop: list(values[start:stop])


def _as_python(cells: Cells, count: int) -> list[Any]:
    """Per row: an _ExactNumber, a bool, a str, or None."""
    parts: list[list[Any]] = []
    if cells.numbers is not None:
        texts = cells.numbers.to_pylist()
        parts.append([None if text is None else _ExactNumber(text) for text in texts])
    parts += [part.to_pylist() for part in (cells.booleans, cells.texts) if part is not None]
    if not parts:
        return [None] * count
    merged = parts[0]
    for other in parts[1:]:  # at most one of them is set in a row
        pairs = zip(merged, other, strict=True)
        merged = [value if value is not None else rest for value, rest in pairs]
    return merged


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
    if pa.types.is_timestamp(dtype) or pa.types.is_date(dtype):
        return column_rule(dtype).number_format
    return None


def _width(section: SectionData, col: int, least: float | None) -> float:
    """A column width from the header and the first rows (Excel units ~ characters), at
    least what the column's formatted values need."""
    sample = [len(str(row[col])) for row in section.rows[:_WIDTH_SAMPLE] if row[col] is not None]
    return max(float(min(max([len(section.columns[col]), 10, *sample]) + 2, 60)), least or 0.0)
