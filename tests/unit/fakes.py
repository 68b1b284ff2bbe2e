"""Test doubles for the Source port: a fixed Arrow result, or a scripted failure."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from qexport.domain.exports import Requester
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import ReadsReported, ReadsReporting, Relation
from qexport.ports import PreviewRows


class TableStream:
    def __init__(self, table: pa.Table, on_batch: Callable[[int], None] | None = None) -> None:
        self.schema = table.schema
        self._table = table
        self._on_batch = on_batch
        self.closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for i, batch in enumerate(self._table.to_batches(max_chunksize=100)):
            if self._on_batch:
                self._on_batch(i)
            yield batch

    def close(self) -> None:
        self.closed = True


class FakeSource:
    """Returns `table`, or raises `error` (from execute, or from the n-th batch); its planner
    reports `reads` (by default no table) for every statement."""

    reads_reporting = ReadsReporting(ReadsReported.COLUMNS, default_schema="main")
    native_copy = None

    def __init__(
        self,
        table: pa.Table | None = None,
        *,
        error: Exception | None = None,
        fail_at_batch: int | None = None,
        on_batch: Callable[[int], None] | None = None,
        on_preview: Callable[[], None] | None = None,
        reads: frozenset[Relation] | None = frozenset(),
    ) -> None:
        self.name = "fake"
        self.reads = reads
        self.planned: list[tuple[str, dict[str, Any]]] = []
        self.table = (
            table if table is not None else pa.table({"n": list(range(1000)), "s": ["x"] * 1000})
        )
        self.error = error
        self.fail_at_batch = fail_at_batch
        self.on_batch = on_batch
        self.on_preview = on_preview
        self.calls: list[tuple[str, dict[str, Any], Requester]] = []
        self.streams: list[TableStream] = []

    def execute(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> TableStream:
        self.calls.append((sql, parameters, requester))
        if self.error is not None and self.fail_at_batch is None:
            raise self.error

        def hook(i: int) -> None:
            if self.on_batch:
                self.on_batch(i)
            if self.error is not None and i == self.fail_at_batch:
                raise self.error

        stream = TableStream(self.table, hook)
        self.streams.append(stream)
        return stream

    def describe(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> list[ResultColumn]:
        """The table's columns (Arrow's type names), or `error` when one is scripted."""
        self.calls.append((sql, parameters, requester))
        if self.error is not None:
            raise self.error
        return [ResultColumn(f.name, str(f.type)) for f in self.table.schema]

    def preview(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        max_rows: int,
        max_cell_chars: int,
        max_bytes: int,
    ) -> PreviewRows:
        """The table's first `max_rows` rows (`on_preview` called first, e.g. to block), or
        `error` when one is scripted; nothing is cut (a source may leave that to the caller)."""
        self.calls.append((sql, parameters, requester))
        if self.on_preview is not None:
            self.on_preview()
        if self.error is not None:
            raise self.error
        columns = tuple(ResultColumn(f.name, str(f.type)) for f in self.table.schema)
        return PreviewRows(columns, self.table.slice(0, max_rows), self.table.num_rows > max_rows)

    def relations(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """`reads`, whatever the statement (each call kept in `planned`)."""
        self.planned.append((sql, parameters))
        return self.reads

    def check_role(self) -> list[str]:
        """Nothing to judge: a fake has no login."""
        return []

    def catalogue(
        self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float
    ) -> Catalogue | None:
        """None: a fake's catalogue says nothing."""
        return None
