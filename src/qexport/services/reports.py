"""Reports through the API and the CLI: written by editors and admins, read as
`can_read_report` allows, each section naming a query the writer may read.

A report the caller cannot read answers exactly like a missing one (NotFoundError); a section
naming a query the writer cannot read is refused with the same words as a missing query.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from qexport.domain.accounts import Principal
from qexport.domain.audit import Action, Actor, AuditEvent, changes
from qexport.domain.commands import ReportDraft, SaveReport
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    Problems,
    in_field_order,
)
from qexport.domain.queries import Parameter, Query, bind_parameters, can_read
from qexport.domain.reports import (
    MAX_ROW_CAP,
    MAX_SECTIONS,
    SUBJECT_REPORT,
    Report,
    ReportSubject,
    Section,
    can_read_report,
    check_chart_columns,
)
from qexport.ports import Catalog
from qexport.services.audit import event
from qexport.services.deps import Deps
from qexport.services.queries import check_visibility, workspace_members

MAX_TITLE_CHARS = 200
MAX_HEADING_CHARS = 200
MAX_DESCRIPTION_CHARS = 5_000
MAX_ID_CHARS = 200  # ids are UUIDs; longer refs are not worth a lookup
NO_SUCH_REPORT = "no report with this id that you can read"
NO_SUCH_QUERY = "no query with this id that you can read"
CHOOSE_QUERY = "choose the query this section shows"
# As for query names: control, format (bidi overrides, zero-width), surrogate, private-use
# characters and line or paragraph separators are nothing a person means to put in a title.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


# ---------------------------------------------------------------- checks


def _encodable(text: str) -> bool:
    """No lone surrogates (UTF-8, and so every database, refuses them) nor NUL."""
    return "\x00" not in text and not any("\ud800" <= c <= "\udfff" for c in text)


def _check_label(text: str, *, what: str, limit: int, field: str) -> None:
    if not 1 <= len(text) <= limit:
        raise InvalidRequestError(f"a {what} has 1 to {limit} characters", field=field)
    if any(unicodedata.category(c) in _HIDDEN_CATEGORIES for c in text):
        raise InvalidRequestError(f"a {what} cannot contain control characters", field=field)
    if text != text.strip():
        raise InvalidRequestError(f"a {what} cannot start or end with spaces", field=field)


def _check_fixed_parameters(where: str, section: Section, query: Query) -> None:
    """Fixed values must name the query's parameters and coerce to their types; the others
    may come from the export request, so a missing required one is no error here."""
    declared = {p.name: p for p in query.parameters}
    problems = Problems()
    for name, value in section.parameters.items():
        with problems.check():
            _check_fixed_value(f"{where}.parameters.{name}", name, value, query, declared)
    problems.raise_any()


def _check_fixed_value(
    field: str, name: str, value: Any, query: Query, declared: Mapping[str, Parameter]
) -> None:
    if name not in declared:
        accepted = ", ".join(declared) or "none"
        raise InvalidRequestError(
            f"the query has no parameter {name!r} (declared: {accepted})", field=field
        )
    if value is None:
        raise InvalidRequestError(
            f"a fixed value for {name!r} cannot be null; leave it out to take it from"
            " the export request",
            field=field,
        )
    if isinstance(value, str) and not _encodable(value):
        raise InvalidRequestError("the value contains a NUL or an unpaired surrogate", field=field)
    probe = replace(query, parameters=(declared[name],))
    try:
        bind_parameters(probe, {name: value})
    except InvalidRequestError as exc:
        raise InvalidRequestError(str(exc), field=field) from None


def _check_section(
    index: int, section: Section, store: Catalog, requester: Requester, problems: Problems
) -> None:
    """Every problem of one section, each on its own field (`sections.2.row_cap`)."""
    where = f"sections.{index}"
    with problems.check():
        _check_label(
            section.heading, what="heading", limit=MAX_HEADING_CHARS, field=f"{where}.heading"
        )
    query = (
        store.get_query(section.query_id)
        if len(section.query_id) <= MAX_ID_CHARS and _encodable(section.query_id)
        else None
    )
    if not section.query_id:
        problems.add(InvalidRequestError(CHOOSE_QUERY, field=f"{where}.query_id"))
    elif query is None or not can_read(requester, query):
        problems.add(InvalidRequestError(NO_SUCH_QUERY, field=f"{where}.query_id"))
    else:
        with problems.check():
            _check_fixed_parameters(where, section, query)
    if not 1 <= section.row_cap <= MAX_ROW_CAP:
        problems.add(
            InvalidRequestError(f"a row cap is 1 to {MAX_ROW_CAP:,}", field=f"{where}.row_cap")
        )
    named = [("values", name) for name in section.values]
    named += [("series", section.series)] if section.series is not None else []
    hidden = {
        part
        for part, name in named
        if not _encodable(name) or any(unicodedata.category(c) in _HIDDEN_CATEGORIES for c in name)
    }
    for part in ("values", "series"):
        if part in hidden:
            problems.add(
                InvalidRequestError(
                    "a column name cannot contain control characters", field=f"{where}.{part}"
                )
            )
    if not hidden:
        with problems.check():
            check_chart_columns(section, where)


# The order a report's problems are told in: the report form's, a section's in its row's.
REPORT_FIELDS = ("title", "description", "sections", "visibility", "members")
SECTION_FIELDS = ("heading", "query_id", "display", "values", "series", "row_cap", "parameters")
_SECTION_FIELD = re.compile(r"^sections\.(\d+)(?:\.([a-z_]+))?")


def report_order(problem: InvalidRequestError) -> tuple[int, ...]:
    """Where a problem of a report goes: by field, then section by section and, in one, by
    the order of its row's fields."""
    (top,) = in_field_order(REPORT_FIELDS)(problem)
    found = _SECTION_FIELD.match(problem.field or "")
    if found is None:
        return (top, -1, -1)
    part = found[2] or ""
    rank = SECTION_FIELDS.index(part) if part in SECTION_FIELDS else len(SECTION_FIELDS)
    return (top, int(found[1]), rank)


