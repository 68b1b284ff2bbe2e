"""The schedules pages: the list, one schedule, the form editors and admins write them with
(typed parameters, the cron in words with its next runs, "Check" before saving), and pause,
resume, run now and delete for its owner or an admin (the API's services and rules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.commands import (
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    PauseSchedule,
    RunScheduleNow,
    ScheduleDraft,
)
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.services import scheduling
from qexport.services.queries import list_readable_queries
from qexport.services.reports import list_readable_reports
from qexport.services.schedules import subscriptions, visibility
from qexport.services.scheduling import pause_schedule, run_schedule_now
from qexport.services.subjects import Subject
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.confirm import Confirmation, ConfirmedField, confirm_page, is_confirmed
from qexport.web.deleting import schedule_consequence
from qexport.web.errors import PageRoute, asks_first
from qexport.web.forms import NOTICES, require_writer
from qexport.web.pages.subscriptions import subscription_of
from qexport.web.present_deliveries import run_row
from qexport.web.render import PAGE_HEADERS, page
from qexport.web.schedule_forms import (
    NO_SMTP,
    ScheduleForm,
    errors_of,
    mails_without_smtp,
    parse,
    schedule_row,
    timetable,
)
from qexport.web.session import Session
from qexport.web.subjects import ALL_FORMATS, param_inputs, subject_of

router = APIRouter(route_class=PageRoute, include_in_schema=False)

MAX_FORM_FIELDS = 120  # the form's own fields and one per parameter of its subject
CHECKED = "Nothing to fix: saving it makes the exports shown above."
RECENT_RUNS = 10  # the runs a schedule's page shows, newest first


def _path(schedule_id: str) -> str:
    return f"/schedules/{quote(schedule_id, safe='')}"


def _form_page(  # noqa: PLR0913 - keyword-only: what the form page shows
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: ScheduleForm,
    *,
    schedule_id: str | None,
    subject: Subject | None,
    status: int = 200,
    errors: dict[str, str] | None = None,
    notice: str | None = None,
) -> Response:
    workspace_zone = context.accounts.workspace_timezone(principal.workspace_id)
    # Every format, those the subject does not take hidden (and out of reach): a script can
    # show them again when another subject is chosen.
    fits = subject is None or form.format in subject.formats
    choice = form.format if fits or subject is None else subject.formats[0]
    recipients = parse(form, subject).settings["recipients"]
    return page(
        request,
        "schedule_form.html",
        status=status,
        session=session,
        schedule_id=schedule_id,
        form=asdict(form),
        subject=subject,
        inputs=param_inputs(subject, form.parameters),
        queries=list_readable_queries(context.catalog, principal),
        reports=list_readable_reports(context.catalog, principal),
        formats=ALL_FORMATS,
        format_choice=choice,
        workspace_zone=workspace_zone,
        timetable=timetable(
            form.cron, form.timezone.strip() or workspace_zone, context.clock.now()
        ),
        mail_off="" if context.settings.smtp_url else NO_SMTP,
        no_smtp=mails_without_smtp(context.settings, recipients),
        errors=errors or {},
        notice=notice,
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
    schedule_id: str | None,
) -> Response:
    """Save (create, or change the schedule), "Check" (every refusal, or that there is none,
    nothing saved) or show the chosen subject's formats and parameters."""
    if schedule_id is None:
        require_writer(principal)
    else:
        current = visibility.get_visible_schedule(
            context.catalog, context.schedules, principal, schedule_id
        )
        if not visibility.may_manage(principal, current):
            raise ForbiddenError("only the schedule's owner or a workspace admin may change it")
    subject = subject_of(context, principal, fields.get("subject", ""))
    form = ScheduleForm.read(fields, subject)
    action = fields.get("action", "save")

    def again(**shown: Any) -> Response:
        return _form_page(
            request,
            context,
            session,
            principal,
            form,
            schedule_id=schedule_id,
            subject=subject,
            **shown,
        )

    if action == "subject":
        return again()
    parsed = parse(form, subject)
    try:
        saved = _save_or_check(
            context, principal, parsed.settings, schedule_id, check=action == "check"
        )
    except InvalidRequestError as exc:
        return again(status=400, errors=errors_of(exc, parsed.recipient_lines, subject))
    if saved is None:
        return again(notice=CHECKED)
    return RedirectResponse(f"{_path(saved)}?notice=saved", status_code=303)


def _save_or_check(
    context: Container,
    actor: Principal,
    settings: dict[str, Any],
    schedule_id: str | None,
    *,
    check: bool,
) -> str | None:
    """Create or change the schedule (its id), or with `check` only check it (None)."""
    if schedule_id is None:
        draft = ScheduleDraft(**settings)
        created = CreateSchedule(draft, check_only=check)
        saved = scheduling.create_schedule(context, actor, created)
        return None if check else saved.id
    changed = ChangeSchedule(schedule_id, settings, check_only=check)
    scheduling.change_schedule(context, actor, changed)
    return None if check else schedule_id


@router.get("/schedules")
def schedules_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    notice: str | None = None,
) -> Response:
    """The workspace's schedules the person may see, oldest first."""
    found = visibility.list_visible_schedules(context.catalog, context.schedules, principal)
    rows = [schedule_row(context, principal, s) for s in found]
    subscribed = subscriptions.subscribed_ids(
        context.schedules, principal
    )  # pages/subscriptions.py
    return page(
        request,
        "schedules.html",
        session=session,
        rows=rows,
        subscribed=subscribed,
        notice=NOTICES.get(notice or ""),
    )


