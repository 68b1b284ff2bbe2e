"""The schedule use cases that every door shares, as handlers: each takes the acting principal
and a command, loads what it needs (the caps in the settings, the workspace's members) and
takes the schedule catalogue's steps (`qexport.services.schedules.catalog`). The API, the pages and
the command line call these, never the steps themselves."""

from __future__ import annotations

from typing import Protocol

from qexport.config import Settings
from qexport.domain.accounts import Principal
from qexport.domain.commands import DeleteSchedule, PauseSchedule, RunScheduleNow, Subscribe
from qexport.domain.exports import ExportRecord
from qexport.domain.schedules import Schedule
from qexport.ports import AccountStore, Catalog, Clock, ScheduleStore
from qexport.services.schedules import catalog
from qexport.services.schedules.catalog import Subscription


class ScheduleDeps(Protocol):
    """What handling a schedule command reads and writes (the container has it all)."""

    @property
    def catalog(self) -> Catalog: ...
    @property
    def schedules(self) -> ScheduleStore: ...
    @property
    def accounts(self) -> AccountStore: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> Settings: ...


def run_schedule_now(
    deps: ScheduleDeps, principal: Principal, command: RunScheduleNow
) -> ExportRecord:
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


def delete_schedule(deps: ScheduleDeps, principal: Principal, command: DeleteSchedule) -> None:
    """Its owner or a workspace admin; NotFoundError for one the principal cannot see."""
    catalog.delete_schedule(
        deps.catalog, deps.schedules, deps.clock, principal, command.schedule_id
    )


def pause_schedule(deps: ScheduleDeps, principal: Principal, command: PauseSchedule) -> Schedule:
    """The schedule, paused or resumed; its owner or a workspace admin."""
    return catalog.set_enabled(
        deps.catalog,
        deps.schedules,
        deps.accounts,
        deps.clock,
        principal,
        command.schedule_id,
        enabled=command.enabled,
    )


def subscribe(deps: ScheduleDeps, principal: Principal, command: Subscribe) -> Subscription:
    """Subscribed (any member who may read the schedule's subject; again changes nothing),
    or unsubscribed (also once they may no longer see the schedule)."""
    if command.subscribed:
        return catalog.subscribe(
            deps.catalog,
            deps.schedules,
            deps.accounts,
            deps.clock,
            principal,
            command.schedule_id,
        )
    return catalog.unsubscribe(deps.catalog, deps.schedules, principal, command.schedule_id)
