"""The bytes of cell data a report may hold while it renders (QEXPORT_REPORT_MAX_BYTES).

A report's rows become Python values before they are laid out, and a few wide values make
a large report of few rows: 10,000 rows of 100 KB labels are 1 GB of text, which took a
worker from 209 MB to 2.3 GB for a 683 KB HTML file. So cells are counted as they are read,
from the Arrow batch before any of it is converted: strings and binaries by their length,
every other value at a fixed size (nested values by their Arrow buffers), across sections.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from qexport.domain.failures import LimitExceededError

FIXED_CELL_BYTES = 16  # a number, date, boolean or null


def cell_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of cell data in `batch`, as counted against a report's limit."""
    total = 0
    for column in batch.columns:
        dtype = column.type
        if _is_text(dtype):
            lengths = pc.sum(pc.binary_length(column)).as_py()
            total += (lengths or 0) + FIXED_CELL_BYTES * column.null_count
        elif pa.types.is_nested(dtype) or pa.types.is_dictionary(dtype):
            total += max(column.nbytes, FIXED_CELL_BYTES * len(column))
        else:
            total += FIXED_CELL_BYTES * len(column)
    return total


def _is_text(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
    )


class CellBudget:
    """What one report has read so far, refused past `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0

    def charge(self, heading: str, batch: pa.RecordBatch) -> None:
        """Count `batch` (rows about to be kept for section `heading`); LimitExceededError,
        naming the section, when the report would hold more than its limit."""
        self.used += cell_bytes(batch)
        if self.used > self.max_bytes:
            raise LimitExceededError(
                f"section {heading!r} brings the report past {self.max_bytes:,} bytes of cell"
                " data held while it renders (QEXPORT_REPORT_MAX_BYTES); lower the"
                " sections' row_cap, or select fewer or shorter columns"
            )
