"""The exports pages: the list, one export with its history, and the actions on it
(download, cancel, create and revoke a public link), all as plain links and forms."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.domain.accounts import Principal
from qexport.http.download import DownloadConditions, file_response, presigned_redirect
from qexport.services.exports import (
    cancel_export,
    downloadable,
    get_visible_export,
    list_visible_events,
    list_visible_exports,
)
from qexport.services.links import CreatedLink, create_link, revoke_link
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.confirm import Confirmation, ConfirmedField, confirm_page, is_confirmed
from qexport.web.errors import PageRoute
from qexport.web.present import export_row, when
from qexport.web.render import page
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

LIST_LIMIT = 50
NOTICES = {
    "cancelled": "The export was cancelled.",
    "link-revoked": "The public link was revoked; it no longer downloads the file.",
    "requested": "The export was requested. This page updates as it progresses.",
}


@router.get("/")
def exports_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    """The person's exports (an admin's: the workspace's), newest first."""
    now = context.clock.now()
    records = list_visible_exports(
        context.exports,
        context.clock,
        principal.requester,
        whole_workspace=principal.sees_workspace,
        limit=LIST_LIMIT,
    )
    rows = [export_row(r, now) for r in records]
    return page(request, "exports.html", session=session, rows=rows)


def _detail(
    request: Request,
    context: Context,
    session: Session,
    principal: Principal,
    export_id: str,
    *,
    link: CreatedLink | None = None,
    notice: str | None = None,
) -> Response:
    record = get_visible_export(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    events = list_visible_events(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    return page(
        request,
        "export.html",
        session=session,
        row=export_row(record, context.clock.now()),
        events=[
            {
                "at": when(e.at),
                "kind": str(e.kind),
                "status": str(e.status),
                "attempt": e.attempt,
                "code": e.code.value if e.code else "",
                "detail": e.detail or "",
            }
            for e in events
        ],
        link=link,
        link_expires=when(link.expires_at) if link else "",
        notice=NOTICES.get(notice or ""),
    )


@router.get("/exports/{export_id}")
def export_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    export_id: str,
    notice: str | None = None,
) -> Response:
    """One export: its status, details and event history."""
    return _detail(request, context, session, principal, export_id, notice=notice)


@router.get("/exports/{export_id}/download")
def download(
    context: Context,
    _session: SignedIn,
    principal: WebPrincipal,
    export_id: str,
    conditions: DownloadConditions,
) -> Response:
    """The file, with the same checks and headers as the API's download."""
    record = downloadable(
        context.exports,
        context.catalog,
        context.clock,
        principal.requester,
        export_id,
        whole_workspace=principal.sees_workspace,
    )
    redirect = presigned_redirect(context.objects, record, context.clock.now())
    return redirect or file_response(context.objects, record, conditions)


@router.post("/exports/{export_id}/cancel")
def cancel(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    export_id: str,
    back: Annotated[str, Form()] = "detail",
    confirmed: ConfirmedField = "",
) -> Response:
    """Cancel a queued or running export, once the person said yes (see web/confirm.py)."""
    if not is_confirmed(confirmed):
        record = get_visible_export(
            context.exports,
            principal.requester,
            export_id,
            whole_workspace=principal.sees_workspace,
        )
        detail = f"/exports/{quote(export_id, safe='')}"
        return confirm_page(
            request,
            session,
            Confirmation(
                title=f"Cancel the export of {record.subject_name} ({record.format})?",
                consequence="It stops now and settles as cancelled; no file is kept and"
                " nothing is delivered. Request it again to get the file.",
                action=f"{detail}/cancel",
                yes="Cancel the export",
                back="/" if back == "list" else detail,
                fields={"back": back},
            ),
        )
    cancel_export(
        context.exports,
        context.clock,
        principal.requester,
        export_id,
        whole_workspace=principal.sees_workspace,
    )
    target = "/" if back == "list" else f"/exports/{export_id}?notice=cancelled"
    return RedirectResponse(target, status_code=303)


@router.post("/exports/{export_id}/links")
def create_public_link(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    export_id: str,
) -> Response:
    """A new public link, shown once on the export's page with a copy button."""
    created = create_link(
        context.exports,
        context.catalog,
        context.accounts,
        context.clock,
        principal,
        export_id,
        base_url=context.settings.public_base_url,
        max_live=context.settings.max_links_per_export,
    )
    return _detail(request, context, session, principal, export_id, link=created)


@router.post("/links/{link_id}/revoke")
def revoke_public_link(
    context: Context,
    _session: CheckedForm,
    principal: WebPrincipal,
    link_id: str,
    export_id: Annotated[str, Form(max_length=64)],
) -> Response:
    revoke_link(context.exports, context.accounts, context.clock, principal, link_id)
    target = f"/exports/{quote(export_id, safe='')}?notice=link-revoked"
    return RedirectResponse(target, status_code=303)
