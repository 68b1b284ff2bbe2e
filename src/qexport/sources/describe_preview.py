"""What the sources' describe and preview share."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def cut_values(table: pa.Table, keep: int) -> pa.Table:
    """Texts to `keep` characters and binaries to `keep` bytes: the caller sees they were
    longer, and shows no more."""
    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type):
            columns.append(pc.utf8_slice_codeunits(column, 0, keep))
        elif pa.types.is_binary(column.type):
            columns.append(pc.binary_slice(column, 0, keep))
        else:
            columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)
