"""Writers: a format's bytes from record batches, into a sink."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa


class Sink(Protocol):
    """Where a writer's bytes go (the upload, through hashing and limits)."""

    def write(self, data: bytes | bytearray | memoryview, /) -> int: ...


@dataclass(frozen=True)
class WriterOptions:
    neutralize_formulas: bool = True


class Writer(Protocol):
    extension: str
    media_type: str

    def write(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        sink: Sink,
        options: WriterOptions,
    ) -> int:
        """Encode every batch into `sink`, in bounded memory; return the data row count."""
        ...
