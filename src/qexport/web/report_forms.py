"""A report as its form writes it: sections as `HEADING|QUERY|DISPLAY[|ROW_CAP]` lines and
fixed values as `N:NAME=VALUE` lines, parsed exactly as the CLI's `--section` and `--param`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError, NotFoundError
from qexport.domain.queries import to_json_value
from qexport.domain.reports import (
    Report,
    Section,
    display_spec,
    parse_fixed_spec,
    parse_section_spec,
)
from qexport.services.requests import find_readable_query
from qexport.web.forms import field_of, member_lines, numbered_lines, on_line

FIELDS = ("title", "description", "sections", "fixed", "visibility", "members")


@dataclass(frozen=True)
class ReportForm:
    """The form's values, as typed."""

    title: str = ""
    description: str = ""
    sections: str = ""
    fixed: str = ""
    visibility: str = "workspace"
    members: str = ""


def query_name(context: Container, query_id: str) -> str:
    query = context.catalog.get_query(query_id)
    return query.name if query else query_id


def form_of(context: Container, report: Report) -> ReportForm:
    sections, fixed = [], []
    for number, s in enumerate(report.sections, start=1):
        name = query_name(context, s.query_id)
        sections.append(f"{s.heading}|{name}|{display_spec(s)}|{s.row_cap}")
        for key, value in s.parameters.items():
            shown = to_json_value(value)
            text = str(shown).lower() if isinstance(shown, bool) else str(shown)
            fixed.append(f"{number}:{key}={text}")
    return ReportForm(
        title=report.title,
        description=report.description,
        sections="\n".join(sections),
        fixed="\n".join(fixed),
        visibility=report.visibility.value,
        members=member_lines(context.accounts, report.members),
    )


def parse_sections(
    context: Container, principal: Principal, form: ReportForm
) -> tuple[tuple[Section, ...], list[int]]:
    """The sections the lines describe, their queries found by name or id as the person reads
    them, with the values fixed for them; and the line number of each section."""
    lines = numbered_lines(form.sections)
    sections = []
    for number, line in lines:
        try:
            parsed = parse_section_spec(line)
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"Line {number} {exc}", field="sections") from None
        try:
            query = find_readable_query(context.catalog, principal.requester, parsed.query_id)
        except NotFoundError as exc:
            raise InvalidRequestError(f"Line {number}: {exc}", field="sections") from None
        sections.append((parsed, query.id))
    fixed: dict[int, dict[str, str]] = {}
    for number, line in numbered_lines(form.fixed):
        try:
            index, name, value = parse_fixed_spec(line, len(sections))
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"Line {number} {exc}", field="fixed") from None
        fixed.setdefault(index, {})[name] = value
    built = tuple(
        replace(s, query_id=query_id, parameters=fixed.get(i, {}))
        for i, (s, query_id) in enumerate(sections)
    )
    return built, [n for n, _ in lines]


def error_of(exc: InvalidRequestError, numbers: list[int]) -> dict[str, str]:
    """A section's fixed value goes next to the fixed values, the rest of a section next to
    the sections, by line."""
    named = exc.field or ""
    if named.startswith("sections.") and ".parameters." in named:
        section = int(named.split(".")[1]) + 1
        return {"fixed": f"Section {section}: {exc.detail}"}
    return {field_of(exc, FIELDS): on_line(exc, "sections", numbers)}
