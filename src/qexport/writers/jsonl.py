"""JSON Lines: one JSON object per row, keys in column order, UTF-8, `\\n` after each row."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from qexport.domain.formats import FILE_FORMATS
from qexport.writers.jsonvalues import json_fragments, json_key
from qexport.writers.pipeline import (
    SinkFile,
    ordered_map,
    prefetched,
    regroup,
    task_rows,
    text_buffer,
)

if TYPE_CHECKING:
    from qexport.ports import Sink, WriterOptions


class JsonLinesWriter:
    """Formula neutralisation does not apply: JSON is data, never opened as a spreadsheet."""

    extension = FILE_FORMATS["jsonl"].extension
    media_type = FILE_FORMATS["jsonl"].media_type

    def write(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        sink: Sink,
        options: WriterOptions,
    ) -> int:
        """Encode every batch into `sink`, in bounded memory; return the data row count."""
        keys = [
            ("{" if index == 0 else ",") + json_key(name) + ":"
            for index, name in enumerate(schema.names)
        ]
        out = SinkFile(sink)
        rows = 0
        with (
            prefetched(batches) as source,
            closing(
                ordered_map(
                    lambda group: _encode(keys, group), regroup(source, max_rows=task_rows(schema))
                )
            ) as encoded,
        ):
            for buffers, count in encoded:
                for data in buffers:
                    out.write(data)
                rows += count
        out.flush()
        return rows


def _encode(keys: list[str], group: list[pa.RecordBatch]) -> tuple[list[pa.Buffer], int]:
    return [text_buffer(json_lines(keys, batch)) for batch in group], sum(b.num_rows for b in group)


def json_lines(keys: list[str], batch: pa.RecordBatch) -> pa.Array:
    """Each row as `{"key":value,...}\\n`: a string array without nulls."""
    if not keys:
        return pa.array(["{}\n"] * batch.num_rows, pa.string())
    pieces: list[object] = []
    for key, column in zip(keys, batch.columns, strict=True):
        pieces += [key, json_fragments(column)]
    return pc.binary_join_element_wise(*pieces, "}\n", "")
