"""What deleting a query, a report or a schedule does, in the words its confirmation shows.

Read from what the code does, not hoped for: a query or report is marked deleted, so
- an export of it that is queued (or handed back for another attempt) fails `access_lost` when
  a worker claims it (the pre-run check), and recipients waiting on it hear of the failure;
- an attempt already running keeps the subject it read when claimed and may finish, but no
  file made from a deleted query or report is downloadable any more: not from its page, the
  API or a public link (`may_read_subject` refuses them all);
- a schedule of it keeps firing, and each of its exports fails `access_lost` (recipients are
  told); a report showing a deleted query fails the same way until its section is changed.
A deleted schedule fires no more; the exports it made, unsettled ones included, go on and are
delivered as before (deliveries do not look at the schedule).
"""

from __future__ import annotations

from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.domain.reports import SUBJECT_REPORT, Report, can_read_report
from qexport.domain.schedules import Schedule
from qexport.ports import Catalog, ScheduleStore

_EXPORTS = (
    "Exports of it that are queued fail as access lost before they run; one already running"
    " may finish, but no file made from it can be downloaded any more, from its page, the API"
    " or a public link."
)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _schedules_of(schedules: ScheduleStore, workspace_id: str, kind: str, ident: str) -> int:
    return sum(
        1
        for s in schedules.list_schedules(workspace_id)
        if s.subject_type == kind and s.subject_id == ident
    )


def query_consequence(
    catalog: Catalog, schedules: ScheduleStore, query: Query, requester: Requester
) -> str:
    """What deleting the query does, with the schedules and reports that use it (the titles
    of those only the reports the requester may read; the others are counted)."""
    words = [_EXPORTS]
    scheduled = _schedules_of(schedules, query.workspace_id, "query", query.id)
    if scheduled:
        words.append(
            f"{_count(scheduled, 'schedule exports', 'schedules export')} it: each of their"
            " runs will fail as access lost, and their recipients are told so."
        )
    shown = [
        r
        for r in catalog.list_reports(query.workspace_id)
        if any(s.query_id == query.id for s in r.sections)
    ]
    if shown:
        titles = [r.title for r in shown if can_read_report(requester, r)][:3]
        hidden = len(shown) - len(titles)
        named = ", ".join(titles) + (f" and {hidden} more" if titles and hidden else "")
        words.append(
            f"{_count(len(shown), 'report shows', 'reports show')} it"
            + (f" ({named})" if titles else "")
            + ": their exports will fail as access lost until that section is changed."
        )
    return " ".join(words)


def report_consequence(schedules: ScheduleStore, report: Report) -> str:
    """What deleting the report does, with the schedules that export it."""
    words = [_EXPORTS]
    scheduled = _schedules_of(schedules, report.workspace_id, SUBJECT_REPORT, report.id)
    if scheduled:
        words.append(
            f"{_count(scheduled, 'schedule exports', 'schedules export')} it: each of their"
            " runs will fail as access lost, and their recipients are told so."
        )
    return " ".join(words)


def schedule_consequence(_schedule: Schedule) -> str:
    """What deleting the schedule does (the same for every schedule)."""
    return (
        "It makes no more exports. The exports it already made stay, queued and running ones"
        " included: they finish and are delivered to its recipients as before."
    )
