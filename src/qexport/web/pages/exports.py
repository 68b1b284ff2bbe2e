"""The exports pages: the list, one export with its history, and the actions on it
(download, cancel, request again, create and revoke a public link, send a failed delivery
again), all as plain links and forms that redirect to a page (a reload repeats nothing)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Link, Principal, Role, hash_secret
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.commands import CancelExport, CreateLink, RequestAgain, RevokeLink, SendAgain
from qexport.domain.cursors import decode_page_cursor, encode_page_cursor
from qexport.domain.exports import STATUS_LABELS, ExportEvent, ExportRecord
from qexport.domain.failures import (
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    QExportError,
    TooManyRequestsError,
    readable_detail,
)
from qexport.domain.schedules import Delivery
from qexport.http.download import DownloadConditions
from qexport.http.download import download as file_of
from qexport.http.statuses import status_of
from qexport.services.accounts import list_members
from qexport.services.again import SubjectGoneError, request_again
from qexport.services.approvals import listed
from qexport.services.exports import (
    FORMAT_CHOICES,
    STATUS_CHOICES,
    cancel_export,
    get_visible_export,
    list_export_page,
    list_visible_events,
    parse_listing,
)
from qexport.services.links import create_link, list_live_links, manageable_link, revoke_link
from qexport.services.queries import list_readable_queries
from qexport.services.reports import list_readable_reports
from qexport.services.resend import may_name, may_send_again, send_again
from qexport.services.signing import link_token, master_secret
from qexport.web import link_flash
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.confirm import Confirmation, ConfirmedField, confirm_page, is_confirmed
from qexport.web.errors import PageRoute, asks_first
from qexport.web.forms import email_of, form_errors
from qexport.web.pages.approvals import awaiting_path
from qexport.web.present import ExportRow, export_row, when
from qexport.web.present_deliveries import DeliveryRow, delivery_row, link_row
from qexport.web.render import page
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

LIST_LIMIT = 50
NOTICES = {
    "cancelled": "The export was cancelled.",
    "link-revoked": "The public link was revoked; it no longer downloads the file.",
    "requested": "The export was requested.",
    "sending-again": "The delivery is waiting to be sent again; its new state shows below.",
}
# What a refused action says on the export's page (anything else is an error page).
_REFUSALS = (SubjectGoneError, ConflictError, ForbiddenError, InvalidRequestError)


FILTER_FIELDS = ("q", "status", "format", "subject", "requested_by", "since", "until")


@router.get("/")
def exports_page(  # noqa: PLR0913 - one per query-string filter
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
    rows, older, newer, errors = _listed(context, principal, values, cursor)
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
        awaiting=_awaiting_line(context, principal),
    )


def _listed(
    context: Context, principal: Principal, values: dict[str, str], cursor: str
) -> tuple[list[ExportRow], str, str, dict[str, str]]:
    """The page of exports the filter's `values` and `cursor` ask for, with the links to the
    older and newer pages (which keep the filter); or, for a filter refused, no rows and the
    form's errors."""
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
    return rows, older, newer, errors


def _awaiting_line(context: Container, principal: Principal) -> str | None:
    """What waits for an approval, said on the exports page: to an admin the workspace's
    requests that others made, to anyone else their own."""
    pending = listed(
        context.approvals,
        principal.user_id,
        principal.workspace_id,
        principal.role,
        pending_at=context.clock.now(),
    )
    if principal.role is Role.ADMIN:
        theirs = sum(1 for r in pending if r.requested_by != principal.user_id)
        if theirs:
            return f"{theirs} export request(s) of sensitive queries await your decision."
        return None
    if pending:
        return f"{len(pending)} of your export requests await an admin's approval."
    return None


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
        "status": [(s, STATUS_LABELS[s]) for s in STATUS_CHOICES],
        "format": [(f, f) for f in FORMAT_CHOICES],
        "subject": sorted(subjects, key=lambda item: item[1].lower()),
        "requested_by": members,
    }


def _path(export_id: str) -> str:
    return f"/exports/{quote(export_id, safe='')}"


