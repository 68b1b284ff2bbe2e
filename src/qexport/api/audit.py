"""/api/v1/audit: a workspace's audit trail, for its admins, newest first."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.problems import problem_responses
from qexport.domain.audit import RecordedEvent
from qexport.domain.failures import InvalidRequestError, Problems
from qexport.http.one_hop import OneHopRoute
from qexport.services import audit_trail

router = APIRouter(route_class=OneHopRoute, tags=["audit"])


class AuditActorView(BaseModel):
    kind: str = Field(description="user, token, public_link, scheduler, operator or anonymous.")
    id: str | None = Field(description="The user id, the link id, `scheduler` or `cli`.")


class AuditTargetView(BaseModel):
    kind: str | None
    id: str | None


class AuditEventView(BaseModel):
    """One event of the trail, with its place in the workspace's hash chain."""

    id: int
    at: datetime
    actor: AuditActorView
    action: str
    target: AuditTargetView
    outcome: str = Field(description="ok, refused or failed.")
    client_address: str | None
    details: dict[str, Any]
    seq: int = Field(description="Its place in the workspace's chain: 1, 2, 3...")
    key_id: str | None = Field(
        description="The secret its hash is keyed with (HMAC-SHA256); null: plain SHA-256,"
        " written before keys."
    )
    prev_hash: str
    hash: str


class AuditList(BaseModel):
    items: list[AuditEventView]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the page of older events; null at the end."
    )


def _view(e: RecordedEvent) -> AuditEventView:
    return AuditEventView(
        id=e.id,
        at=e.at,
        actor=AuditActorView(kind=e.actor_kind, id=e.actor_id),
        action=e.action,
        target=AuditTargetView(kind=e.target_kind, id=e.target_id),
        outcome=e.outcome,
        client_address=e.client_address,
        details=json.loads(e.details),
        seq=e.seq,
        key_id=e.key_id,
        prev_hash=e.prev_hash,
        hash=e.hash,
    )


_TEXT = {"maxLength": audit_trail.MAX_FILTER_CHARS}
_INSTANT = {"maxLength": 40}
Text = Annotated[str | SkipJsonSchema[None], Query(json_schema_extra=_TEXT)]


# long: one documented query-string parameter per filter (FastAPI reads them from here)
@router.get("/audit", response_model=AuditList, responses=problem_responses(401, 403, 422, 503))
def list_audit(  # noqa: PLR0913 - one per query-string filter
    principal: CurrentPrincipal,
    context: Context,
    actor: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Only events by this actor id.", json_schema_extra=_TEXT),
    ] = None,
    action: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Only this action, or a prefix ending in `.` (`export.`).",
            json_schema_extra=_TEXT,
        ),
    ] = None,
    target: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Only events about this target id.", json_schema_extra=_TEXT),
    ] = None,
    since: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="At or after: a date (UTC) or ISO 8601 time.", json_schema_extra=_INSTANT
        ),
    ] = None,
    until: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Before: a time, or a date (that whole day included).",
            json_schema_extra=_INSTANT,
        ),
    ] = None,
    limit: Annotated[
        int,
        Query(
            description="Events per page.",
            json_schema_extra={"minimum": 1, "maximum": audit_trail.MAX_PAGE},
        ),
    ] = 50,
    cursor: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="`next_cursor` of a page, unchanged.", json_schema_extra={"maxLength": 40}
        ),
    ] = None,
) -> AuditList:
    """The caller's workspace's audit trail, newest first (workspace admins only)."""
    audit_trail.require_admin(principal)  # 403 before anything else is looked at
    problems = Problems()
    narrow = audit_trail.parse_filter(
        actor=actor, action=action, target=target, since=since, until=until, problems=problems
    )
    before = None
    with problems.check():
        before = audit_trail.decode_cursor(cursor) if cursor is not None else None
    with problems.check():
        if not 1 <= limit <= audit_trail.MAX_PAGE:
            raise InvalidRequestError(
                f"limit must be 1 to {audit_trail.MAX_PAGE}, not {limit}", field="limit"
            )
    problems.raise_any()
    page = audit_trail.workspace_page(
        context.audit, principal, narrow, before_id=before, limit=limit
    )
    return AuditList(items=[_view(e) for e in page.items], next_cursor=page.next_cursor)
