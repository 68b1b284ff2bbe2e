"""Parquet through pyarrow's ParquetWriter: the Arrow schema is kept, snappy pages.

Decimals stay decimals, dates dates, timestamps keep their unit and zone. Parquet has no
column type for Arrow intervals or unions; those columns are written as text (the same ISO
8601 durations and text as in CSV). Sources may deliver small batches and ParquetWriter
makes one row group per write, so batches are gathered into row groups of a sensible size
first (memory is bounded by one row group).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from qexport.domain.failures import FailureCode, QExportError
from qexport.domain.formats import FILE_FORMATS
from qexport.writers.jsonvalues import to_text
from qexport.writers.pipeline import SinkFile, prefetched

if TYPE_CHECKING:
    from qexport.ports import Sink, WriterOptions

ROW_GROUP_ROWS = 1_048_576
ROW_GROUP_BYTES = 64 * 1024 * 1024


class ParquetFileWriter:
    extension = FILE_FORMATS["parquet"].extension
    media_type = FILE_FORMATS["parquet"].media_type

    def __init__(
        self, *, row_group_rows: int = ROW_GROUP_ROWS, row_group_bytes: int = ROW_GROUP_BYTES
    ) -> None:
        self._row_group_rows = row_group_rows
        self._row_group_bytes = row_group_bytes

    def write(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        sink: Sink,
        options: WriterOptions,
    ) -> int:
        """Encode every batch into `sink`, in bounded memory; return the data row count."""
        as_text = [i for i, field in enumerate(schema) if _has_no_parquet_type(field.type)]
        stored = schema
        for index in as_text:
            stored = stored.set(index, schema.field(index).with_type(pa.string()))
        out = SinkFile(sink)
        try:
            writer = pq.ParquetWriter(out, stored, compression="snappy")
        except pa.ArrowNotImplementedError as exc:
            raise QExportError(
                f"the result cannot be written as Parquet: {exc}", code=FailureCode.RENDER_FAILED
            ) from exc
        try:
            with prefetched(batches) as source:
                converted = (_with_text_columns(batch, stored, as_text) for batch in source)
                rows = self._write_row_groups(writer, stored, converted)
            writer.close()
        except BaseException:
            # Closing writes the footer; the sink must not see it after a failure.
            out.discard()
            with suppress(Exception):
                writer.close()
            raise
        out.flush()
        return rows

    def _write_row_groups(
        self, writer: pq.ParquetWriter, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
    ) -> int:
        rows = 0
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        pending_bytes = 0
        for batch in batches:
            pending.append(batch)
            pending_rows += batch.num_rows
            pending_bytes += batch.nbytes
            if pending_rows >= self._row_group_rows or pending_bytes >= self._row_group_bytes:
                rows += self._flush(writer, schema, pending)
                pending, pending_rows, pending_bytes = [], 0, 0
        return rows + self._flush(writer, schema, pending)

    def _flush(
        self, writer: pq.ParquetWriter, schema: pa.Schema, pending: list[pa.RecordBatch]
    ) -> int:
        table = pa.Table.from_batches(pending, schema=schema)
        if table.num_rows:
            writer.write_table(table, row_group_size=self._row_group_rows)
        return int(table.num_rows)


def _has_no_parquet_type(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_interval(arrow_type) or pa.types.is_union(arrow_type))


def _with_text_columns(
    batch: pa.RecordBatch, schema: pa.Schema, as_text: list[int]
) -> pa.RecordBatch:
    if not as_text:
        return batch
    columns = list(batch.columns)
    for index in as_text:
        columns[index] = to_text(columns[index])
    return pa.RecordBatch.from_arrays(columns, schema=schema)
