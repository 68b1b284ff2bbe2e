"""A report as its form writes it: one row of fields per section (heading, query, how it is
shown, the chart's columns, rows at most, values fixed for its query), rows added, removed and
moved by the form's own buttons, so that it works without JavaScript.

Each row's fields are named `section-N-PART` (N from 1, in the order shown); a row action is
the `action` button pressed (`add`, `remove-N`, `up-N`, `down-N`) and re-renders the form with
the rows as typed, nothing saved. Refusals of a section (`sections.1.row_cap`) are shown on the
field of its row (`section-2-rows`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from qexport.container import Container
from qexport.domain.commands import ReportDraft
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import Query, Visibility, to_json_value
from qexport.domain.reports import DEFAULT_ROW_CAP, MAX_SECTIONS, Display, Report, Section
from qexport.web.forms import GENERAL, member_ids, member_lines, numbered_lines, visibility_of

FIELDS = ("title", "description", "sections", "visibility", "members")
ROW_PARTS = ("heading", "query", "display", "values", "series", "rows", "fixed")
# A section's field in the service's words -> the part of its row that shows it.
_PART_OF = {
    "heading": "heading",
    "query_id": "query",
    "display": "display",
    "values": "values",
    "series": "series",
    "row_cap": "rows",
    "parameters": "fixed",
}
_ROW_FIELD = re.compile(r"^section-(\d{1,3})-([a-z]+)$")
_SECTION_FIELD = re.compile(r"^sections\.(\d+)\.([a-z_]+)")
_ACTION = re.compile(r"^(add|remove|up|down)(?:-(\d{1,3}))?$")
DISPLAYS = (("table", "Table"), ("bar", "Bar chart"), ("line", "Line chart"))


@dataclass(frozen=True)
class SectionRow:
    """One section's fields, as typed."""

    heading: str = ""
    query: str = ""  # a query id
    display: str = "table"
    values: str = ""  # value columns, separated by commas
    series: str = ""
    rows: str = str(DEFAULT_ROW_CAP)
    fixed: str = ""  # NAME=VALUE, one per line

    @property
    def chart(self) -> bool:
        return self.display != Display.TABLE.value


@dataclass(frozen=True)
class ReportForm:
    """The form's values, as typed."""

    title: str = ""
    description: str = ""
    sections: tuple[SectionRow, ...] = (SectionRow(),)
    visibility: str = "workspace"
    members: str = ""


def row_of(section: Section) -> SectionRow:
    lines = []
    for key, value in section.parameters.items():
        shown = to_json_value(value)
        lines.append(f"{key}={str(shown).lower() if isinstance(shown, bool) else shown}")
    return SectionRow(
        heading=section.heading,
        query=section.query_id,
        display=section.display.value,
        values=", ".join(section.values),
        series=section.series or "",
        rows=str(section.row_cap),
        fixed="\n".join(lines),
    )


def form_of(context: Container, report: Report) -> ReportForm:
    return ReportForm(
        title=report.title,
        description=report.description,
        sections=tuple(row_of(s) for s in report.sections) or (SectionRow(),),
        visibility=report.visibility.value,
        members=member_lines(context.accounts, report.members),
    )


def read_form(form: Mapping[str, str]) -> ReportForm:
    """The form's values from its fields; rows in the order of their numbers."""
    rows: dict[int, dict[str, str]] = {}
    for key, value in form.items():
        found = _ROW_FIELD.match(key)
        if found and found[2] in ROW_PARTS and int(found[1]) <= MAX_SECTIONS + 1:
            rows.setdefault(int(found[1]), {})[found[2]] = value
    return ReportForm(
        title=form.get("title", ""),
        description=form.get("description", ""),
        sections=tuple(SectionRow(**rows[n]) for n in sorted(rows)),
        visibility=form.get("visibility", "workspace"),
        members=form.get("members", ""),
    )


