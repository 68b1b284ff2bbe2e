"""The reports pages: the list, one report with its sections, the form editors and admins
write them with (sections as rows: see web/report_forms.py), and deleting one (the API's
services and rules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.commands import SaveReport
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.domain.reports import display_spec
from qexport.services import reports as service
from qexport.services.queries import list_readable_queries
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.confirm import Confirmation, ConfirmedField, confirm_page, is_confirmed
from qexport.web.deleting import report_consequence
from qexport.web.errors import PageRoute, asks_first
from qexport.web.forms import NOTICES, email_of, member_lines, require_writer
from qexport.web.render import page
from qexport.web.report_forms import (
    DISPLAYS,
    ReportForm,
    apply_action,
    errors_of,
    form_of,
    query_choices,
    read_draft,
    read_form,
)
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

# Each section is a row of 7 fields; 50 sections at most, and the form's own fields.
MAX_FORM_FIELDS = 400


def _form_page(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: ReportForm,
    *,
    report_id: str | None,
    status: int = 200,
    errors: dict[str, str] | None = None,
) -> Response:
    queries = list_readable_queries(context.catalog, principal)
    return page(
        request,
        "report_form.html",
        status=status,
        session=session,
        report_id=report_id,
        form=asdict(form),
        rows=[{**asdict(row), "chart": row.chart} for row in form.sections],
        queries=query_choices(queries, form),
        displays=DISPLAYS,
        errors=errors or {},
    )


async def _submitted(request: Request, session: Session) -> dict[str, str]:
    raw = await request.form(max_fields=MAX_FORM_FIELDS)
    form = {k: v for k, v in raw.items() if isinstance(v, str)}
    if not session.csrf_matches(form.get("csrf")):
        raise ForbiddenError("the form has expired or did not come from this site; try again")
    return form


def _submit(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    fields: dict[str, str],
    report_id: str | None,
) -> Response:
    """A row button re-renders the form with its rows changed, nothing saved; "Save report"
    creates (no id) or replaces the report, or shows every refusal on its field."""
    require_writer(principal)
    if report_id is not None:
        service.get_readable_report(context.catalog, principal, report_id)
    form = read_form(fields)
    changed = apply_action(form, fields.get("action", "save"))
    if changed is not None:
        return _form_page(request, context, session, principal, changed, report_id=report_id)
    read = read_draft(context, form)
    try:
        report = service.save_report(
            context, principal, SaveReport(read.draft, report_id, tuple(read.found))
        )
    except InvalidRequestError as exc:
        return _form_page(
            request,
            context,
            session,
            principal,
            form,
            report_id=report_id,
            status=400,
            errors=errors_of(exc),
        )
    return RedirectResponse(f"/reports/{quote(report.id, safe='')}?notice=saved", status_code=303)


def query_name(context: Container, query_id: str) -> str:
    query = context.catalog.get_query(query_id)
    return query.name if query else query_id


@router.get("/reports")
def reports_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    notice: str | None = None,
) -> Response:
    """The reports the person may read, by title."""
    reports = service.list_readable_reports(context.catalog, principal)
    return page(
        request,
        "reports.html",
        session=session,
        reports=reports,
        notice=NOTICES.get(notice or ""),
    )


@router.get("/reports/new")
def new_report_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    require_writer(principal)
    return _form_page(request, context, session, principal, ReportForm(), report_id=None)


@router.post("/reports/new")
async def create_report(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    fields = await _submitted(request, session)
    return await run_in_threadpool(_submit, request, context, session, principal, fields, None)


@router.get("/reports/{report_id}")
def report_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    report_id: str,
    notice: str | None = None,
) -> Response:
    """One report: its sections, each a query's result shown as a table or a chart."""
    report = service.get_readable_report(context.catalog, principal, report_id)
    sections = [
        {
            "heading": s.heading,
            "query_id": s.query_id,
            "query": query_name(context, s.query_id),
            "display": display_spec(s),
            "row_cap": s.row_cap,
            "fixed": dict(s.parameters),
        }
        for s in report.sections
    ]
    return page(
        request,
        "report.html",
        session=session,
        report=report,
        sections=sections,
        members=member_lines(context.accounts, report.members).splitlines(),
        owner=email_of(context.accounts, report.owner),
        notice=NOTICES.get(notice or ""),
        delete_consequence=report_consequence(context.schedules, report)
        if principal.can_write_queries
        else "",
    )


@router.get("/reports/{report_id}/edit")
def edit_report_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, report_id: str
) -> Response:
    require_writer(principal)
    report = service.get_readable_report(context.catalog, principal, report_id)
    form = form_of(context, report)
    return _form_page(request, context, session, principal, form, report_id=report.id)


@router.post("/reports/{report_id}/edit")
async def edit_report(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, report_id: str
) -> Response:
    fields = await _submitted(request, session)
    return await run_in_threadpool(_submit, request, context, session, principal, fields, report_id)


@asks_first("/reports/{report_id}/delete")
def _ask_delete(
    _request: Request,
    context: Container,
    _session: Session,
    principal: Principal,
    params: Mapping[str, str],
) -> Confirmation:
    require_writer(principal)
    report = service.get_readable_report(context.catalog, principal, params["report_id"])
    path = f"/reports/{quote(report.id, safe='')}"
    return Confirmation(
        title=f"Delete the report {report.title}?",
        consequence=report_consequence(context.schedules, report),
        action=f"{path}/delete",
        yes="Delete the report",
        back=path,
    )


@router.post("/reports/{report_id}/delete")
def delete_report(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    report_id: str,
    confirmed: ConfirmedField = "",
) -> Response:
    """Delete the report once the person said yes (see web/confirm.py); editors and admins."""
    ask = _ask_delete(request, context, session, principal, {"report_id": report_id})
    if not is_confirmed(confirmed):
        return confirm_page(request, session, ask)
    service.delete_report(context.catalog, principal, report_id)
    return RedirectResponse("/reports?notice=report-deleted", status_code=303)