@router.get("/schedules/timetable")
def timetable_words(
    context: Context, principal: WebPrincipal, cron: str = "", timezone: str = ""
) -> Response:
    """The form's script asks this as the cron is typed: the cron in words and its next runs
    in the zone (empty: the workspace's); `{"words": null}` while it is not a valid cron."""
    zone = timezone.strip()[:64] or context.accounts.workspace_timezone(principal.workspace_id)
    found = timetable(cron[:200], zone, context.clock.now())
    return JSONResponse(found or {"words": None, "runs": [], "zone": zone}, headers=PAGE_HEADERS)


@router.get("/schedules/new")
def new_schedule_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    require_writer(principal)
    return _form_page(
        request, context, session, principal, ScheduleForm(), schedule_id=None, subject=None
    )


@router.post("/schedules/new")
async def create_schedule(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    fields = await _submitted(request, session)
    return await run_in_threadpool(_submit, request, context, session, principal, fields, None)


@router.get("/schedules/{schedule_id}")
def schedule_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    schedule_id: str,
    notice: str | None = None,
) -> Response:
    """One schedule: what it exports, when, to whom, and how its recent runs went; with its
    actions for those who may."""
    schedule = visibility.get_visible_schedule(
        context.catalog, context.schedules, principal, schedule_id
    )
    row = schedule_row(context, principal, schedule)
    now = context.clock.now()
    full = visibility.sees_recipients(principal, schedule)
    runs = [
        run_row(
            run.due_at,
            run.export,
            context.deliveries.list_deliveries(run.export.id),
            now,
            zone=schedule.timezone,
            principal=principal,
            full=full,
        )
        for run in context.schedules.list_runs(schedule.id, limit=RECENT_RUNS)
    ]
    return page(
        request,
        "schedule.html",
        session=session,
        row=row,
        runs=runs,
        runs_unsettled=any(r.export.unsettled or any(d.unsent for d in r.deliveries) for r in runs),
        notice=NOTICES.get(notice or ""),
        subscription=subscription_of(context, principal, schedule),
        no_smtp=NO_SMTP if row["no_smtp"] else "",
        delete_consequence=schedule_consequence(schedule) if row["manage"] else "",
    )


@router.get("/schedules/{schedule_id}/edit")
def edit_schedule_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, schedule_id: str
) -> Response:
    schedule = visibility.get_visible_schedule(
        context.catalog, context.schedules, principal, schedule_id
    )
    if not visibility.may_manage(principal, schedule):
        raise ForbiddenError("only the schedule's owner or a workspace admin may change it")
    form = ScheduleForm.of(schedule)
    subject = subject_of(context, principal, form.subject)
    return _form_page(
        request, context, session, principal, form, schedule_id=schedule.id, subject=subject
    )


@router.post("/schedules/{schedule_id}/edit")
async def edit_schedule(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, schedule_id: str
) -> Response:
    fields = await _submitted(request, session)
    return await run_in_threadpool(
        _submit, request, context, session, principal, fields, schedule_id
    )


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
    schedule = pause_schedule(context, principal, PauseSchedule(schedule_id, enabled))
    notice = "resumed" if enabled else "paused"
    return RedirectResponse(f"{_path(schedule.id)}?notice={notice}", status_code=303)


@router.post("/schedules/{schedule_id}/run")
def run_now(
    context: Context, _session: CheckedForm, principal: WebPrincipal, schedule_id: str
) -> Response:
    """An export now, outside the timetable, delivered like the others; shown on its page."""
    record = run_schedule_now(context, principal, RunScheduleNow(schedule_id))
    return RedirectResponse(
        f"/exports/{quote(record.id, safe='')}?notice=requested", status_code=303
    )


@asks_first("/schedules/{schedule_id}/delete")
def _ask_delete(
    _request: Request,
    context: Container,
    _session: Session,
    principal: Principal,
    params: Mapping[str, str],
) -> Confirmation:
    schedule = visibility.get_visible_schedule(
        context.catalog, context.schedules, principal, params["schedule_id"]
    )
    if not visibility.may_manage(principal, schedule):
        raise ForbiddenError("only the schedule's owner or a workspace admin may delete it")
    row = schedule_row(context, principal, schedule)
    return Confirmation(
        title=f"Delete the schedule of {row['subject']}?",
        consequence=schedule_consequence(schedule),
        action=f"{_path(schedule.id)}/delete",
        yes="Delete the schedule",
        back=_path(schedule.id),
    )


@router.post("/schedules/{schedule_id}/delete")
def delete_schedule(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    schedule_id: str,
    confirmed: ConfirmedField = "",
) -> Response:
    """Delete the schedule once the person said yes (see web/confirm.py); its owner or an
    admin."""
    ask = _ask_delete(request, context, session, principal, {"schedule_id": schedule_id})
    if not is_confirmed(confirmed):
        return confirm_page(request, session, ask)
    scheduling.delete_schedule(context, principal, DeleteSchedule(schedule_id))
    return RedirectResponse("/schedules?notice=schedule-deleted", status_code=303)
