"""Whether what a run reads is sensitive, asked of the source's planner again at run time.

A query records what it reads when it is saved (services/describe.py), and an export request
is judged by that record (a request does not wait on a source). Before a preview and before
each run of an export, the source's planner is asked again, with the values the run binds: a
view redefined since the query was saved, or a parameter that decides which table is read,
is judged as it is now. A changed answer is recorded on the query (`Catalog.record_reads`),
so that its next request asks for an approval. A plan is cheap beside a run (5 ms on DuckDB,
35 ms on PostgreSQL with its own connection), and a query on a source with no sensitive table
is not planned at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from qexport.domain.exports import Requester
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query
from qexport.domain.sensitivity import merged
from qexport.ports import Catalog, SourceCatalog
from qexport.services.describe import describe_timeout
from qexport.services.requests import bind_query_values
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
) -> Query:
    """`query` with what its source's planner says it reads now, with `values` bound. What
    it read newly is added to the query's record (never taken off it: other values may read
    less, as `WHERE $flag` folded away by PostgreSQL; saving the query again starts afresh).
    Raises what the source raises."""
    source = sources.source_for(query.source, requester.workspace_id)
    reads = source.relations(query.sql, dict(values), requester, timeout_seconds=timeout_seconds)
    known = query.reads
    recorded = reads if known is None or reads is None else merged(known | reads)
    if recorded != known and catalog.record_reads(
        query.id, sql=query.sql, source=query.source, reads=recorded
    ):
        log.info("query_reads_recorded", query_id=query.id, source=query.source)
    return replace(query, reads=reads)


def sensitivity_now(
    policy: WorkspacePolicy,
    sources: SourceCatalog,
    catalog: Catalog,
    requester: Requester,
    runs: Iterable[tuple[Query, Mapping[str, Any]]],
    *,
    timeout_seconds: float,
) -> str | None:
    """Why a run of these queries (each with the values it binds) needs an admin's approval
    under `policy`, judged by what their sources' planners say now; None if it does not.
    Only a query on a source with a sensitive table is planned."""
    judged = [
        planned_now(sources, catalog, requester, query, values, timeout_seconds=timeout_seconds)
        if policy.marks_tables_of(query.source)
        else query
        for query, values in runs
    ]
    return policy.sensitivity(judged)


def preview_sensitivity(
    policy: WorkspacePolicy,
    sources: SourceCatalog,
    catalog: Catalog,
    requester: Requester,
    query: Query,
    parameters: Mapping[str, Any] | None,
    *,
    statement_timeout_seconds: float,
    slots: SourceSlots,
) -> str | None:
    """Why `query` may not be previewed with `parameters` (it needs an approval to leave),
    planned with the values the preview binds, holding one of the requester's `slots` as a
    preview does (TooManyRequestsError when none is free); None if it may. InvalidRequestError
    for a bad parameter, as the preview itself would refuse it."""
    if not policy.sensitive_queries and not policy.marks_tables_of(query.source):
        return None
    values = bind_query_values(query, dict(parameters or {}))
    with slots.hold(requester):
        return sensitivity_now(
            policy,
            sources,
            catalog,
            requester,
            [(query, values)],
            timeout_seconds=describe_timeout(statement_timeout_seconds),
        )
