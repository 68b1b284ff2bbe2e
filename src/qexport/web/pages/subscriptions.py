"""Subscribe and Unsubscribe on a schedule's page: each run's export mailed to the person's
own address too, for any member who may read its subject (schedules.subscriptions.subscribe). Both
are POSTs with the CSRF field that lead back to the page with a notice."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.commands import Subscribe
from qexport.domain.failures import NotFoundError
from qexport.domain.schedules import Schedule
from qexport.services import scheduling
from qexport.services.schedules import subscriptions, visibility
from qexport.web.auth import CheckedForm, Context, WebPrincipal
from qexport.web.errors import PageRoute

router = APIRouter(route_class=PageRoute, include_in_schema=False)


def _page(schedule_id: str) -> str:
    return f"/schedules/{quote(schedule_id, safe='')}"


def subscription_of(context: Container, actor: Principal, schedule: Schedule) -> dict[str, Any]:
    """What the schedule's page shows of the person's subscription: whether they are
    subscribed, and whether they may (or why not)."""
    refusal = subscriptions.subscription_refusal(context.catalog, context.accounts, actor, schedule)
    user = context.accounts.get_user(actor.requester.user_id)
    return {
        "subscribed": schedule.id in subscriptions.subscribed_ids(context.schedules, actor),
        "offered": refusal is None,
        "refusal": None if refusal is None else refusal.reason.replace("the subscriber", "you"),
        "email": user.email if user else None,
    }


@router.post("/schedules/{schedule_id}/subscribe")
def subscribe(
    context: Context, _session: CheckedForm, principal: WebPrincipal, schedule_id: str
) -> Response:
    found = scheduling.subscribe(context, principal, Subscribe(schedule_id))
    return RedirectResponse(f"{_page(found.schedule_id)}?notice=subscribed", status_code=303)


@router.post("/schedules/{schedule_id}/unsubscribe")
def unsubscribe(
    context: Context, _session: CheckedForm, principal: WebPrincipal, schedule_id: str
) -> Response:
    """Back to the schedule's page, or to the list when the person may no longer see it."""
    found = scheduling.subscribe(context, principal, Subscribe(schedule_id, subscribed=False))
    try:
        visibility.get_visible_schedule(
            context.catalog, context.schedules, principal, found.schedule_id
        )
    except NotFoundError:
        return RedirectResponse("/schedules?notice=unsubscribed", status_code=303)
    return RedirectResponse(f"{_page(found.schedule_id)}?notice=unsubscribed", status_code=303)


@router.get("/schedules/{schedule_id}/subscribe")
@router.get("/schedules/{schedule_id}/unsubscribe")
def subscription_address(schedule_id: str) -> Response:
    """The button's address opened again (a reload, a bookmark): the schedule's page."""
    return RedirectResponse(_page(schedule_id), status_code=303)
