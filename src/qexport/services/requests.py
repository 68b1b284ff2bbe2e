"""Request an export: validate everything up front, then record it (and queue it) at once."""

from __future__ import annotations

import uuid
from typing import Any

from qexport.domain.exports import ExportRecord, Requester, safe_filename, storage_key
from qexport.domain.failures import InvalidRequestError, NotFoundError
from qexport.domain.queries import Query, bind_parameters, can_read, to_json_value
from qexport.ports import Clock, MetadataStore, NewExport
from qexport.writers.registry import get_writer

SUBJECT_QUERY = "query"


def find_readable_query(store: MetadataStore, requester: Requester, ref: str) -> Query:
    """A query by id or by name that the requester may read; NotFoundError otherwise."""
    query = store.get_query(ref)
    if query is None or query.deleted:
        query = store.find_query(requester.workspace_id, ref)
    if query is None or not can_read(requester, query):
        raise NotFoundError(f"no query {ref!r} that you can read")
    return query


def request_export(
    store: MetadataStore,
    clock: Clock,
    requester: Requester,
    *,
    query_ref: str,
    fmt: str,
    parameters: dict[str, Any] | None = None,
    neutralize_formulas: bool = True,
) -> ExportRecord:
    """Validate the request and record it as queued; bad input records nothing."""
    writer = get_writer(fmt)
    query = find_readable_query(store, requester, query_ref)
    values = bind_parameters(query, parameters or {})
    if not isinstance(neutralize_formulas, bool):
        raise InvalidRequestError("neutralize_formulas must be true or false", field="options")
    export_id = str(uuid.uuid4())
    filename = safe_filename(query.name, writer.extension)
    return store.insert_export(
        NewExport(
            id=export_id,
            workspace_id=requester.workspace_id,
            requested_by=requester.user_id,
            subject_type=SUBJECT_QUERY,
            subject_id=query.id,
            subject_name=query.name,
            format=fmt,
            parameters={k: to_json_value(v) for k, v in values.items()},
            options={"neutralize_formulas": neutralize_formulas},
            filename=filename,
            storage_key=storage_key(requester.workspace_id, export_id, filename),
            created_at=clock.now(),
        )
    )
