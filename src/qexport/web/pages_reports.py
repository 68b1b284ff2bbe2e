"""The reports pages: the list, one report with its sections, and the form editors and admins
write them with (the API's services and rules)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError
from qexport.domain.reports import display_spec
from qexport.services import reports as service
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import (
    NOTICES,
    email_of,
    member_ids,
    member_lines,
    require_writer,
    visibility_of,
)
from qexport.web.render import page
from qexport.web.report_forms import ReportForm, error_of, form_of, parse_sections, query_name
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

Text = Annotated[str, Form()]


def _form_page(
    request: Request,
    session: Session,
    form: ReportForm,
    *,
    report_id: str | None,
    status: int = 200,
    errors: dict[str, str] | None = None,
) -> Response:
    return page(
        request,
        "report_form.html",
        status=status,
        session=session,
        report_id=report_id,
        form=asdict(form),
        errors=errors or {},
    )


def _save(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: ReportForm,
    report_id: str | None,
) -> Response:
    """Create (no id) or replace the report; a refused value is shown next to its field."""
    require_writer(principal)
    numbers: list[int] = []
    try:
        sections, numbers = parse_sections(context, principal, form)
        draft = service.ReportDraft(
            title=form.title.strip(),
            description=form.description.strip(),
            sections=sections,
            visibility=visibility_of(form.visibility),
            members=member_ids(context.accounts, form.members),
        )
        if report_id is None:
            report = service.create_report(context.catalog, context.accounts, principal, draft)
        else:
            report = service.replace_report(
                context.catalog, context.accounts, principal, report_id, draft
            )
    except InvalidRequestError as exc:
        errors = error_of(exc, numbers)
        return _form_page(request, session, form, report_id=report_id, status=400, errors=errors)
    return RedirectResponse(f"/reports/{quote(report.id, safe='')}?notice=saved", status_code=303)


@router.get("/reports")
def reports_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    """The reports the person may read, by title."""
    reports = service.list_readable_reports(context.catalog, principal)
    return page(request, "reports.html", session=session, reports=reports)


@router.get("/reports/new")
def new_report_page(request: Request, session: SignedIn, principal: WebPrincipal) -> Response:
    require_writer(principal)
    return _form_page(request, session, ReportForm(), report_id=None)


@router.post("/reports/new")
def create_report(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    title: Text = "",
    description: Text = "",
    sections: Text = "",
    fixed: Text = "",
    visibility: Text = "workspace",
    members: Text = "",
) -> Response:
    form = ReportForm(title, description, sections, fixed, visibility, members)
    return _save(request, context, session, principal, form, None)


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
    )


@router.get("/reports/{report_id}/edit")
def edit_report_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, report_id: str
) -> Response:
    require_writer(principal)
    report = service.get_readable_report(context.catalog, principal, report_id)
    return _form_page(request, session, form_of(context, report), report_id=report.id)


@router.post("/reports/{report_id}/edit")
def edit_report(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    report_id: str,
    title: Text = "",
    description: Text = "",
    sections: Text = "",
    fixed: Text = "",
    visibility: Text = "workspace",
    members: Text = "",
) -> Response:
    form = ReportForm(title, description, sections, fixed, visibility, members)
    return _save(request, context, session, principal, form, report_id)