def check_draft(
    draft: ReportDraft,
    store: Catalog,
    requester: Requester,
    *,
    members: Collection[str] | None,
    found: Sequence[InvalidRequestError] = (),
) -> None:
    """Refuse a draft with a bad title or section, a query the writer cannot read, or
    members from outside the workspace: every mistake at once (with those the caller `found`
    reading its form), in the form's order."""
    problems = Problems(found)
    with problems.check():
        _check_label(draft.title, what="title", limit=MAX_TITLE_CHARS, field="title")
    if len(draft.description) > MAX_DESCRIPTION_CHARS or not _encodable(draft.description):
        problems.add(
            InvalidRequestError(
                f"a description has at most {MAX_DESCRIPTION_CHARS:,} characters, no NUL",
                field="description",
            )
        )
    if not 1 <= len(draft.sections) <= MAX_SECTIONS:
        problems.add(
            InvalidRequestError(f"a report has 1 to {MAX_SECTIONS} sections", field="sections")
        )
    for index, section in enumerate(draft.sections[:MAX_SECTIONS]):
        _check_section(index, section, store, requester, problems)
    with problems.check():
        check_visibility(draft.visibility, draft.members, members)
    problems.raise_any(report_order)


def _writer(principal: Principal) -> None:
    if not principal.can_write_queries:
        raise ForbiddenError("only editors and admins may create, change or delete reports")


# ---------------------------------------------------------------- lookups


def find_readable_report(
    store: Catalog, requester: Requester, ref: str, *, match_title: bool = False
) -> Report:
    """A report by id (or, with `match_title`, by its title when exactly one readable report
    has it) that the requester may read; NotFoundError otherwise."""
    ok = len(ref) <= MAX_ID_CHARS and _encodable(ref)
    report = store.get_report(ref) if ok else None
    if can_read_report(requester, report):
        assert report is not None
        return report
    if match_title and ok:
        titled = [
            r
            for r in store.list_reports(requester.workspace_id)
            if r.title == ref and can_read_report(requester, r)
        ]
        if len(titled) == 1:
            return titled[0]
        if len(titled) > 1:
            raise InvalidRequestError(
                f"{len(titled)} reports are titled {ref!r}; give one's id", field="report_id"
            )
        raise NotFoundError(f"no report {ref[:80]!r} that you can read")
    raise NotFoundError(NO_SUCH_REPORT)


def report_queries(store: Catalog, requester: Requester, report: Report) -> dict[str, Query]:
    """The report's queries; NotFoundError, as for the report itself, if the requester cannot
    read one of them (an export of it would only fail access_lost)."""
    found: dict[str, Query] = {}
    for query_id in dict.fromkeys(s.query_id for s in report.sections):
        query = store.get_query(query_id)
        if query is None or not can_read(requester, query):
            raise NotFoundError(NO_SUCH_REPORT)
        found[query_id] = query
    return found


