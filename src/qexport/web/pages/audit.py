"""/audit: the workspace's audit trail for its admins, with the API's filters and pages."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response

from qexport.domain.audit import RecordedEvent
from qexport.domain.failures import InvalidRequestError
from qexport.services import audit_trail
from qexport.web.auth import Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import form_errors
from qexport.web.present import when
from qexport.web.render import page

router = APIRouter(route_class=PageRoute, include_in_schema=False)

FILTER_FIELDS = ("actor", "action", "target", "since", "until", "cursor")
PAGE_SIZE = 50


def _row(e: RecordedEvent) -> dict[str, str]:
    return {
        "id": str(e.id),
        "at": e.at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "when": when(e.at),
        "actor": f"{e.actor_kind} {e.actor_id or ''}".strip(),
        "action": e.action,
        "target": f"{e.target_kind or ''} {e.target_id or ''}".strip(),
        "outcome": e.outcome,
        "address": e.client_address or "",
        "details": audit_trail.details_line(e.details),
    }


@router.get("/audit")
def audit_page(  # noqa: PLR0913 - one per query-string filter
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    actor: str = "",
    action: str = "",
    target: str = "",
    since: str = "",
    until: str = "",
    cursor: str = "",
) -> Response:
    """The workspace's events, newest first (admins only: 403 for anyone else)."""
    audit_trail.require_admin(principal)
    values = {
        k: v[: audit_trail.MAX_FILTER_CHARS]
        for k, v in {
            "actor": actor,
            "action": action,
            "target": target,
            "since": since,
            "until": until,
        }.items()
    }
    errors: dict[str, str] = {}
    rows: list[dict[str, str]] = []
    older = ""
    try:
        narrow = audit_trail.parse_filter(
            actor=values["actor"] or None,
            action=values["action"] or None,
            target=values["target"] or None,
            since=values["since"] or None,
            until=values["until"] or None,
        )
        before = audit_trail.decode_cursor(cursor) if cursor else None
    except InvalidRequestError as exc:
        errors = form_errors(exc, FILTER_FIELDS)
    else:
        found = audit_trail.workspace_page(
            context.audit, principal, narrow, before_id=before, limit=PAGE_SIZE
        )
        rows = [_row(e) for e in found.items]
        if found.next_cursor:
            kept = {k: v for k, v in values.items() if v}
            older = "/audit?" + urlencode({**kept, "cursor": found.next_cursor})
    return page(
        request,
        "audit.html",
        session=session,
        rows=rows,
        values=values,
        errors=errors,
        filtered=any(values.values()),
        older=older,
        first_page=not cursor,
    )
