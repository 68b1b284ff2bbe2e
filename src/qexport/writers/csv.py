"""CSV (RFC 4180: comma, CRLF) and TSV (tab, LF), UTF-8 without BOM, one header row.

pyarrow's CSV encoder does the formatting: every string is quoted (quotes doubled), NULL is
an empty unquoted field, so an empty string (`""`) and NULL stay distinguishable. Values
with no CSV form are written as text: nested values as JSON, binary as base64.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pcsv

from qexport.writers.jsonvalues import iso_timestamps, to_text
from qexport.writers.neutralize import prefix_formulas
from qexport.writers.pipeline import SinkFile, ordered_map, prefetched, regroup, task_rows
from qexport.writers.textual import is_string_like, unwrap, utf8

if TYPE_CHECKING:
    from qexport.ports import Sink, WriterOptions

Converter = Callable[[pa.Array], pa.Array]


class DelimitedWriter:
    """Writes delimited text; `CSV_WRITER` and `TSV_WRITER` are the two configurations."""

    def __init__(self, *, extension: str, media_type: str, delimiter: str, eol: str) -> None:
        self.extension = extension
        self.media_type = media_type
        self._options = pcsv.WriteOptions(include_header=False, delimiter=delimiter, eol=eol)

    def write(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        sink: Sink,
        options: WriterOptions,
    ) -> int:
        """Encode every batch into `sink`, in bounded memory; return the data row count."""
        neutralize = options.neutralize_formulas
        converters = [_converter(field.type, neutralize=neutralize) for field in schema]
        out = SinkFile(sink)
        out.write(self._header(schema, neutralize=neutralize))

        def encode(group: list[pa.RecordBatch]) -> tuple[pa.Buffer, int]:
            stream = pa.BufferOutputStream()
            for batch in group:
                columns = [
                    convert(column)
                    for convert, column in zip(converters, batch.columns, strict=True)
                ]
                names = [f"c{index}" for index in range(len(columns))]
                pcsv.write_csv(pa.RecordBatch.from_arrays(columns, names), stream, self._options)
            return stream.getvalue(), sum(batch.num_rows for batch in group)

        rows = 0
        with (
            prefetched(batches) as source,
            closing(ordered_map(encode, regroup(source, max_rows=task_rows(schema)))) as encoded,
        ):
            for data, count in encoded:
                out.write(data)
                rows += count
        out.flush()
        return rows

    def _header(self, schema: pa.Schema, *, neutralize: bool) -> pa.Buffer:
        names = pa.array(schema.names, pa.string())
        if neutralize:
            names = prefix_formulas(names)
        columns = [names.slice(index, 1) for index in range(len(names))]
        stream = pa.BufferOutputStream()
        if columns:
            labels = [f"c{index}" for index in range(len(columns))]
            pcsv.write_csv(pa.RecordBatch.from_arrays(columns, labels), stream, self._options)
        return stream.getvalue()


def _converter(arrow_type: pa.DataType, *, neutralize: bool) -> Converter:
    """How a column of this type becomes CSV-ready: as is, as text, neutralised or not."""
    if pa.types.is_float16(arrow_type):
        return _as_float32
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return _aware_timestamps
    if _is_native(arrow_type):
        return _unchanged
    text = utf8 if is_string_like(arrow_type) else to_text
    if not neutralize:
        return text
    return lambda column: prefix_formulas(text(column))


def _unchanged(column: pa.Array) -> pa.Array:
    return unwrap(column)


def _as_float32(column: pa.Array) -> pa.Array:
    return column.cast(pa.float32())


def _aware_timestamps(column: pa.Array) -> pa.Array:
    # Wall-clock time in the column's zone plus its offset; pyarrow's own CSV formatting of
    # aware timestamps looks the zone up per value and is 15x slower.
    return iso_timestamps(column, separator=" ")


def _is_native(arrow_type: pa.DataType) -> bool:
    """Types pyarrow's CSV encoder formats itself, never formula-looking."""
    return bool(
        pa.types.is_null(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_time(arrow_type)
        or pa.types.is_timestamp(arrow_type)
    )


CSV_WRITER = DelimitedWriter(
    extension="csv", media_type="text/csv; charset=utf-8", delimiter=",", eol="\r\n"
)
TSV_WRITER = DelimitedWriter(
    extension="tsv", media_type="text/tab-separated-values; charset=utf-8", delimiter="\t", eol="\n"
)
