"""Run one section's query with the requester's rights and read at most its row cap."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from qexport.domain.failures import (
    InvalidRequestError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.domain.reports import Section, section_parameters
from qexport.reports.budget import CellBudget
from qexport.reports.model import SectionData, chart_columns

if TYPE_CHECKING:
    import pyarrow as pa

    from qexport.container import Container
    from qexport.domain.exports import ExportRecord
    from qexport.domain.queries import Query
    from qexport.ports import AttemptLease

# Small batches: each is counted against the report's budget before it becomes Python values,
# so a batch of very wide rows is refused before much of it is held (measured: 10,000 rows of
# 100 KB labels in one batch of the source's default size took 1.3 GB before it was counted).
SECTION_BATCH_ROWS = 256
# Errors of the query itself: re-raised with the section named, same failure code.
_QUERY_ERRORS = (QueryInvalidError, QueryTimeoutError, SourceUnavailableError)


def read_section(
    deps: Container,
    record: ExportRecord,
    section: Section,
    query: Query,
    lease: AttemptLease,
    done: int,
    budget: CellBudget,
) -> SectionData:
    """The section's rows, read with the requester's context; `done`: rows read before it,
    `budget`: the report's cell data, charged before each batch becomes Python values."""
    try:
        return _read(deps, record, section, query, lease, done, budget)
    except _QUERY_ERRORS as exc:
        raise QExportError(f"section {section.heading!r}: {exc}", code=exc.code) from exc


def _read(
    deps: Container,
    record: ExportRecord,
    section: Section,
    query: Query,
    lease: AttemptLease,
    done: int,
    budget: CellBudget,
) -> SectionData:
    source = deps.sources.source_for(query.source, record.requester.workspace_id)
    try:
        values = section_parameters(section, query, record.parameters)
    except InvalidRequestError as exc:
        raise QueryInvalidError(str(exc)) from exc
    stream = source.execute(
        query.sql,
        values,
        record.requester,
        timeout_seconds=deps.settings.statement_timeout_seconds,
        on_interrupt=lease.on_stop,
        batch_rows=SECTION_BATCH_ROWS,
    )
    try:
        schema = stream.schema
        # A chart without numbers fails before any row is read, in every format.
        chart_columns(section, schema.names, schema.types)
        rows: list[tuple[Any, ...]] = []
        truncated = False
        batches = iter(stream)
        for batch in batches:
            lease.check()
            room = section.row_cap - len(rows)
            if batch.num_rows > room:
                truncated = True
            kept = batch.slice(0, room)
            budget.charge(section.heading, kept)
            rows.extend(_tuples(kept))
            lease.progress_rows = done + len(rows)
            if truncated or len(rows) >= section.row_cap:
                # Stop here: the statement is interrupted by close(), the rest never read.
                truncated = truncated or _has_more(batches)
                break
    finally:
        stream.close()
    return SectionData(
        heading=section.heading,
        display=section.display,
        columns=tuple(schema.names),
        types=tuple(field.type for field in schema),
        rows=rows,
        truncated=truncated,
        series=section.series,
        values=section.values,
    )


def _tuples(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


def _has_more(batches: Iterator[pa.RecordBatch]) -> bool:
    """Whether one more non-empty batch follows (reads at most that one batch)."""
    return any(batch.num_rows for batch in islice(batches, 1))
