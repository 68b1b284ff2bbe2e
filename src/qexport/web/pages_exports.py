"""The exports pages: the list, one export with its history, and the actions on it
(download, cancel, create and revoke a public link), all as plain links and forms."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError
from qexport.http.cursors import decode_page_cursor, encode_page_cursor
from qexport.http.download import DownloadConditions, file_response, presigned_redirect
from qexport.services.accounts import list_members
from qexport.services.exports import (
    FORMAT_CHOICES,
    STATUS_CHOICES,
    cancel_export,
    downloadable,
    get_visible_export,
    list_export_page,
    list_visible_events,
    parse_listing,
)
from qexport.services.links import CreatedLink, create_link, revoke_link
from qexport.services.queries import list_readable_queries
from qexport.services.reports import list_readable_reports
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.confirm import Confirmation, ConfirmedField, confirm_page, is_confirmed
from qexport.web.errors import PageRoute
from qexport.web.forms import form_errors
from qexport.web.present import ExportRow, export_row, when
from qexport.web.render import page
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

LIST_LIMIT = 50
NOTICES = {
    "cancelled": "The export was cancelled.",
    "link-revoked": "The public link was revoked; it no longer downloads the file.",
    "requested": "The export was requested. This page updates as it progresses.",
}


FILTER_FIELDS = ("q", "status", "format", "subject", "requested_by", "since", "until")


@router.get("/")
def exports_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    q: str = "",
    status: str = "",
    format: str = "",
    subject: str = "",
    requested_by: str = "",
    since: str = "",
    until: str = "",
    cursor: str = "",
) -> Response:
    """The person's exports (an admin's: the workspace's), newest first, a page at a time,
    narrowed by the filter form; its values stay in the page links."""
    values = {
        "q": q,
        "status": status,
        "format": format,
        "subject": subject,
        "requested_by": requested_by if principal.sees_workspace else "",
        "since": since,
        "until": until,
    }
    values = {k: v[:MAX_FILTER_CHARS] for k, v in values.items()}
    errors: dict[str, str] = {}
    rows: list[ExportRow] = []
    older = newer = ""
    try:
        listing = parse_listing(
            status=values["status"],
            fmt=values["format"],
            subject=values["subject"],
            requested_by=values["requested_by"],
            since=values["since"],
            until=values["until"],
            search=values["q"],
        )
        at = decode_page_cursor(cursor) if cursor else None
    except InvalidRequestError as exc:
        errors = form_errors(exc, FILTER_FIELDS, _filter_words)
    else:
        found = list_export_page(
            context.exports,
            context.clock,
            principal.requester,
            listing,
            whole_workspace=principal.sees_workspace,
            limit=LIST_LIMIT,
            before=at.at if at is not None and not at.newer else None,
            after=at.at if at is not None and at.newer else None,
        )
        now = context.clock.now()
        rows = [export_row(r, now) for r in found.items]
        kept = {k: v for k, v in values.items() if v}
        if found.older:
            older = "/?" + urlencode({**kept, "cursor": encode_page_cursor(found.older)})
        if found.newer:
            newer = "/?" + urlencode(
                {**kept, "cursor": encode_page_cursor(found.newer, newer=True)}
            )
    filtered = any(values.values())
    # Only the newest page follows new exports: an older page stays where it was.
    live_url = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
    return page(
        request,
        "exports.html",
        session=session,
        rows=rows,
        values=values,
        errors=errors,
        filtered=filtered,
        older=older,
        newer=newer,
        first_page=not cursor,
        live_url=live_url,
        choices=_filter_choices(context, principal),
    )


MAX_FILTER_CHARS = 200
# The API's parameter names, as the form's labels say them.
_FILTER_LABELS = {"q": "Search", "requested_by": "Requested by"}


def _filter_words(exc: InvalidRequestError) -> str:
    if exc.field == "cursor":  # only ever a link changed by hand: there is no field for it
        return (
            "This page's link was changed or is not one of this list's; start again from"
            " the newest exports."
        )
    detail = exc.detail
    for name, label in _FILTER_LABELS.items():
        if exc.field == name and detail.startswith(name + " "):
            return label + detail[len(name) :]
    return detail[:1].upper() + detail[1:]


def _filter_choices(context: Context, principal: Principal) -> dict[str, list[tuple[str, str]]]:
    """What the filter form's lists offer: statuses, formats, the subjects the person may
    read and, for an admin, the workspace's members."""
    subjects = [(q.id, q.name) for q in list_readable_queries(context.catalog, principal)]
    subjects += [
        (r.id, f"{r.title} (report)") for r in list_readable_reports(context.catalog, principal)
    ]
    members = (
        [
            (user.id, user.email)
            for user, _m in list_members(context.accounts, principal.workspace_id)
        ]
        if principal.sees_workspace
        else []
    )
    return {
        "status": [(s, s.capitalize()) for s in STATUS_CHOICES],
        "format": [(f, f) for f in FORMAT_CHOICES],
        "subject": sorted(subjects, key=lambda item: item[1].lower()),
        "requested_by": members,
    }


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
