"""Who sees a schedule and who may manage it.

A schedule the caller may not see (another workspace, deleted, or of a subject they cannot
read and do not own) answers exactly like a missing one (NotFoundError); one they see but may
not manage is ForbiddenError.
"""

from __future__ import annotations

from qexport.domain.accounts import Principal, Role, at_least
from qexport.domain.exports import Requester
from qexport.domain.failures import ForbiddenError, NotFoundError
from qexport.domain.queries import can_read
from qexport.domain.reports import SUBJECT_REPORT, can_read_report
from qexport.domain.schedules import Schedule
from qexport.ports import Catalog, ScheduleStore

MAX_ID_CHARS = 64  # schedule ids are UUIDs; anything much longer is not worth a lookup
NO_SUCH_SCHEDULE = "no schedule with this id that you can see"


def require_writer(actor: Principal) -> None:
    if not at_least(actor.role, Role.EDITOR):
        raise ForbiddenError("only editors and admins may create schedules")


def may_manage(actor: Principal, schedule: Schedule) -> bool:
    """Whether the actor may change, pause, resume, delete or run the schedule."""
    return schedule.owner == actor.requester.user_id or actor.sees_workspace


def require_manager(actor: Principal, schedule: Schedule) -> None:
    if not may_manage(actor, schedule):
        raise ForbiddenError(
            "only the schedule's owner or a workspace admin may change, pause, resume, delete"
            " or run it"
        )


def reads_subject(store: Catalog, requester: Requester, kind: str, subject_id: str) -> bool:
    if kind == SUBJECT_REPORT:
        return can_read_report(requester, store.get_report(subject_id))
    return can_read(requester, store.get_query(subject_id))


def sees_recipients(actor: Principal, schedule: Schedule) -> bool:
    """Whether the actor sees the recipients in full (webhook URLs hold the receiver's secret,
    addresses are personal): its owner and admins; others see them masked."""
    return may_manage(actor, schedule)


def get_visible_schedule(
    store: Catalog, schedules: ScheduleStore, actor: Principal, schedule_id: str
) -> Schedule:
    """A live schedule of the caller's workspace that they own, administer or whose subject
    they may read; NotFoundError otherwise."""
    schedule = schedules.get_schedule(schedule_id) if len(schedule_id) <= MAX_ID_CHARS else None
    if schedule is None or not sees(store, actor, schedule):
        raise NotFoundError(NO_SUCH_SCHEDULE)
    return schedule


def sees(store: Catalog, actor: Principal, schedule: Schedule) -> bool:
    if schedule.deleted or schedule.workspace_id != actor.requester.workspace_id:
        return False
    if actor.sees_workspace or schedule.owner == actor.requester.user_id:
        return True
    return reads_subject(store, actor.requester, schedule.subject_type, schedule.subject_id)


def list_visible_schedules(
    store: Catalog, schedules: ScheduleStore, actor: Principal
) -> list[Schedule]:
    """The workspace's live schedules the caller may see, oldest first."""
    return [
        s for s in schedules.list_schedules(actor.requester.workspace_id) if sees(store, actor, s)
    ]


def require_admin(actor: Principal) -> None:
    if not actor.sees_workspace:
        raise ForbiddenError("only workspace admins may read the webhook signing key")
