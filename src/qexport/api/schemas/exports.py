"""An export requested, shown and listed, and its events."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from qexport.api.schemas.fields import ANY_FORMAT, ExportOptions, ParameterName, ParameterValue, Ref
from qexport.api.schemas.recipients import Recipients
from qexport.domain.exports import EventKind, Status
from qexport.domain.failures import FailureCode
from qexport.services.subjects import MAX_PARAMETERS


class ExportRequest(BaseModel):
    """Exactly one of `query_id` and `report_id`."""

    model_config = ConfigDict(extra="forbid")

    query_id: Ref | None = None
    report_id: Ref | None = None
    # Checked against the registry (422 with field "format"); the enum documents the choice.
    format: str = Field(
        description="Queries: csv, tsv, jsonl, parquet, xlsx; reports: pdf, xlsx, html",
        json_schema_extra={"enum": list(ANY_FORMAT), "maxLength": 20},
    )
    parameters: dict[ParameterName, ParameterValue] = Field(
        default_factory=dict, max_length=MAX_PARAMETERS
    )
    options: ExportOptions = ExportOptions(neutralize_formulas=True)
    notify: Recipients = Field(
        default_factory=list,
        description="Who hears once the export settles, each recipient once",
    )


ExportStatus = Literal["queued", "running", "succeeded", "failed", "expired"]


class ExportSubject(BaseModel):
    type: str
    id: str
    name: str


class ExportProgress(BaseModel):
    rows: int


class ExportFailure(BaseModel):
    code: FailureCode
    detail: str | None


class Export(BaseModel):
    """An export; `status` is `expired` once a succeeded file is past `expires_at`."""

    id: str
    status: ExportStatus
    subject: ExportSubject
    format: str
    parameters: dict[str, Any]
    filename: str
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    expires_at: datetime | None
    size_bytes: int | None
    row_count: int | None
    sha256: str | None
    attempts: int
    progress: ExportProgress
    failure: ExportFailure | None


class ExportList(BaseModel):
    items: list[Export]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )
    prev_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the page of newer exports; null on the newest page.",
    )


class ExportEventItem(BaseModel):
    """One transition of an export, as written in the transition's own transaction."""

    at: datetime
    kind: EventKind
    status: Status
    attempt: int
    worker_id: str | None
    code: FailureCode | None
    detail: str | None


class ExportEventList(BaseModel):
    items: list[ExportEventItem]
