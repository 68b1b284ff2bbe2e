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
from qexport.reports.model import SectionData, chart_columns

if TYPE_CHECKING:
    import pyarrow as pa

    from qexport.domain.exports import ExportRecord
    from qexport.domain.queries import Query
    from qexport.worker.lease import Lease
    from qexport.worker.runner import Deps

# Errors of the query itself: re-raised with the section named, same failure code.
_QUERY_ERRORS = (QueryInvalidError, QueryTimeoutError, SourceUnavailableError)


def read_section(
    deps: Deps, record: ExportRecord, section: Section, query: Query, lease: Lease, done: int
) -> SectionData:
    """The section's rows, read with the requester's context; `done`: rows read before it."""
    try:
        return _read(deps, record, section, query, lease, done)
    except _QUERY_ERRORS as exc:
        raise QExportError(f"section {section.heading!r}: {exc}", code=exc.code) from exc


def _read(
    deps: Deps, record: ExportRecord, section: Section, query: Query, lease: Lease, done: int
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
    )
    try:
        schema = stream.schema
        # A chart without numbers fails before any row is read, in every format.
        chart_columns(section.heading, section.display, schema.types)
        rows: list[tuple[Any, ...]] = []
        truncated = False
        batches = iter(stream)
        for batch in batches:
            lease.check()
            room = section.row_cap - len(rows)
            if batch.num_rows > room:
                truncated = True
            rows.extend(_tuples(batch, room))
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
    )


def _tuples(batch: pa.RecordBatch, limit: int) -> list[tuple[Any, ...]]:
    part = batch.slice(0, limit)
    return list(zip(*(column.to_pylist() for column in part.columns), strict=True))


def _has_more(batches: Iterator[pa.RecordBatch]) -> bool:
    """Whether one more non-empty batch follows (reads at most that one batch)."""
    return any(batch.num_rows for batch in islice(batches, 1))
