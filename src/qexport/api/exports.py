"""/api/v1/exports: request, read, list, download, cancel, and the events of an export.

A member sees their own exports and an admin every export of the workspace; anything else
answers 404 exactly like an id that was never issued.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic.json_schema import SkipJsonSchema

from qexport.api.approvals import Approval, approval_view
from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.exports import (
    Export,
    ExportEventItem,
    ExportEventList,
    ExportList,
    ExportRequest,
)
from qexport.api.schemas.problems import problem_responses
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.commands import CancelExport, ListExports, RequestExport, SubjectRef
from qexport.domain.cursors import MAX_CURSOR_CHARS
from qexport.domain.exports import ExportRecord
from qexport.http.download import DownloadConditions, download, file_responses
from qexport.http.one_hop import OneHopRoute
from qexport.services.exports import (
    FORMAT_CHOICES,
    MAX_EXPORT_ID_CHARS,
    MAX_INSTANT_CHARS,
    MAX_PAGE,
    MAX_SEARCH_CHARS,
    MAX_USER_CHARS,
    STATUS_CHOICES,
    cancel_export,
    get_visible_export,
    list_visible_events,
)
from qexport.services.exports import list_exports as list_exports_page
from qexport.services.requests import request
from qexport.services.views import export_view

router = APIRouter(route_class=OneHopRoute, tags=["exports"])


def _view(record: ExportRecord, context: Context) -> Export:
    return Export.model_validate(export_view(record, context.clock.now()))


@router.post(
    "/exports",
    status_code=202,
    response_model=Export | Approval,
    responses={
        202: {
            "description": "Recorded and queued; or, for a query the workspace's policy marks"
            " sensitive, recorded as awaiting an admin's approval (an `Approval`, whose"
            " `kind` is `approval`).",
            "headers": {"Location": {"schema": {"type": "string"}}},
        },
        **problem_responses(400, 401, 403, 404, 413, 422, 429, 503),
    },
)
def create_export(
    body: ExportRequest, principal: CurrentPrincipal, context: Context, response: Response
) -> Export | Approval:
    """Request an export of a query or report the caller may read; it is queued at once.
    Reports take the formats pdf, xlsx and html; queries the tabular formats. Viewers may
    `notify` only their own email address; webhooks and other addresses need the editor
    role (403). A sensitive query (or a report that holds one) is not queued: the answer is
    the approval request (`Location: /api/v1/approvals/{id}`) that a workspace admin other
    than the caller approves or denies."""
    record = request(context, principal, _command(body))
    return _created(record, context, response)


def _command(body: ExportRequest) -> RequestExport:
    subject = None  # both or neither: refused by the service, with the body's other mistakes
    if body.query_id is not None and body.report_id is None:
        subject = SubjectRef("query", body.query_id)
    elif body.report_id is not None and body.query_id is None:
        subject = SubjectRef("report", body.report_id)
    return RequestExport(
        subject,
        body.format,
        body.parameters,
        body.options.neutralize_formulas,
        tuple(r.model_dump() for r in body.notify),
    )


def _created(
    record: ExportRecord | ApprovalRequest, context: Context, response: Response
) -> Export | Approval:
    if isinstance(record, ApprovalRequest):
        response.headers["Location"] = f"/api/v1/approvals/{record.id}"
        return approval_view(record, context.clock.now())
    response.headers["Location"] = f"/api/v1/exports/{record.id}"
    return _view(record, context)


# The list's filters are checked together by the service (one 422 naming every bad one, the
# cursor's too), so their schema constraints are documented here rather than enforced by
# FastAPI first, which would report only its own finds.
_STATUS_ENUM: dict[str, Any] = {"enum": list(STATUS_CHOICES)}
_FORMAT_ENUM: dict[str, Any] = {"enum": list(FORMAT_CHOICES)}


def _at_most(chars: int) -> dict[str, Any]:
    return {"maxLength": chars}


# long: one documented query-string parameter per filter (FastAPI reads them from here)
@router.get("/exports", response_model=ExportList, responses=problem_responses(401, 422, 503))
def list_exports(  # noqa: PLR0913 - one per query-string filter
    principal: CurrentPrincipal,
    context: Context,
    status: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Only exports in this status (`expired`: past their expiry).",
            json_schema_extra=_STATUS_ENUM,
        ),
    ] = None,
    format: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Only exports in this format.", json_schema_extra=_FORMAT_ENUM),
    ] = None,
    subject: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Only exports of this query or report id.",
            json_schema_extra=_at_most(MAX_EXPORT_ID_CHARS),
        ),
    ] = None,
    requested_by: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Only exports requested by this user id (an admin's filter: a member"
            " sees only their own exports whatever it says).",
            json_schema_extra=_at_most(MAX_USER_CHARS),
        ),
    ] = None,
    since: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Requested at or after: a date (UTC) or ISO 8601 time.",
            json_schema_extra=_at_most(MAX_INSTANT_CHARS),
        ),
    ] = None,
    until: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Requested before: a time, or a date (that whole day included).",
            json_schema_extra=_at_most(MAX_INSTANT_CHARS),
        ),
    ] = None,
    q: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Found in the subject's name (any case).",
            json_schema_extra=_at_most(MAX_SEARCH_CHARS),
        ),
    ] = None,
    id_prefix: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Ids that start with this (at least 4 characters).",
            json_schema_extra=_at_most(MAX_EXPORT_ID_CHARS),
        ),
    ] = None,
    limit: Annotated[
        int,
        Query(
            description="Exports per page.", json_schema_extra={"minimum": 1, "maximum": MAX_PAGE}
        ),
    ] = 50,
    cursor: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="`next_cursor` or `prev_cursor` of a page, unchanged.",
            json_schema_extra=_at_most(MAX_CURSOR_CHARS),
        ),
    ] = None,
) -> ExportList:
    """The caller's exports (an admin's: the workspace's), newest first, narrowed by the
    filters given. `next_cursor` continues with older exports, `prev_cursor` with newer."""
    query = ListExports(
        status=status,
        format=format,
        subject=subject,
        requested_by=requested_by,
        since=since,
        until=until,
        search=q,
        id_prefix=id_prefix,
        limit=limit,
        cursor=cursor,
    )
    page = list_exports_page(context, principal, query)
    return ExportList(
        items=[_view(record, context) for record in page.items],
        next_cursor=page.next_cursor,
        prev_cursor=page.prev_cursor,
    )


@router.get(
    "/exports/{export_id}", response_model=Export, responses=problem_responses(401, 404, 503)
)
def get_export(export_id: str, principal: CurrentPrincipal, context: Context) -> Export:
    """One export, with its effective status."""
    record = get_visible_export(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    return _view(record, context)


@router.get(
    "/exports/{export_id}/file",
    response_class=Response,
    responses={**file_responses(), **problem_responses(401, 403, 404, 409, 410, 503)},
)
def get_export_file(
    export_id: str,
    principal: CurrentPrincipal,
    context: Context,
    conditions: DownloadConditions,
) -> Response:
    """The file while it may be downloaded (Range and If-None-Match honoured), or a
    redirect to a short-lived presigned URL on S3."""
    return download(context, principal, export_id, conditions)


@router.post(
    "/exports/{export_id}/cancel",
    response_model=Export,
    responses=problem_responses(401, 404, 409, 503),
)
def cancel(export_id: str, principal: CurrentPrincipal, context: Context) -> Export:
    """Settle a queued or running export as failed/cancelled; a settled one is 409."""
    record = cancel_export(context, principal, CancelExport(export_id))
    return _view(record, context)


@router.get(
    "/exports/{export_id}/events",
    response_model=ExportEventList,
    responses=problem_responses(401, 404, 503),
)
def list_events(export_id: str, principal: CurrentPrincipal, context: Context) -> ExportEventList:
    """Every transition of the export, oldest first, with its time, attempt and worker."""
    events = list_visible_events(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    return ExportEventList(
        items=[
            ExportEventItem(
                at=event.at,
                kind=event.kind,
                status=event.status,
                attempt=event.attempt,
                worker_id=event.worker_id,
                code=event.code,
                detail=event.detail,
            )
            for event in events
        ]
    )
