"""The schedule use cases that every door shares, as handlers: each takes the acting principal
and a command, loads what it needs (the caps in the settings, the workspace's members) and
takes the schedule catalogue's steps (`qexport.services.schedules.catalog`, `.subscriptions`).
The API, the pages and the command line call these, never the steps themselves."""

from __future__ import annotations

from qexport.domain.accounts import Principal
from qexport.domain.commands import (
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    PauseSchedule,
    RunScheduleNow,
    Subscribe,
)
from qexport.domain.exports import ExportRecord
from qexport.domain.schedules import Schedule
from qexport.services.deps import Deps
from qexport.services.schedules import catalog, subscriptions
from qexport.services.schedules.subscriptions import Subscription


def create_schedule(deps: Deps, principal: Principal, command: CreateSchedule) -> Schedule:
    """The schedule, saved, owned by the principal (an editor or admin), or with
    `check_only` as it would be saved; every mistake at once (InvalidRequestError), in the
    schedule form's order; the workspace's cap on schedules and shortest interval apply."""
    step = catalog.check_new_schedule if command.check_only else catalog.create_schedule
    return step(deps, principal, command.draft, found=command.found)


def change_schedule(deps: Deps, principal: Principal, command: ChangeSchedule) -> Schedule:
    """The schedule with the changes, saved, or with `check_only` as it would be saved. Its
    owner or a workspace admin; whoever changes where its exports go or what they hold
    becomes its owner (`catalog.update_schedule`)."""
    step = catalog.changed_schedule if command.check_only else catalog.update_schedule
    return step(deps, principal, command.schedule_id, command.changes, found=command.found)


def run_schedule_now(deps: Deps, principal: Principal, command: RunScheduleNow) -> ExportRecord:
    """The export, recorded and queued with the owner's rights and a delivery per recipient
    and per subscriber who may receive it; counted against the owner's cap of unsettled
    exports (QEXPORT_MAX_UNSETTLED_PER_USER). Its owner or a workspace admin."""
    return catalog.run_schedule(
        deps.catalog,
        deps.schedules,
        deps.clock,
        principal,
        command.schedule_id,
        max_unsettled=deps.settings.max_unsettled_per_user,
        accounts=deps.accounts,
    )


def delete_schedule(deps: Deps, principal: Principal, command: DeleteSchedule) -> None:
    """Its owner or a workspace admin; NotFoundError for one the principal cannot see."""
    catalog.delete_schedule(
        deps.catalog, deps.schedules, deps.clock, principal, command.schedule_id
    )


def pause_schedule(deps: Deps, principal: Principal, command: PauseSchedule) -> Schedule:
    """The schedule, paused or resumed; its owner or a workspace admin."""
    return catalog.set_enabled(deps, principal, command.schedule_id, enabled=command.enabled)


def subscribe(deps: Deps, principal: Principal, command: Subscribe) -> Subscription:
    """Subscribed (any member who may read the schedule's subject; again changes nothing),
    or unsubscribed (also once they may no longer see the schedule)."""
    if command.subscribed:
        return subscriptions.subscribe(
            deps.catalog,
            deps.schedules,
            deps.accounts,
            deps.clock,
            principal,
            command.schedule_id,
        )
    return subscriptions.unsubscribe(deps.catalog, deps.schedules, principal, command.schedule_id)