# ---------------------------------------------------------------- use cases


def may_read_subject(store: Catalog, requester: Requester, record: ExportRecord) -> bool:
    """Whether the requester may still read what the export was made from: its query, or its
    report and every query in it (the pre-render check's rule, applied to downloads)."""
    if record.subject_type != SUBJECT_REPORT:
        return can_read(requester, store.get_query(record.subject_id))
    report = store.get_report(record.subject_id)
    if report is None:
        return False
    ids = {s.query_id for s in report.sections}
    subject = ReportSubject(report, {query_id: store.get_query(query_id) for query_id in ids})
    return subject.refusal(requester) is None


def may_read_export(
    store: Catalog, requester: Requester, record: ExportRecord, query: Query | None
) -> bool:
    """`may_read_subject`, given the query read with the export (ExportQueue
    .get_export_with_query): a query's export then needs no other read."""
    if record.subject_type == SUBJECT_REPORT:
        return may_read_subject(store, requester, record)
    return can_read(requester, query)


def list_readable_reports(store: Catalog, principal: Principal) -> list[Report]:
    """The workspace's live reports that the caller may read, by title."""
    return [
        r
        for r in store.list_reports(principal.workspace_id)
        if can_read_report(principal.requester, r)
    ]


def get_readable_report(store: Catalog, principal: Principal, report_id: str) -> Report:
    """The report if the caller may read it; NotFoundError, as for a missing one, otherwise."""
    return find_readable_report(store, principal.requester, report_id)


def save_report(deps: Deps, principal: Principal, command: SaveReport) -> Report:
    """Save a new report owned by the caller (an editor or admin), or replace a readable one
    whole (its owner stays): the one handler of every door (the API, the pages, the command
    line). Its sections' queries must be ones the caller can read; every mistake is told at
    once and nothing is saved when there is one. Exports already requested run with the
    report as it is when they are claimed."""
    _writer(principal)
    store, draft = deps.catalog, command.draft
    current = (
        None
        if command.report_id is None
        else get_readable_report(store, principal, command.report_id)
    )
    members = workspace_members(deps.accounts, principal)
    check_draft(draft, store, principal.requester, members=members, found=command.found)
    if current is None:
        report = Report(
            id=str(uuid.uuid4()),
            workspace_id=principal.workspace_id,
            title=draft.title,
            description=draft.description,
            sections=draft.sections,
            visibility=draft.visibility,
            members=draft.members,
            owner=principal.user_id,
        )
        return store.add_report(
            report, audit=report_event(principal, Action.REPORT_CREATED, report)
        )
    updated = replace(
        current,
        title=draft.title,
        description=draft.description,
        sections=draft.sections,
        visibility=draft.visibility,
        members=draft.members,
    )
    changed = report_event(principal, Action.REPORT_CHANGED, updated, before=current)
    if not store.update_report(updated, audit=changed):  # deleted in the meantime
        raise NotFoundError(NO_SUCH_REPORT)
    return updated


def delete_report(store: Catalog, principal: Principal, report_id: str) -> None:
    """Delete a readable report; its unsettled exports then fail access_lost before they run."""
    _writer(principal)
    report = get_readable_report(store, principal, report_id)
    deleted = report_event(principal, Action.REPORT_DELETED, report)
    if not store.delete_report(report.id, audit=deleted):
        raise NotFoundError(NO_SUCH_REPORT)


def _audited_fields(report: Report) -> dict[str, Any]:
    """What the trail keeps of a report: its settings and which queries its sections show."""
    return {
        "title": report.title,
        "description": report.description,
        "sections": [[s.heading, s.query_id, s.display.value] for s in report.sections],
        "visibility": report.visibility.value,
        "members": sorted(report.members),
    }


def report_event(
    actor: Principal | Actor, action: Action, report: Report, *, before: Report | None = None
) -> AuditEvent:
    """A report created, changed (`before` it was) or deleted, by `actor`."""
    details: dict[str, Any] = {"title": report.title}
    if before is not None:
        details |= changes(_audited_fields(before), _audited_fields(report))
    return event(
        None,
        actor,
        action,
        workspace_id=report.workspace_id,
        target=("report", report.id),
        details=details,
    )