def _detail(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    export_id: str,
    *,
    notice: str | None = None,
    error: QExportError | None = None,
) -> Response:
    """The export's page; with `error`, the refusal of an action on it, above everything."""
    record = get_visible_export(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    now = context.clock.now()
    row = export_row(record, now)
    events = list_visible_events(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    email = _emails(context)
    found = context.deliveries.list_deliveries(record.id)
    links = []
    live: list[Link] = []
    if row.downloadable:
        _, live = list_live_links(
            context.exports, context.accounts, context.clock, principal, record.id
        )
        carried = _delivery_links(context, found) if live else {}
        links = [link_row(link, record, email, carried.get(link.id, "")) for link in live]
    new_link = link_flash.read(request, session, record.id)
    if new_link is not None and new_link.link_id not in {link.id for link in links}:
        new_link = None  # revoked meanwhile, or the file expired: its URL no longer works
    deliveries = _delivery_rows(principal, record, row, found, now, email)
    status = 200
    if error is not None:
        mapped = status_of(error)
        status = mapped[0] if mapped else 500
    response = page(
        request,
        "export.html",
        status=status,
        session=session,
        row=row,
        events=_event_rows(events),
        links=links,
        new_link=new_link,
        link_expires=when(
            next(
                (link.expires_at for link in live if new_link and link.id == new_link.link_id), None
            )
            or record.expires_at
        ),
        deliveries=deliveries,
        deliveries_unsent=any(d.unsent for d in deliveries),
        notice=NOTICES.get(notice or ""),
        error=error.detail if error is not None else None,
    )
    link_flash.drop(request, response, record.id)
    return response


def _emails(context: Container) -> Callable[[str | None], str]:
    """A member's email address by user id, each read once for the page."""
    emails: dict[str | None, str] = {}

    def email(user_id: str | None) -> str:
        if user_id not in emails:
            emails[user_id] = email_of(context.accounts, user_id)
        return emails[user_id]

    return email


def _delivery_rows(
    principal: Principal,
    record: ExportRecord,
    row: ExportRow,
    found: list[Delivery],
    now: datetime,
    email: Callable[[str | None], str],
) -> list[DeliveryRow]:
    """The export's deliveries as its page lists them, each with whether it may be sent again."""
    # The export's page is its owner's and the workspace admins': they see recipients whole.
    full = may_send_again(principal, record)
    return [
        delivery_row(
            d,
            record,
            now,
            full=full,
            can_send_again=full and row.status != "expired" and may_name(principal, d.recipient),
            email_of=email,
        )
        for d in found
    ]


def _event_rows(events: list[ExportEvent]) -> list[dict[str, Any]]:
    """The export's events as its page lists them: the detail people read, and the whole
    detail beside it when that differs."""
    return [
        {
            "at": when(e.at),
            "kind": str(e.kind),
            "status": str(e.status),
            "attempt": e.attempt,
            "code": e.code.value if e.code else "",
            "detail": readable_detail(e.detail),
            "full": e.detail if e.detail and readable_detail(e.detail) != e.detail else "",
        }
        for e in events
    ]


def _delivery_links(context: Container, deliveries: list[Delivery]) -> dict[str, str]:
    """Which live links the export's deliveries carry (link id: the recipient), so that
    the page says whose message holds a link nobody made by hand."""
    if not deliveries:
        return {}
    master = master_secret(context.settings, context.schedules, context.clock)
    carried: dict[str, str] = {}
    for delivery in deliveries:
        link = context.accounts.find_link(hash_secret(link_token(master, delivery.id)))
        if link is not None:
            carried[link.id] = f"{delivery.recipient.channel.value} {delivery.recipient.target}"
    return carried


@router.get("/exports/{export_id}")
def export_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    export_id: str,
    notice: str | None = None,
) -> Response:
    """One export: its status and progress, its links and deliveries, and its history."""
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
    return file_of(context, principal, export_id, conditions)


@asks_first("/exports/{export_id}/cancel")
def _ask_cancel(
    _request: Request,
    context: Container,
    _session: Session,
    principal: Principal,
    params: Mapping[str, str],
    back: str = "detail",
) -> Confirmation:
    export_id = params["export_id"]
    record = get_visible_export(
        context.exports, principal.requester, export_id, whole_workspace=principal.sees_workspace
    )
    detail = _path(export_id)
    return Confirmation(
        title=f"Cancel the export of {record.subject_name} ({record.format})?",
        consequence="It stops now and settles as cancelled; no file is kept and"
        " nothing is delivered. Request it again to get the file.",
        action=f"{detail}/cancel",
        yes="Cancel the export",
        back="/" if back == "list" else detail,
        fields={"back": back},
    )


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
        params = {"export_id": export_id}
        ask = _ask_cancel(request, context, session, principal, params, back)
        return confirm_page(request, session, ask)
    cancel_export(context, principal, CancelExport(export_id))
    target = "/" if back == "list" else f"/exports/{export_id}?notice=cancelled"
    return RedirectResponse(target, status_code=303)


@router.post("/exports/{export_id}/again")
def again(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    export_id: str,
) -> Response:
    """A new export of the same subject, format, parameters and options, requested as any
    other; its page follows. A refusal (the subject gone, a cap) shows on this export's page."""
    try:
        record = request_again(context, principal, RequestAgain(export_id))
    except (*_REFUSALS, TooManyRequestsError) as exc:
        return _detail(request, context, session, principal, export_id, error=exc)
    if isinstance(record, ApprovalRequest):
        return RedirectResponse(awaiting_path(record), status_code=303)
    return RedirectResponse(f"{_path(record.id)}?notice=requested", status_code=303)


@router.post("/exports/{export_id}/links")
def create_public_link(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    export_id: str,
) -> Response:
    """A new public link, then the export's page, which shows its URL once (web/link_flash.py)."""
    try:
        created = create_link(context, principal, CreateLink(export_id))
    except (InvalidRequestError, ForbiddenError) as exc:  # at the cap; links off by policy
        return _detail(request, context, session, principal, export_id, error=exc)
    # No #fragment: a page opened at one does not focus its autofocus field (the new URL).
    response = RedirectResponse(_path(created.link.export_id), status_code=303)
    new = link_flash.NewLink(created.link.id, created.url)
    link_flash.remember(response, request, session, created.link.export_id, new)
    return response


@asks_first("/exports/{export_id}/links/{link_id}/revoke")
def _ask_revoke(
    _request: Request,
    context: Container,
    _session: Session,
    principal: Principal,
    params: Mapping[str, str],
) -> Confirmation:
    link, record = manageable_link(context.exports, context.accounts, principal, params["link_id"])
    if record.id != params["export_id"]:
        raise NotFoundError(f"no link {params['link_id']!r}")
    detail = _path(record.id)
    return Confirmation(
        title=f"Revoke this public link to {record.filename}?",
        consequence=f"Whoever has it can no longer download the file (link created"
        f" {when(link.created_at)}). The file and your other links stay.",
        action=f"{detail}/links/{quote(link.id, safe='')}/revoke",
        yes="Revoke the link",
        back=f"{detail}#links",
    )


@router.post("/exports/{export_id}/links/{link_id}/revoke")
def revoke_public_link(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    export_id: str,
    link_id: str,
    confirmed: ConfirmedField = "",
) -> Response:
    """Revoke one of the export's links, once the person said yes."""
    if not is_confirmed(confirmed):
        params = {"export_id": export_id, "link_id": link_id}
        ask = _ask_revoke(request, context, session, principal, params)
        return confirm_page(request, session, ask)
    revoke_link(context, principal, RevokeLink(link_id, export_id))
    return RedirectResponse(f"{_path(export_id)}?notice=link-revoked#links", status_code=303)


@router.post("/exports/{export_id}/deliveries/{delivery_id}/retry")
def send_delivery_again(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    export_id: str,
    delivery_id: str,
) -> Response:
    """Send a failed delivery again (services/resend.py); a refusal shows on the page."""
    try:
        send_again(context, principal, SendAgain(export_id, delivery_id))
    except _REFUSALS as exc:
        return _detail(request, context, session, principal, export_id, error=exc)
    return RedirectResponse(f"{_path(export_id)}?notice=sending-again#deliveries", status_code=303)
