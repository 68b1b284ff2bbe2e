"""An export's row read back as its record, and a query's columns read beside an export's
(the claim and a download read both in one statement)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import FailureCode
from qexport.domain.sensitivity import file_reads_from_json
from qexport.store.catalog import QUERY_KEYS
from qexport.store.tables.catalog import queries

# The claim reads the candidate with its query in one statement (the query's columns
# prefixed), and hands the query on to the attempt, which then need not read it again: one
# transaction fewer per export (0.5 ms of CPU and a ping on PostgreSQL).
QUERY_PREFIX = "query_"


def query_columns() -> list[sa.Label[Any]]:
    """A query's columns beside an export's, each key prefixed (read back by to_query)."""
    return [queries.c[key].label(QUERY_PREFIX + key) for key in QUERY_KEYS]


def to_record(row: Any) -> ExportRecord:  # a Row, or an OneRead's
    m = row._mapping
    return ExportRecord(
        id=m["id"],
        workspace_id=m["workspace_id"],
        requested_by=m["requested_by"],
        subject_type=m["subject_type"],
        subject_id=m["subject_id"],
        subject_name=m["subject_name"],
        format=m["format"],
        parameters=m["parameters"],
        options=m["options"],
        filename=m["filename"],
        storage_key=m["storage_key"],
        status=Status(m["status"]),
        attempt=m["attempt"],
        created_at=m["created_at"],
        lease_token=m["lease_token"],
        lease_expires_at=m["lease_expires_at"],
        worker_id=m["worker_id"],
        started_at=m["started_at"],
        completed_at=m["completed_at"],
        expires_at=m["expires_at"],
        size_bytes=m["size_bytes"],
        row_count=m["row_count"],
        sha256=m["sha256"],
        progress_rows=m["progress_rows"],
        failure_code=FailureCode(m["failure_code"]) if m["failure_code"] else None,
        failure_detail=m["failure_detail"],
        last_error_code=FailureCode(m["last_error_code"]) if m["last_error_code"] else None,
        last_error_detail=m["last_error_detail"],
        reads=file_reads_from_json(m["reads"]),
    )
