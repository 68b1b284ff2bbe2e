"""Members who subscribe their own address to a schedule (any member who may read its
subject), and end their subscription."""

from __future__ import annotations

from dataclasses import dataclass

from qexport.domain.accounts import Principal
from qexport.domain.failures import ConflictError, ForbiddenError, NotFoundError
from qexport.domain.schedules import Schedule
from qexport.ports import Catalog, Clock, ScheduleStore, UserStore
from qexport.services.schedules.visibility import (
    MAX_ID_CHARS,
    NO_SUCH_SCHEDULE,
    get_visible_schedule,
    sees,
)
from qexport.services.subscribers import PER_PERSON, Refusal, reading_refusal


@dataclass(frozen=True)
class Subscription:
    """The caller's subscription to a schedule: where each run's export is mailed."""

    schedule_id: str
    subscribed: bool
    email: str | None


def subscription_refusal(
    store: Catalog, accounts: UserStore, actor: Principal, schedule: Schedule
) -> Refusal | None:
    """Why the caller may not subscribe to the (visible) schedule, or None."""
    if accounts.get_user(actor.requester.user_id) is None:
        return Refusal(
            "no email address is known for you: only members with an account may subscribe"
        )
    return reading_refusal(store, actor.requester, schedule.subject_type, schedule.subject_id)


def subscribe(
    store: Catalog,
    schedules: ScheduleStore,
    accounts: UserStore,
    clock: Clock,
    actor: Principal,
    schedule_id: str,
) -> Subscription:
    """Mail each run's export to the caller's own address too; any member who may read the
    schedule's subject may, without becoming its owner or changing anything else. Subscribing
    again changes nothing. NotFoundError for a schedule they cannot see; ForbiddenError when
    they see it (an admin, its owner) but may not read its subject; ConflictError for a
    subject whose rows depend on who runs it."""
    schedule = get_visible_schedule(store, schedules, actor, schedule_id)
    refusal = subscription_refusal(store, accounts, actor, schedule)
    if refusal is not None and refusal.per_person:
        raise ConflictError(f"this schedule cannot be subscribed to: {PER_PERSON}")
    if refusal is not None:
        reason = refusal.reason.replace("the subscriber may", "you may")
        raise ForbiddenError(f"you may not subscribe to this schedule: {reason}")
    user = accounts.get_user(actor.requester.user_id)
    assert user is not None  # subscription_refusal refused a caller without an account
    schedules.subscribe(schedule.id, user.id, now=clock.now())
    return Subscription(schedule.id, subscribed=True, email=user.email)


def unsubscribe(
    store: Catalog, schedules: ScheduleStore, actor: Principal, schedule_id: str
) -> Subscription:
    """Stop mailing the schedule's exports to the caller. Allowed even once they may no
    longer see the schedule (their subscription has stopped delivering, but is theirs to
    end); NotFoundError for a schedule they neither see nor are subscribed to."""
    schedule = schedules.get_schedule(schedule_id) if len(schedule_id) <= MAX_ID_CHARS else None
    if (
        schedule is None
        or schedule.deleted
        or schedule.workspace_id != actor.requester.workspace_id
    ):
        raise NotFoundError(NO_SUCH_SCHEDULE)
    ended = schedules.unsubscribe(schedule.id, actor.requester.user_id)
    if not ended and not sees(store, actor, schedule):
        raise NotFoundError(NO_SUCH_SCHEDULE)
    return Subscription(schedule.id, subscribed=False, email=None)


def subscribed_ids(schedules: ScheduleStore, actor: Principal) -> frozenset[str]:
    """The ids of the workspace's schedules the caller is subscribed to."""
    return schedules.subscriptions(actor.requester.workspace_id, actor.requester.user_id)
