"""Whether what a run reads is sensitive, asked of the source's planner again at run time.

A query records what it reads when it is saved (services/describe.py), and an export request
is judged by that record (a request does not wait on a source). Before a preview and before
each run of an export, the source's planner is asked again, with the values the run binds: a
view redefined since the query was saved, or a parameter that decides which table is read,
is judged as it is now. A changed answer is recorded on the query (`Catalog.record_reads`),
so that its next request asks for an approval. A plan is cheap beside a run (5 ms on DuckDB,
35 ms on PostgreSQL with its own connection), and a preview of a query on a source with no
sensitive table is not planned at all.

Every run of an export is planned, whatever the policy says now, and what it read is
recorded with its file (`Result.reads`, the export's `reads`): a file is judged by what it
was made from, not by what its query reads when a rule is added later. The query's SQL may
have changed since, and `WHERE $flag` folded away by PostgreSQL read no table when the query
was saved, but `orders` in a run with flag = true. A plan that fails on a source the policy
marks nothing of does not stop the run (it would fail on its own if the statement did): that
source's reads are not on record, which a rule added later reads as every table it marks.

A preview's plan is asked of a preview process (PreviewRunner.relations), as its rows are:
DuckDB folds constants as it plans, so planning `SELECT length(repeat('x', 1000000000))` in
the server would take the server's memory. A worker plans in its own process, whose memory
it watches (worker/memory.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from qexport.domain.exports import Requester
from qexport.domain.failures import QExportError
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query
from qexport.domain.sensitivity import Relation, joined_reads, merged
from qexport.ports import Catalog, PlanJob, PreviewRunner, SourceCatalog
from qexport.services.describe import describe_timeout
from qexport.services.slots import SourceSlots

log = structlog.get_logger()


def planned_now(
    sources: SourceCatalog,
    catalog: Catalog,
    requester: Requester,
    query: Query,
    values: Mapping[str, Any],
    *,
    timeout_seconds: float,
    runner: PreviewRunner | None = None,
) -> Query:
    """`query` with what its source's planner says it reads now, with `values` bound: asked
    of a preview process through `runner`, or of the source in this process without one. What
    it read newly is added to the query's record (never taken off it: other values may read
    less, as `WHERE $flag` folded away by PostgreSQL; saving the query again starts afresh).
    Raises what the source raises."""
    source = sources.source_for(query.source, requester.workspace_id)
    if runner is not None:
        job = PlanJob(query.source, query.sql, dict(values), requester, timeout_seconds)
        reads = runner.relations(job)
    else:
        reads = source.relations(
            query.sql, dict(values), requester, timeout_seconds=timeout_seconds
        )
    known = query.reads
    recorded = reads if known is None or reads is None else merged(known | reads)
    if recorded != known and catalog.record_reads(
        query.id, sql=query.sql, source=query.source, reads=recorded
    ):
        log.info("query_reads_recorded", query_id=query.id, source=query.source)
    return replace(query, reads=reads)


@dataclass(frozen=True)
class PlannedRuns:
    """What a run's queries read, as their sources' planners say now: each query with its
    reads now (for the policy's judgement), and the file's record of them (by source)."""

    queries: list[Query]
    reads: dict[str, frozenset[Relation] | None]


def planned_runs(
    policy: WorkspacePolicy,
    sources: SourceCatalog,
    catalog: Catalog,
    requester: Requester,
    runs: Iterable[tuple[Query, Mapping[str, Any]]],
    *,
    timeout_seconds: float,
) -> PlannedRuns:
    """Every run planned in this process (`planned_now`), for the file's record and the
    policy's judgement. A plan's failure is raised for a source the policy marks tables of;
    on another source it leaves that source's reads unknown (the run goes on)."""
    judged: list[Query] = []
    read: list[tuple[str, frozenset[Relation] | None]] = []
    for query, values in runs:
        try:
            planned = planned_now(
                sources, catalog, requester, query, values, timeout_seconds=timeout_seconds
            )
        except QExportError:
            if policy.marks_tables_of(query.source):
                raise
            log.warning("run_not_planned", query_id=query.id, source=query.source, exc_info=True)
            judged.append(query)
            read.append((query.source, None))
            continue
        judged.append(planned)
        read.append((query.source, planned.reads))
    return PlannedRuns(judged, joined_reads(read))


def sensitivity_now(
    policy: WorkspacePolicy,
    sources: SourceCatalog,
    catalog: Catalog,
    requester: Requester,
    runs: Iterable[tuple[Query, Mapping[str, Any]]],
    *,
    timeout_seconds: float,
    runner: PreviewRunner | None = None,
) -> str | None:
    """Why a run of these queries (each with the values it binds) needs an admin's approval
    under `policy`, judged by what their sources' planners say now (through `runner`, as
    `planned_now`); None if it does not. Only a query on a source with a sensitive table is
    planned."""
    judged = [
        planned_now(
            sources,
            catalog,
            requester,
            query,
            values,
            timeout_seconds=timeout_seconds,
            runner=runner,
        )
        if policy.marks_tables_of(query.source)
        else query
        for query, values in runs
    ]
    return policy.sensitivity(judged)


def preview_sensitivity(  # noqa: PLR0913 - a preview's own inputs, as services/preview.py holds them
    policy: WorkspacePolicy,
    sources: SourceCatalog,
    catalog: Catalog,
    runner: PreviewRunner,
    requester: Requester,
    query: Query,
    values: Mapping[str, Any],
    *,
    statement_timeout_seconds: float,
    slots: SourceSlots,
) -> str | None:
    """Why `query` may not be previewed with `values` (the preview's bound values): it needs
    an approval to leave. Planned by a preview process (`runner`), holding one of the
    requester's `slots` as a preview does (TooManyRequestsError when none is free); None if
    it may."""
    if not policy.sensitive_queries and not policy.marks_tables_of(query.source):
        return None
    with slots.hold(requester):
        return sensitivity_now(
            policy,
            sources,
            catalog,
            requester,
            [(query, values)],
            timeout_seconds=describe_timeout(statement_timeout_seconds),
            runner=runner,
        )
