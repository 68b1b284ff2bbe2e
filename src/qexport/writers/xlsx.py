"""XLSX, streamed: a zip of SpreadsheetML parts written straight into the sink.

Rows are encoded to XML on the encoding pool (see `xlsx_cells`) and deflated into the
current worksheet entry as they arrive. A sheet holds at most 1,048,575 data rows (Excel's
limit, header excluded); the next rows go to "Sheet2", and so on, each with the header row.

Zip entries are written with data descriptors (the sink cannot seek) and without ZIP64
records: Excel is reported to reject workbooks whose local headers carry ZIP64 fields with
data descriptors (minizip-ng#894, duckdb-excel#64). So every worksheet also ends before its
XML reaches `sheet_bytes` (3 GiB), far enough under the 4 GiB plain-zip limit.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import pyarrow as pa

from qexport.domain.failures import LimitExceededError
from qexport.domain.formats import FILE_FORMATS
from qexport.writers.pipeline import (
    SinkFile,
    ordered_map,
    prefetched,
    regroup,
    task_rows,
    text_buffer,
)
from qexport.writers.xlsx_cells import SheetColumns, plan_columns, rows_xml
from qexport.writers.xlsx_parts import (
    MAX_COLUMNS,
    SHEET_END,
    Styles,
    content_types,
    root_rels,
    sheet_path,
    sheet_start,
    workbook,
    workbook_rels,
)

if TYPE_CHECKING:
    from qexport.ports import Sink, WriterOptions

MAX_DATA_ROWS = 1_048_575  # 1,048,576 worksheet rows, one of them the header
SHEET_BYTES = 3 * 1024**3
COMPRESS_LEVEL = 1  # deflate is the bottleneck; level 1 is several times faster than 6


class XlsxFileWriter:
    extension = FILE_FORMATS["xlsx"].extension
    media_type = FILE_FORMATS["xlsx"].media_type

    def __init__(
        self, *, rows_per_sheet: int = MAX_DATA_ROWS, sheet_bytes: int = SHEET_BYTES
    ) -> None:
        if not 0 < rows_per_sheet <= MAX_DATA_ROWS:
            raise ValueError(f"rows_per_sheet must be between 1 and {MAX_DATA_ROWS}")
        self._rows_per_sheet = rows_per_sheet
        self._sheet_bytes = sheet_bytes

    def write(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        sink: Sink,
        options: WriterOptions,
    ) -> int:
        """Encode every batch into `sink`, in bounded memory; return the data row count."""
        if len(schema) > MAX_COLUMNS:
            raise LimitExceededError(
                f"the result has {len(schema)} columns; an XLSX sheet holds at most {MAX_COLUMNS}"
            )
        styles = Styles()
        columns = plan_columns(schema, styles, neutralize=options.neutralize_formulas)
        plan = _SheetPlan(self._rows_per_sheet, self._sheet_bytes)
        out = SinkFile(sink)
        archive = zipfile.ZipFile(
            out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL
        )
        book = _Sheets(archive, columns)
        try:
            # Package relationships first: file-type sniffers read the first entries.
            _put(archive, "_rels/.rels", root_rels())
            _put(archive, "xl/styles.xml", styles.xml())
            book.open_next()
            with (
                prefetched(batches) as source,
                closing(
                    ordered_map(
                        lambda task: task.encode(columns),
                        plan.tasks(regroup(source, max_rows=task_rows(schema))),
                    )
                ) as done,
            ):
                for sheet, buffers in done:
                    if sheet != book.count:
                        book.open_next()
                    for data in buffers:
                        book.write(data)
                        plan.wrote(sheet, data.size)
            book.close_current()
            _put(archive, "xl/workbook.xml", workbook(book.count))
            _put(archive, "xl/_rels/workbook.xml.rels", workbook_rels(book.count))
            _put(archive, "[Content_Types].xml", content_types(book.count))
            archive.close()
        except BaseException:
            # Close the half-written zip without touching the sink, so this error propagates.
            out.discard()
            with suppress(Exception):
                book.close_current()
                archive.close()
            raise
        out.flush()
        return plan.rows


@dataclass(frozen=True)
class _Task:
    """Consecutive rows of one sheet; `first_row` is the worksheet row of the first one."""

    sheet: int
    first_row: int
    batches: list[pa.RecordBatch]

    def encode(self, columns: SheetColumns) -> tuple[int, list[pa.Buffer]]:
        buffers = []
        row = self.first_row
        for batch in self.batches:
            buffers.append(text_buffer(rows_xml(batch, row, columns)))
            row += batch.num_rows
        return self.sheet, buffers


class _SheetPlan:
    """Assigns rows to sheets before they are encoded, so row numbers are known up front.

    A sheet is full at its row limit, or once the XML written to it passes its byte budget
    (checked between tasks; the few tasks already in flight still fit in the margin).
    """

    def __init__(self, rows_per_sheet: int, sheet_bytes: int) -> None:
        self._rows_per_sheet = rows_per_sheet
        self._sheet_bytes = sheet_bytes
        self._sheet = 1
        self._sheet_rows = 0
        self._written: dict[int, int] = {}
        self.rows = 0

    def wrote(self, sheet: int, size: int) -> None:
        self._written[sheet] = self._written.get(sheet, 0) + size

    def tasks(self, groups: Iterable[list[pa.RecordBatch]]) -> Iterator[_Task]:
        for group in groups:
            if self._sheet_rows and self._written.get(self._sheet, 0) >= self._sheet_bytes:
                self._next_sheet()
            pieces: list[pa.RecordBatch] = []
            first_row = self._sheet_rows + 2
            for batch in group:
                start = 0
                while start < batch.num_rows:
                    if self._sheet_rows == self._rows_per_sheet:
                        if pieces:
                            yield _Task(self._sheet, first_row, pieces)
                        pieces, first_row = [], 2
                        self._next_sheet()
                    take = min(batch.num_rows - start, self._rows_per_sheet - self._sheet_rows)
                    pieces.append(batch.slice(start, take))
                    start += take
                    self._sheet_rows += take
                    self.rows += take
            if pieces:
                yield _Task(self._sheet, first_row, pieces)

    def _next_sheet(self) -> None:
        self._sheet += 1
        self._sheet_rows = 0


class _Sheets:
    """The worksheet entries of the archive, one open at a time, each starting with the header."""

    def __init__(self, archive: zipfile.ZipFile, columns: SheetColumns) -> None:
        self._archive = archive
        self._columns = columns
        self._entry: IO[bytes] | None = None
        self.count = 0

    def open_next(self) -> None:
        self.close_current()
        self.count += 1
        self._entry = self._archive.open(sheet_path(self.count), "w")
        start = sheet_start(self._columns.widths, selected=self.count == 1)
        self._entry.write((start + self._columns.header).encode())

    def write(self, data: pa.Buffer) -> None:
        if self._entry is None:
            raise RuntimeError("no worksheet is open")
        self._entry.write(memoryview(data))

    def close_current(self) -> None:
        if self._entry is not None:
            entry, self._entry = self._entry, None
            entry.write(SHEET_END.encode())
            entry.close()


def _put(archive: zipfile.ZipFile, name: str, text: str) -> None:
    # `open(name, "w")` rather than writestr(): entries get a fixed timestamp, so the same
    # result always makes the same bytes (and the same sha256).
    with archive.open(name, "w") as entry:
        entry.write(text.encode())
