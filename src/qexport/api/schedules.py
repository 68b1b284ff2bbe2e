"""/api/v1/schedules: exports on a cron timetable and who hears about them; and
/api/v1/exports/{id}/deliveries: how far each recipient's delivery got.

Every member reads the schedules of their workspace (those whose subject they may read);
editors and admins create them; only a schedule's owner or a workspace admin changes, pauses,
resumes, deletes or runs it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.deliveries import Delivery, DeliveryList
from qexport.api.schemas.exports import Export
from qexport.api.schemas.problems import problem_responses
from qexport.api.schemas.schedules import Schedule as ScheduleView
from qexport.api.schemas.schedules import (
    ScheduleChange,
    ScheduleList,
    ScheduleRequest,
    SigningKey,
    Subscription,
)
from qexport.domain.accounts import Principal
from qexport.domain.commands import (
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    RunScheduleNow,
    ScheduleDraft,
    Subscribe,
)
from qexport.domain.failures import InvalidRequestError
from qexport.domain.schedules import Schedule
from qexport.http.one_hop import OneHopRoute
from qexport.services import scheduling
from qexport.services.schedules import catalog as service
from qexport.services.schedules import subscriptions, visibility
from qexport.services.scheduling import delete_schedule as delete_schedule_now
from qexport.services.scheduling import run_schedule_now
from qexport.services.signing import signing_key as workspace_key
from qexport.services.views import delivery_view, export_view, schedule_view

router = APIRouter(route_class=OneHopRoute, tags=["schedules"])

# The members of a change that may be null: a null timezone means the workspace's; a null
# subject id names no subject, so the other id must (ScheduleChange documents both).
_NULLABLE = frozenset({"timezone", "query_id", "report_id", "filename_template"})
_OTHER_SUBJECT = {"query_id": "report_id", "report_id": "query_id"}


def _view(
    schedule: Schedule, actor: Principal, subscribed: frozenset[str] = frozenset()
) -> ScheduleView:
    full = visibility.sees_recipients(actor, schedule)
    view = ScheduleView.model_validate(schedule_view(schedule, full_recipients=full))
    return view.model_copy(update={"subscribed": schedule.id in subscribed})


@router.get(
    "/schedules/signing-key",
    response_model=SigningKey,
    responses=problem_responses(401, 403, 503),
    summary="The workspace's webhook signing key (workspace admins)",
)
def signing_key(principal: CurrentPrincipal, context: Context) -> SigningKey:
    visibility.require_admin(principal)
    key = workspace_key(context.settings, context.schedules, context.clock, principal.workspace_id)
    return SigningKey(workspace=principal.workspace_id, key=key)


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleView,
    responses={
        201: {
            "description": "Saved; the first export is due at `next_run_at`.",
            "headers": {"Location": {"schema": {"type": "string"}}},
        },
        **problem_responses(400, 401, 403, 404, 413, 422, 503),
    },
    summary="Save a schedule (editors and admins)",
)
def create_schedule(
    body: ScheduleRequest,
    principal: CurrentPrincipal,
    context: Context,
    request: Request,
    response: Response,
) -> ScheduleView:
    """Validated like an export request: a subject the caller cannot read is 404; a bad
    format, parameter, cron, time zone or recipient is 422 naming the field (a webhook to a
    loopback, private, link-local or other internal address included), every mistake at
    once in `errors`, in the order subject, format, cron, timezone, recipients, missed,
    parameters."""
    draft = ScheduleDraft(
        query_id=body.query_id,
        report_id=body.report_id,
        format=body.format,
        parameters=body.parameters,
        cron=body.cron,
        timezone=body.timezone,
        recipients=[r.model_dump() for r in body.recipients],
        missed=body.missed,
        enabled=body.enabled,
        neutralize_formulas=body.options.neutralize_formulas,
        filename_template=body.filename_template,
    )
    schedule = scheduling.create_schedule(context, principal, CreateSchedule(draft))
    response.headers["Location"] = request.app.url_path_for(
        "read_schedule", schedule_id=schedule.id
    )
    return _view(schedule, principal)


@router.get(
    "/schedules",
    response_model=ScheduleList,
    responses=problem_responses(401, 503),
    summary="The workspace's schedules you can see",
)
def list_schedules(principal: CurrentPrincipal, context: Context) -> ScheduleList:
    found = visibility.list_visible_schedules(context.catalog, context.schedules, principal)
    subscribed = subscriptions.subscribed_ids(context.schedules, principal)
    return ScheduleList(items=[_view(s, principal, subscribed) for s in found])


@router.get(
    "/schedules/{schedule_id}",
    response_model=ScheduleView,
    responses=problem_responses(401, 404, 503),
    summary="One schedule (404 when missing, deleted or not visible to you)",
)
def read_schedule(schedule_id: str, principal: CurrentPrincipal, context: Context) -> ScheduleView:
    schedule = visibility.get_visible_schedule(
        context.catalog, context.schedules, principal, schedule_id
    )
    return _view(schedule, principal, subscriptions.subscribed_ids(context.schedules, principal))


@router.patch(
    "/schedules/{schedule_id}",
    response_model=ScheduleView,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 503),
    summary="Change some settings (its owner or a workspace admin)",
)
def change_schedule(
    schedule_id: str, body: ScheduleChange, principal: CurrentPrincipal, context: Context
) -> ScheduleView:
    """`{"enabled": false}` pauses, `{"enabled": true}` resumes from now on (due times that
    passed while paused never fire); a new cron or time zone also counts from now."""
    changes: dict[str, Any] = {}
    found: list[InvalidRequestError] = []  # refused with the service's own, all at once
    for name in sorted(body.model_fields_set):
        value = getattr(body, name)
        if value is None and name not in _NULLABLE:
            found.append(InvalidRequestError(f"{name} cannot be null", field=name))
            continue
        other = _OTHER_SUBJECT.get(name)
        if value is None and other and getattr(body, other) is None:
            found.append(
                InvalidRequestError(f"{name} may be null only beside a {other}", field=name)
            )
            continue
        if name == "options":
            changes["neutralize_formulas"] = value.neutralize_formulas
        elif name == "recipients":
            changes[name] = [r.model_dump() for r in value]
        elif value is not None or name in ("timezone", "filename_template"):
            changes[name] = value
    changed = ChangeSchedule(schedule_id, changes, found=tuple(found))
    schedule = scheduling.change_schedule(context, principal, changed)
    return _view(schedule, principal, subscriptions.subscribed_ids(context.schedules, principal))


@router.delete(
    "/schedules/{schedule_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(401, 403, 404, 503),
    summary="Delete a schedule (its owner or a workspace admin); its exports stay",
)
def delete_schedule(schedule_id: str, principal: CurrentPrincipal, context: Context) -> Response:
    delete_schedule_now(context, principal, DeleteSchedule(schedule_id))
    return Response(status_code=204)


@router.post(
    "/schedules/{schedule_id}/run",
    status_code=202,
    response_model=Export,
    responses={
        202: {
            "description": "The export is recorded and queued, with a delivery per recipient.",
            "headers": {"Location": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 403, 404, 409, 429, 503),
    },
    summary="Fire a schedule now (its owner or a workspace admin)",
)
def run_schedule(
    schedule_id: str, principal: CurrentPrincipal, context: Context, response: Response
) -> Export:
    """An export outside the timetable, with the owner's rights, whether or not the schedule
    is paused; its timetable is left as it is."""
    record = run_schedule_now(context, principal, RunScheduleNow(schedule_id))
    response.headers["Location"] = f"/api/v1/exports/{record.id}"
    return Export.model_validate(export_view(record, context.clock.now()))


@router.get(
    "/exports/{export_id}/deliveries",
    response_model=DeliveryList,
    responses=problem_responses(401, 404, 503),
    tags=["exports"],
    summary="Who hears about an export, and how far each delivery got",
)
def list_deliveries(export_id: str, principal: CurrentPrincipal, context: Context) -> DeliveryList:
    found = service.list_visible_deliveries(
        context.exports,
        context.deliveries,
        principal.requester,
        export_id,
        whole_workspace=principal.sees_workspace,
    )
    return DeliveryList(items=[Delivery.model_validate(delivery_view(d)) for d in found])


# ---------------------------------------------------------------- subscribing oneself


@router.post(
    "/schedules/{schedule_id}/subscription",
    response_model=Subscription,
    responses=problem_responses(401, 403, 404, 409, 503),
    summary="Subscribe yourself: each run's export is mailed to your own address too",
)
def subscribe(schedule_id: str, principal: CurrentPrincipal, context: Context) -> Subscription:
    """Any member who may read the schedule's subject, viewers included; it does not make you
    the owner (the exports still run with the owner's rights) and changes nothing else. Each
    run is mailed to you only while you may still read the subject. 404 for a schedule you
    cannot see; 403 when you see it but may not read its subject; 409 for a subject whose rows
    depend on who runs it (its SQL reads $user_id). Subscribing again changes nothing."""
    found = scheduling.subscribe(context, principal, Subscribe(schedule_id))
    return Subscription(schedule_id=found.schedule_id, subscribed=True, email=found.email)


@router.delete(
    "/schedules/{schedule_id}/subscription",
    status_code=204,
    response_class=Response,
    responses=problem_responses(401, 404, 503),
    summary="Unsubscribe yourself (also once you may no longer see the schedule)",
)
def unsubscribe(schedule_id: str, principal: CurrentPrincipal, context: Context) -> Response:
    scheduling.subscribe(context, principal, Subscribe(schedule_id, subscribed=False))
    return Response(status_code=204)