def apply_action(form: ReportForm, action: str) -> ReportForm | None:
    """The form after a row button (`add`, `remove-2`, `up-3`, `down-1`: the rows as typed,
    changed); None when the action is to save."""
    found = _ACTION.match(action)
    if found is None:
        return None
    rows = list(form.sections)
    verb, index = found[1], int(found[2] or 0) - 1
    if verb == "add":
        rows += [SectionRow()] if len(rows) < MAX_SECTIONS else []
    elif 0 <= index < len(rows):
        if verb == "remove":
            del rows[index]
        else:
            other = index - 1 if verb == "up" else index + 1
            if 0 <= other < len(rows):
                rows[index], rows[other] = rows[other], rows[index]
    return replace(form, sections=tuple(rows))


@dataclass
class ReadReport:
    """The draft a form describes and what could not be read of it."""

    draft: ReportDraft
    found: list[InvalidRequestError] = field(default_factory=list)


def read_draft(context: Container, form: ReportForm) -> ReadReport:
    """The draft: a row cap, display or fixed value that cannot be read is a problem of its
    own on its row (the draft goes on with a stand-in), so that every mistake is told at once."""
    found: list[InvalidRequestError] = []
    sections = tuple(_section(i, row, found) for i, row in enumerate(form.sections))
    try:
        visibility = visibility_of(form.visibility)
    except InvalidRequestError as exc:
        found.append(exc)
        visibility = Visibility.MEMBERS if form.members.strip() else Visibility.WORKSPACE
    draft = ReportDraft(
        title=form.title.strip(),
        description=form.description.strip(),
        sections=sections,
        visibility=visibility,
        members=member_ids(context.accounts, form.members),
    )
    return ReadReport(draft, found)


def _section(index: int, row: SectionRow, found: list[InvalidRequestError]) -> Section:
    where = f"sections.{index}"
    try:
        display = Display(row.display)
    except ValueError:
        found.append(
            InvalidRequestError("choose table, bar chart or line chart", field=f"{where}.display")
        )
        display = Display.TABLE
    rows = DEFAULT_ROW_CAP
    if row.rows.strip():
        try:
            rows = int(row.rows.strip())
        except ValueError:
            found.append(
                InvalidRequestError(
                    f"rows at most is a whole number, not {row.rows.strip()[:40]!r}",
                    field=f"{where}.row_cap",
                )
            )
    values = tuple(v.strip() for v in row.values.split(",") if v.strip())
    fixed: dict[str, str] = {}
    for number, line in numbered_lines(row.fixed):
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            found.append(
                InvalidRequestError(
                    f"line {number} expects NAME=VALUE, got {line[:80]!r}",
                    field=f"{where}.parameters",
                )
            )
            continue
        fixed[name.strip()] = value.strip()
    return Section(
        heading=row.heading.strip(),
        query_id=row.query.strip(),
        parameters=fixed,
        display=display,
        row_cap=rows,
        series=row.series.strip() or None,
        values=values,
    )


def row_field(exc: InvalidRequestError) -> str:
    """The form field a refusal is shown on: `sections.1.row_cap` -> `section-2-rows`."""
    named = exc.field or ""
    found = _SECTION_FIELD.match(named)
    if found and found[2] in _PART_OF:
        return f"section-{int(found[1]) + 1}-{_PART_OF[found[2]]}"
    for name in FIELDS:
        if named == name or named.startswith((f"{name}.", f"{name}[")):
            return name
    return GENERAL


def errors_of(exc: InvalidRequestError) -> dict[str, str]:
    """Every refusal on its field, in the order found; a section's led by its number (the
    summary above the form lists them all)."""
    errors: dict[str, list[str]] = {}
    for problem in exc.problems:
        name = row_field(problem)
        found = _ROW_FIELD.match(name)
        text = f"Section {found[1]}: {problem.detail}" if found else problem.detail
        errors.setdefault(name, []).append(text)
    return {name: " ".join(texts) for name, texts in errors.items()}


def query_choices(queries: list[Query], form: ReportForm) -> list[dict[str, Any]]:
    """The queries a row may show (those the editor may read), and any query a row names that
    is not among them, so that the form shows what is there."""
    choices = [{"id": q.id, "name": q.name} for q in queries]
    known = {q.id for q in queries}
    for row in form.sections:
        if row.query and row.query not in known:
            choices.append({"id": row.query, "name": "a query you cannot read"})
            known.add(row.query)
    return choices
