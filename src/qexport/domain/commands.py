"""What a person asks qexport to do, as data: one frozen command per use case.

Every door (the API, the pages, the command line locally and through a server, "request
again", the demo) turns its input into one of these and hands it, with who is acting, to
the one service function that handles it. The doors parse and present; they never read a
policy, pick between a query and a report or choose which caps apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from qexport.domain.approvals import Decision
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import Parameter, Visibility
from qexport.domain.reports import Section
from qexport.domain.schedules import Missed

SubjectKind = Literal["query", "report"]


@dataclass(frozen=True)
class SubjectRef:
    """A query or a report, by id; with `by_name`, by its name (a query) or title (a report)
    too, as the command line takes them."""

    kind: SubjectKind
    ref: str
    by_name: bool = False


@dataclass(frozen=True)
class RequestExport:
    """Export a subject in a format, with parameter values, optionally notifying recipients
    (each as the API's `notify` item: `{"email": ...}`, `{"webhook": ...}`...).

    `subject` is None when the request named no single subject (both or neither of a query
    and a report): it is refused, with every other mistake in it."""

    subject: SubjectRef | None
    format: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    neutralize_formulas: bool = True
    notify: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class CancelExport:
    """Settle a queued or running export as cancelled."""

    export_id: str


@dataclass(frozen=True)
class ListExports:
    """A page of the exports the caller may see, newest first. The filters are as people and
    programs give them (blank: unset), each checked; `cursor` is a page's `next_cursor` or
    `prev_cursor`, unchanged."""

    status: str | None = None
    format: str | None = None
    subject: str | None = None
    requested_by: str | None = None
    since: str | None = None
    until: str | None = None
    search: str | None = None
    id_prefix: str | None = None
    limit: int = 50
    cursor: str | None = None


@dataclass(frozen=True)
class RequestAgain:
    """A new export of a settled one's subject, format, parameters and options."""

    export_id: str


@dataclass(frozen=True)
class CreateLink:
    """A public link to an export's file, for `days` (None: until the file expires), never
    longer than the workspace's policy lets a link live."""

    export_id: str
    days: int | None = None


@dataclass(frozen=True)
class RevokeLink:
    """Stop a public link; with `export_id`, only if it is a link of that export."""

    link_id: str
    export_id: str | None = None


@dataclass(frozen=True)
class Decide:
    """An admin's answer to an export request waiting for approval, with an optional reason
    the requester reads."""

    approval_id: str
    decision: Decision
    reason: str | None = None


@dataclass(frozen=True)
class SendAgain:
    """Send a failed delivery of an export again: the same delivery (its id, its link), due
    now."""

    export_id: str
    delivery_id: str


@dataclass(frozen=True)
class ChangePolicy:
    """Change some rules of a workspace's policy (named as the API names them; None lifts a
    rule); with `revoke_links`, also revoke the live public links to files of what the new
    policy marks sensitive, made without an approval, in the same transaction."""

    workspace_id: str
    changes: Mapping[str, Any]
    revoke_links: bool = False


@dataclass(frozen=True)
class ScheduleDraft:
    """Every setting of a schedule, as a person or program gave it (checked when a schedule
    is created or changed). `recipients` are JSON: `{"email": ADDRESS}` or `{"webhook":
    URL}`."""

    format: str
    cron: str
    query_id: str | None = None
    report_id: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    timezone: str | None = None  # None: the workspace's time zone
    recipients: Sequence[Any] = ()
    missed: str = Missed.ONCE.value
    enabled: bool = True
    neutralize_formulas: bool = True
    filename_template: str | None = None  # None: the subject's own


@dataclass(frozen=True)
class CreateSchedule:
    """A schedule of the draft's settings, owned by the caller; with `check_only`, checked as
    it would be saved and nothing saved. `found`: the mistakes the door already found reading
    the draft, told with the rest."""

    draft: ScheduleDraft
    found: tuple[InvalidRequestError, ...] = ()
    check_only: bool = False


@dataclass(frozen=True)
class ChangeSchedule:
    """Change the given settings (named as ScheduleDraft's fields) of a schedule; with
    `check_only`, checked as they would be saved and nothing saved. `found` as for
    CreateSchedule."""

    schedule_id: str
    changes: Mapping[str, Any]
    found: tuple[InvalidRequestError, ...] = ()
    check_only: bool = False


@dataclass(frozen=True)
class RunScheduleNow:
    """An export of a schedule now, outside its timetable (paused or not), delivered like the
    others; its timetable stays as it is."""

    schedule_id: str


@dataclass(frozen=True)
class DeleteSchedule:
    """Delete a schedule; the exports it made stay."""

    schedule_id: str


@dataclass(frozen=True)
class PauseSchedule:
    """Pause a schedule (`enabled` False), or resume it from now on (True): due times that
    passed while it was paused never fire."""

    schedule_id: str
    enabled: bool


@dataclass(frozen=True)
class Subscribe:
    """Mail each run of a schedule to the caller's own address too (`subscribed` True), or
    stop (False)."""

    schedule_id: str
    subscribed: bool = True


@dataclass(frozen=True)
class QueryDraft:
    """Everything a caller writes of a query; the id, workspace and owner are not theirs."""

    name: str
    sql: str
    source: str
    parameters: tuple[Parameter, ...] = ()
    visibility: Visibility = Visibility.WORKSPACE
    members: frozenset[str] = frozenset()
    filename_template: str | None = None  # None or blank: DEFAULT_FILENAME

    def to_json(self) -> dict[str, Any]:
        """The draft as the API takes it (POST and PUT /api/v1/queries)."""
        return {
            "name": self.name,
            "sql": self.sql,
            "source": self.source,
            "parameters": [p.to_json() for p in self.parameters],
            "visibility": self.visibility.value,
            "members": sorted(self.members),
            "filename_template": self.filename_template,
        }


@dataclass(frozen=True)
class ReportDraft:
    """Everything a caller writes of a report; the id, workspace and owner are not theirs."""

    title: str
    description: str = ""
    sections: tuple[Section, ...] = ()
    visibility: Visibility = Visibility.WORKSPACE
    members: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """The draft as the API takes it (POST and PUT /api/v1/reports)."""
        return {
            "title": self.title,
            "description": self.description,
            "sections": [s.to_json() for s in self.sections],
            "visibility": self.visibility.value,
            "members": sorted(self.members),
        }


@dataclass(frozen=True)
class SaveQuery:
    """Save a new query owned by the caller (no `query_id`), or replace a readable one whole
    (its owner stays). `found`: the mistakes the door already found reading the draft, told
    with the rest."""

    draft: QueryDraft
    query_id: str | None = None
    found: tuple[InvalidRequestError, ...] = ()


@dataclass(frozen=True)
class SaveReport:
    """Save a new report owned by the caller (no `report_id`), or replace a readable one
    whole (its owner stays). `found` as for SaveQuery."""

    draft: ReportDraft
    report_id: str | None = None
    found: tuple[InvalidRequestError, ...] = ()
