"""Rows written so far, read from a Parquet file as its bytes stream past.

DuckDB's `COPY ... (FORMAT parquet)` says how many rows it wrote only when it returns. The
file itself says more on the way: after the 4-byte magic, a Parquet file is a run of pages,
each a Thrift (compact protocol) `PageHeader` followed by `compressed_page_size` bytes of
data, until the footer. A data page's header gives its number of values (`num_values`; a
v2 page also `num_rows`). In a flat schema every leaf column holds one value per row, and a
row group's column chunks are written one after the other, so the data pages' values
summed, divided by the number of leaf columns, are the rows of the row groups written so
far (and a growing share of the current one). Headers are a few dozen bytes per page of
about a megabyte: reading them costs nothing next to the export.

Alternatives weighed: DuckDB's `query_progress()` is a percentage of its own work, not rows;
a counting UDF in the query runs Python per vector under the GIL and holds back DuckDB's
threads; writing v2 pages (which carry `num_rows`) would change the files people get. A
schema with repeated leaves (lists, maps) has more values than rows, and this counter then
reports nothing: the exact count still comes from COPY when it returns. Anything that does
not parse as expected (the footer, indexes written before it) ends the counting, never the
export.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MAGIC = b"PAR1"
# Page types (parquet.thrift PageType).
_DATA_PAGE, _DATA_PAGE_V2 = 0, 3
# Thrift compact protocol field types.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
# A page header is small; one that does not fit in this much is not a page header.
_MAX_HEADER = 64 * 1024
_SCALAR_IDS = frozenset(
    {
        "boolean", "tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint",
        "usmallint", "uinteger", "ubigint", "uhugeint", "float", "double", "decimal",
        "varchar", "blob", "bit", "date", "time", "time with time zone", "timestamp",
        "timestamp with time zone", "timestamp_s", "timestamp_ms", "timestamp_ns",
        "interval", "uuid", "enum",
    }
)  # fmt: skip


class _IncompleteError(Exception):
    """The bytes at hand end inside a header: wait for more."""


class _NotAPageError(Exception):
    """What follows is not a page header (the footer, or a layout not understood)."""


def leaf_count(types: list[Any]) -> int | None:
    """The leaf columns of a flat schema of DuckDB types (a struct counts its fields); None
    when a column repeats (list, map, array) or its kind is not known."""
    total = 0
    for duck_type in types:
        count = _leaves(duck_type)
        if count is None:
            return None
        total += count
    return total or None


def _leaves(duck_type: Any) -> int | None:
    kind = str(getattr(duck_type, "id", "")).lower()
    if kind == "struct":
        counts = [_leaves(child) for _name, child in duck_type.children]
        if not counts or any(c is None for c in counts):
            return None
        return sum(c for c in counts if c is not None)
    return 1 if kind in _SCALAR_IDS else None


class ParquetRowCounter:
    """Fed the file's bytes in order (`feed`), calls `on_progress` with the rows written."""

    def __init__(self, leaves: int, on_progress: Callable[[int], None]) -> None:
        self._leaves = leaves
        self._on_progress = on_progress
        self._pending = b""  # the start of a header cut by the end of a chunk
        self._skip = len(_MAGIC)  # bytes to pass over before the next header
        self._values = 0
        self._done = False

    def feed(self, chunk: memoryview) -> None:
        if self._done:
            return
        size = len(chunk)
        if self._skip >= size:
            self._skip -= size
            return
        data = self._pending + bytes(chunk[self._skip :]) if self._pending else chunk[self._skip :]
        self._pending, self._skip = b"", 0
        before = self._values
        pos = 0
        while pos < len(data):
            try:
                end, page_type, values, page_size = _page_header(data, pos)
            except _IncompleteError:
                if len(data) - pos > _MAX_HEADER:
                    self._done = True
                else:
                    self._pending = bytes(data[pos:])
                break
            except _NotAPageError:
                self._done = True
                break
            if page_type in (_DATA_PAGE, _DATA_PAGE_V2):
                self._values += values
            pos = end + page_size
        if pos > len(data):
            self._skip = pos - len(data)
        if self._values != before:
            self._on_progress(self._values // self._leaves)


def _page_header(data: Any, pos: int) -> tuple[int, int, int, int]:
    """(end of the header, page type, values in a data page, compressed size) at `pos`."""
    reader = _Compact(data, pos)
    page_type = compressed = -1
    values = 0
    for field_id, kind in reader.fields():
        if field_id == 1 and kind == _I32:
            page_type = reader.varint_signed()
        elif field_id == 3 and kind == _I32:
            compressed = reader.varint_signed()
        elif field_id in (5, 8) and kind == _STRUCT:
            values = _first_i32(reader)  # num_values of a data page, v1 or v2
        else:
            reader.skip(kind)
    if page_type < 0 or compressed < 0:
        raise _NotAPageError
    return reader.pos, page_type, values, compressed


def _first_i32(reader: _Compact) -> int:
    """Field 1 (an i32) of the struct at hand, the rest of it skipped."""
    found = 0
    for field_id, kind in reader.fields():
        if field_id == 1 and kind == _I32:
            found = reader.varint_signed()
        else:
            reader.skip(kind)
    return found


class _Compact:
    """Just enough of Thrift's compact protocol to read and skip a page header's fields."""

    def __init__(self, data: Any, pos: int) -> None:
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _IncompleteError
        value = int(self.data[self.pos])
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise _NotAPageError

    def varint_signed(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> Any:
        """(field id, type) of each field of the struct at hand, up to its stop byte."""
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return
            kind, delta = header & 0x0F, header >> 4
            field_id = last + delta if delta else self.varint_signed()
            if not 1 <= kind <= _STRUCT:
                raise _NotAPageError
            last = field_id
            yield field_id, kind

    def skip(self, kind: int) -> None:  # noqa: PLR0912 - one branch per Thrift type
        if kind in (_BOOL_TRUE, _BOOL_FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self._advance(8)
        elif kind == _BINARY:
            self._advance(self.varint())
        elif kind in (_LIST, _SET):
            header = self.byte()
            count = header >> 4
            if count == 0x0F:
                count = self.varint()
            element = header & 0x0F
            for _ in range(count):
                if element in (_BOOL_TRUE, _BOOL_FALSE):  # a list's booleans take a byte each
                    self.byte()
                else:
                    self.skip(element)
        elif kind == _MAP:
            count = self.varint()
            if count:
                types = self.byte()
                for _ in range(count):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif kind == _STRUCT:
            for _field_id, inner in self.fields():
                self.skip(inner)
        else:
            raise _NotAPageError

    def _advance(self, n: int) -> None:
        if n < 0 or n > _MAX_HEADER:
            raise _NotAPageError
        if self.pos + n > len(self.data):
            raise _IncompleteError
        self.pos += n
