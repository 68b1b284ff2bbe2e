"""Subscribers: members who asked for a schedule's exports at their own email address.

DESIGN section 7 makes whoever changes where a schedule's results go its owner. Subscribing
one's own address is the deliberate exception: it says where one's *own* copy goes, not
anyone else's, so the subscriber does not become the owner and changes nothing else (the
subscribers are kept apart from the owner's recipients). The export still runs with the
owner's rights, so a subscriber receives it only while they could read it themselves, checked
when a run is fired (no delivery is recorded for them otherwise) and again when it is sent
(the delivery then fails access_lost, unsent):

- they are still a member of the workspace, with an account that is not disabled;
- they may read the subject (the query; for a report, the report and every section's query);
- the subject's rows do not depend on who runs it: a query that reads `$user_id` returns its
  owner's rows, which the subscriber could not read as themselves, so it cannot be subscribed
  to. (A PostgreSQL row-level-security policy that reads `qexport.user_id` has the same
  effect without naming `$user_id` in the query; the README says so.)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from qexport.domain.exports import Requester
from qexport.domain.queries import Query, can_read
from qexport.domain.reports import SUBJECT_REPORT, ReportSubject
from qexport.domain.schedules import Channel, NewDelivery, Recipient, Schedule
from qexport.ports import Catalog, ScheduleStore, UserStore

log = structlog.get_logger()

# Sources fold ASCII letters in parameter names: any spelling of $user_id is the requester's.
_REQUESTER = re.compile(r"\$user_id(?![A-Za-z0-9_])", re.IGNORECASE | re.ASCII)
PER_PERSON = (
    "its rows depend on who runs it (its SQL reads $user_id), and its exports run with the"
    " owner's rights: a subscriber would get the owner's rows; export it yourself instead"
)


def _subject_queries(catalog: Catalog, kind: str, subject_id: str) -> ReportSubject | Query | None:
    if kind != SUBJECT_REPORT:
        return catalog.get_query(subject_id)
    report = catalog.get_report(subject_id)
    queries = {s.query_id: catalog.get_query(s.query_id) for s in report.sections} if report else {}
    return ReportSubject(report, queries)


@dataclass(frozen=True)
class Refusal:
    """Why a member may not receive a copy of a schedule's exports."""

    reason: str
    per_person: bool = False  # the subject's rows depend on who runs it


def reading_refusal(
    catalog: Catalog, requester: Requester, kind: str, subject_id: str
) -> Refusal | None:
    """Why `requester` may not receive a copy of the subject's exports, or None: they may not
    read it, or its rows are per person."""
    subject = _subject_queries(catalog, kind, subject_id)
    queries: Iterable[Query | None]
    if isinstance(subject, ReportSubject):
        if subject.refusal(requester) is not None:
            return Refusal("the subscriber may not read this report or a query in it")
        queries = subject.queries.values()
    else:
        if not can_read(requester, subject):
            return Refusal("the subscriber may not read this query")
        queries = [subject]
    if any(q is not None and _REQUESTER.search(q.sql) for q in queries):
        return Refusal(PER_PERSON, per_person=True)
    return None


def subscriber_refusal(
    catalog: Catalog,
    accounts: UserStore,
    *,
    workspace_id: str,
    user_id: str,
    subject_type: str,
    subject_id: str,
) -> Refusal | None:
    """Why the subscriber `user_id` may not receive an export of the subject now, or None."""
    user = accounts.get_user(user_id)
    if user is None or user.disabled:
        return Refusal("the subscriber's account is gone or disabled")
    if accounts.role_of(workspace_id, user_id) is None:
        return Refusal("the subscriber is no longer a member of the workspace")
    return reading_refusal(catalog, Requester(user_id, workspace_id), subject_type, subject_id)


def subscriber_deliveries(
    catalog: Catalog, accounts: UserStore, schedules: ScheduleStore, schedule: Schedule
) -> list[NewDelivery]:
    """A delivery for each subscriber who may receive this run, to their own address; none
    for an address the owner's recipients already hear at (it would be mailed twice)."""
    heard = {r.target.lower() for r in schedule.recipients if r.channel is Channel.EMAIL}
    found: list[NewDelivery] = []
    for user_id in schedules.subscribers(schedule.id):
        refusal = subscriber_refusal(
            catalog,
            accounts,
            workspace_id=schedule.workspace_id,
            user_id=user_id,
            subject_type=schedule.subject_type,
            subject_id=schedule.subject_id,
        )
        user = accounts.get_user(user_id)
        if refusal is not None or user is None:
            reason = refusal.reason if refusal else "no such user"
            log.info("subscriber_skipped", schedule_id=schedule.id, reason=reason)
            continue
        if user.email.lower() in heard:
            continue
        heard.add(user.email.lower())
        recipient = Recipient(Channel.EMAIL, user.email)
        found.append(NewDelivery(str(uuid.uuid4()), recipient, schedule.id, subscriber=user_id))
    return found
