"""The schedules pages: the list, one schedule, the form editors and admins write them with,
and pause, resume and run now for its owner or an admin (the API's services and rules)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.domain.reports import REPORT_FORMATS
from qexport.schedules import catalog as service
from qexport.services.queries import list_readable_queries
from qexport.services.reports import list_readable_reports
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import NOTICES, require_writer
from qexport.web.render import page
from qexport.web.schedule_forms import ScheduleForm, error_of, parse, schedule_row
from qexport.web.session import Session
from qexport.writers.registry import FORMATS

router = APIRouter(route_class=PageRoute, include_in_schema=False)

Text = Annotated[str, Form()]


def _path(schedule_id: str) -> str:
    return f"/schedules/{quote(schedule_id, safe='')}"


def _form_page(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: ScheduleForm,
    *,
    schedule_id: str | None,
    status: int = 200,
    errors: dict[str, str] | None = None,
) -> Response:
    return page(
        request,
        "schedule_form.html",
        status=status,
        session=session,
        schedule_id=schedule_id,
        form=asdict(form),
        queries=list_readable_queries(context.catalog, principal),
        reports=list_readable_reports(context.catalog, principal),
        formats=sorted({*FORMATS, *REPORT_FORMATS}),
        workspace_zone=context.accounts.workspace_timezone(principal.workspace_id),
        errors=errors or {},
    )


def _save(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: ScheduleForm,
    schedule_id: str | None,
) -> Response:
    """Create (no id) or change the schedule; a refused value is shown next to its field."""
    actor = service.Actor.of(principal)
    if schedule_id is None:
        require_writer(principal)
    lines: list[int] = []
    try:
        parsed = parse(form)
        lines = parsed.recipient_lines
        stores = (context.catalog, context.schedules, context.accounts, context.clock, actor)
        egress = context.settings.egress_policy()
        limits = service.ScheduleLimits.of(context.settings)
        if schedule_id is None:
            draft = service.ScheduleDraft(**parsed.settings)
            schedule = service.create_schedule(*stores, draft, egress=egress, limits=limits)
        else:
            schedule = service.update_schedule(
                *stores, schedule_id, parsed.settings, egress=egress, limits=limits
            )
    except InvalidRequestError as exc:
        return _form_page(
            request,
            context,
            session,
            principal,
            form,
            schedule_id=schedule_id,
            status=400,
            errors=error_of(exc, lines),
        )
    return RedirectResponse(f"{_path(schedule.id)}?notice=saved", status_code=303)


@router.get("/schedules")
def schedules_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    """The workspace's schedules the person may see, oldest first."""
    actor = service.Actor.of(principal)
    found = service.list_visible_schedules(context.catalog, context.schedules, actor)
    rows = [schedule_row(context, actor, s) for s in found]
    return page(request, "schedules.html", session=session, rows=rows)


@router.get("/schedules/new")
def new_schedule_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    require_writer(principal)
    return _form_page(request, context, session, principal, ScheduleForm(), schedule_id=None)


@router.post("/schedules/new")
def create_schedule(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    subject: Text = "",
    format: Text = "",
    cron: Text = "",
    timezone: Text = "",
    recipients: Text = "",
    missed: Text = "once",
    parameters: Text = "",
    filename_template: Text = "",
) -> Response:
    form = ScheduleForm(
        subject, format, cron, timezone, recipients, missed, parameters, filename_template
    )
    return _save(request, context, session, principal, form, None)


@router.get("/schedules/{schedule_id}")
def schedule_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    schedule_id: str,
    notice: str | None = None,
) -> Response:
    """One schedule: what it exports, when, to whom; with its actions for those who may."""
    actor = service.Actor.of(principal)
    schedule = service.get_visible_schedule(context.catalog, context.schedules, actor, schedule_id)
    return page(
        request,
        "schedule.html",
        session=session,
        row=schedule_row(context, actor, schedule),
        notice=NOTICES.get(notice or ""),
    )


@router.get("/schedules/{schedule_id}/edit")
def edit_schedule_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, schedule_id: str
) -> Response:
    actor = service.Actor.of(principal)
    schedule = service.get_visible_schedule(context.catalog, context.schedules, actor, schedule_id)
    if not service.may_manage(actor, schedule):
        raise ForbiddenError("only the schedule's owner or a workspace admin may change it")
    form = ScheduleForm.of(schedule)
    return _form_page(request, context, session, principal, form, schedule_id=schedule.id)


@router.post("/schedules/{schedule_id}/edit")
def edit_schedule(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    schedule_id: str,
    subject: Text = "",
    format: Text = "",
    cron: Text = "",
    timezone: Text = "",
    recipients: Text = "",
    missed: Text = "once",
    parameters: Text = "",
    filename_template: Text = "",
) -> Response:
    form = ScheduleForm(
        subject, format, cron, timezone, recipients, missed, parameters, filename_template
    )
    return _save(request, context, session, principal, form, schedule_id)


@router.post("/schedules/{schedule_id}/pause")
def pause(
    context: Context, _session: CheckedForm, principal: WebPrincipal, schedule_id: str
) -> Response:
    return _set_enabled(context, principal, schedule_id, enabled=False)


@router.post("/schedules/{schedule_id}/resume")
def resume(
    context: Context, _session: CheckedForm, principal: WebPrincipal, schedule_id: str
) -> Response:
    return _set_enabled(context, principal, schedule_id, enabled=True)


def _set_enabled(
    context: Container, principal: Principal, schedule_id: str, *, enabled: bool
) -> Response:
    actor = service.Actor.of(principal)
    schedule = service.set_enabled(
        context.catalog,
        context.schedules,
        context.accounts,
        context.clock,
        actor,
        schedule_id,
        enabled=enabled,
    )
    notice = "resumed" if enabled else "paused"
    return RedirectResponse(f"{_path(schedule.id)}?notice={notice}", status_code=303)


@router.post("/schedules/{schedule_id}/run")
def run_now(
    context: Context, _session: CheckedForm, principal: WebPrincipal, schedule_id: str
) -> Response:
    """An export now, outside the timetable, delivered like the others; shown on its page."""
    record = service.run_schedule(
        context.catalog,
        context.schedules,
        context.clock,
        service.Actor.of(principal),
        schedule_id,
        max_unsettled=context.settings.max_unsettled_per_user,
    )
    return RedirectResponse(
        f"/exports/{quote(record.id, safe='')}?notice=requested", status_code=303
    )
