"""Reports: a titled document of sections, each a saved query's result as a table or chart."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from qexport.domain.exports import Requester
from qexport.domain.failures import InvalidRequestError, Problems
from qexport.domain.queries import Query, Visibility, bind_parameters, can_read

SUBJECT_REPORT = "report"
MAX_SECTIONS = 50
DEFAULT_ROW_CAP = 1_000
MAX_ROW_CAP = 100_000


MAX_VALUE_COLUMNS = 6  # value columns a chart section may name
MAX_COLUMN_NAME_CHARS = 200


class Display(StrEnum):
    TABLE = "table"
    # Charts: the first column labels the x axis. Without a series column, each numeric column
    # after it is a series; with one, each distinct value of that column is a series of the
    # value column(s). See reports/charts.py for how values become lines, bars and panels.
    BAR = "bar"
    LINE = "line"


@dataclass(frozen=True)
class Section:
    heading: str
    query_id: str
    # Values fixed by the report; the query's other parameters come from the export request.
    parameters: Mapping[str, Any] = field(default_factory=dict)
    display: Display = Display.TABLE
    row_cap: int = DEFAULT_ROW_CAP
    # Charts only: the column whose distinct values are the series (None: each value column
    # is one), and the numeric columns drawn (none named: every numeric one after the first).
    series: str | None = None
    values: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "heading": self.heading,
            "query_id": self.query_id,
            "parameters": dict(self.parameters),
            "display": self.display.value,
            "row_cap": self.row_cap,
            "series": self.series,
            "values": list(self.values),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Section:
        """A stored section; those saved before charts could group have no series or values."""
        return cls(
            heading=data["heading"],
            query_id=data["query_id"],
            parameters=dict(data.get("parameters") or {}),
            display=Display(data.get("display", Display.TABLE.value)),
            row_cap=int(data.get("row_cap", DEFAULT_ROW_CAP)),
            series=data.get("series") or None,
            values=tuple(data.get("values") or ()),
        )


def check_chart_columns(section: Section, where: str) -> None:
    """Refuse a section's series and value columns for what can be told without running its
    query (InvalidRequestError on `{where}.values` and `{where}.series`, both at once).
    Whether the columns exist and are numeric is only known once it runs:
    reports.model.chart_columns then fails the export render_failed."""
    problems = Problems()
    with problems.check():
        _check_value_columns(section, f"{where}.values")
    with problems.check():
        _check_series_column(section, f"{where}.series")
    problems.raise_any()


def _check_column_name(name: str, field: str) -> None:
    if not 1 <= len(name) <= MAX_COLUMN_NAME_CHARS or name != name.strip():
        raise InvalidRequestError(
            f"a column name has 1 to {MAX_COLUMN_NAME_CHARS} characters, without spaces around it",
            field=field,
        )


def _check_value_columns(section: Section, field: str) -> None:
    if section.display is Display.TABLE and section.values:
        raise InvalidRequestError(
            "a table has no value columns; show it as a bar or line chart", field=field
        )
    if len(section.values) > MAX_VALUE_COLUMNS:
        raise InvalidRequestError(
            f"a chart draws at most {MAX_VALUE_COLUMNS} value columns", field=field
        )
    for name in section.values:
        _check_column_name(name, field)
    if len(set(section.values)) != len(section.values):
        raise InvalidRequestError("a value column is named twice", field=field)


def _check_series_column(section: Section, field: str) -> None:
    if section.series is None:
        return
    if section.display is Display.TABLE:
        raise InvalidRequestError(
            "a table has no series; show the section as a bar or line chart", field=field
        )
    _check_column_name(section.series, field)
    if section.series in section.values:
        raise InvalidRequestError(
            f"the series column {section.series!r} cannot also be a value column: its values"
            " name the series, the value columns give their numbers",
            field=field,
        )


@dataclass(frozen=True)
class Report:
    id: str
    workspace_id: str
    title: str
    description: str = ""
    sections: tuple[Section, ...] = ()
    visibility: Visibility = Visibility.WORKSPACE
    members: frozenset[str] = field(default_factory=frozenset)
    owner: str | None = None
    deleted: bool = False


def can_read_report(requester: Requester, report: Report | None) -> bool:
    """The same rule as for queries: live, in the requester's workspace, visible to them."""
    if report is None or report.deleted or report.workspace_id != requester.workspace_id:
        return False
    if report.visibility is Visibility.WORKSPACE:
        return True
    return requester.user_id in report.members or requester.user_id == report.owner


@dataclass(frozen=True)
class ReportSubject:
    """A report with its sections' queries (None where a query is missing), as read together
    when an export of it is claimed."""

    report: Report | None
    queries: Mapping[str, Query | None] = field(default_factory=dict)

    def refusal(self, requester: Requester) -> str | None:
        """The pre-render check: None when the requester may still read the report and every
        query in it; otherwise why not (the export then fails access_lost, nothing rendered)."""
        if not can_read_report(requester, self.report):
            return "the requester may no longer read this report, or it was deleted"
        assert self.report is not None
        for section in self.report.sections:
            if not can_read(requester, self.queries.get(section.query_id)):
                return (
                    f"the requester may no longer read the query of section"
                    f" {section.heading!r}, or it was deleted"
                )
        return None


def section_parameters(
    section: Section, query: Query, requested: Mapping[str, Any]
) -> dict[str, Any]:
    """Typed values for one section: the report's fixed values, then the request's values for
    the query's other parameters, then the query's defaults."""
    declared = {p.name for p in query.parameters}
    passed = {k: v for k, v in requested.items() if k in declared and k not in section.parameters}
    return bind_parameters(query, {**passed, **section.parameters})


def bind_report_parameters(
    report: Report, queries: Mapping[str, Query], requested: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate an export request's parameters against the report: each must be a parameter
    of some section's query that the report does not fix. Returns them unchanged."""
    open_names = {
        p.name
        for section in report.sections
        for p in queries[section.query_id].parameters
        if p.name not in section.parameters
    }
    accepted = ", ".join(sorted(open_names)) or "none"
    problems: dict[tuple[str | None, str], InvalidRequestError] = {}
    for name in sorted(set(requested) - open_names):
        refused = InvalidRequestError(
            f"unknown parameter {name!r} for report {report.title!r} (accepted: {accepted})",
            field=f"parameters.{name}",
        )
        problems[(refused.field, str(refused))] = refused
    for section in report.sections:
        try:
            section_parameters(section, queries[section.query_id], requested)
        except InvalidRequestError as exc:
            # Two sections of one query ask for the same value: it is refused once.
            for found in exc.problems:
                problems.setdefault((found.field, str(found)), found)
    if problems:
        raise InvalidRequestError.of(list(problems.values()))
    return dict(requested)


# ---------------------------------------------------------------- written forms


_DISPLAY_SPEC = re.compile(
    r"^(?P<display>\S+)(?:\s+of\s+(?P<values>.+?))?(?:\s+by\s+(?P<series>.+?))?$"
)
DISPLAY_SYNTAX = "DISPLAY [of VALUE[, VALUE...]] [by SERIES]"


def parse_section_spec(spec: str) -> Section:
    """`HEADING|QUERY|DISPLAY[|ROW_CAP]` (the CLI's `--section`, the web form's lines); QUERY
    is kept as written (a name or an id) for the caller to resolve. DISPLAY is `table`, `bar`
    or `line`, a chart optionally followed by its value columns and series column:
    `line of revenue by category`, `bar by country`, `bar of orders, revenue`. Messages read
    after the place the spec came from: `--section expects ...`, `Line 2 has an unknown ...`."""
    parts = spec.split("|")
    if not 3 <= len(parts) <= 4:
        raise InvalidRequestError(
            f"expects HEADING|QUERY|DISPLAY[|ROW_CAP], got {spec!r}", field="sections"
        )
    heading, query, display = (p.strip() for p in parts[:3])
    shown, values, series = parse_display_spec(display)
    row_cap = DEFAULT_ROW_CAP
    if len(parts) == 4:
        try:
            row_cap = int(parts[3])
        except ValueError:
            raise InvalidRequestError(
                f"has a row cap {parts[3].strip()!r} that is not a whole number", field="sections"
            ) from None
    return Section(
        heading=heading,
        query_id=query,
        display=shown,
        row_cap=row_cap,
        series=series,
        values=values,
    )


def parse_display_spec(text: str) -> tuple[Display, tuple[str, ...], str | None]:
    """`line of revenue, orders by category` -> (LINE, ("revenue", "orders"), "category").
    Column names are compared exactly with the query's; one holding " of ", " by " or a comma
    can only be named through the API."""
    found = _DISPLAY_SPEC.match(text.strip())
    word = found["display"] if found else text.strip()
    try:
        shown = Display(word)
    except ValueError:
        raise InvalidRequestError(
            f"has an unknown display {word!r} (choose from table, bar, line;"
            f" a chart may add its columns: {DISPLAY_SYNTAX})",
            field="sections",
        ) from None
    assert found is not None  # a display word has no spaces: the pattern matched
    values = tuple(v.strip() for v in (found["values"] or "").split(",") if found["values"])
    if any(not v for v in values):
        raise InvalidRequestError(
            f"has an empty value column in {text.strip()!r} ({DISPLAY_SYNTAX})", field="sections"
        )
    series = found["series"].strip() if found["series"] else None
    return shown, values, series


def display_spec(section: Section) -> str:
    """The DISPLAY part of a section's spec, as parse_display_spec reads it back."""
    text = section.display.value
    if section.values:
        text += " of " + ", ".join(section.values)
    if section.series is not None:
        text += f" by {section.series}"
    return text


def parse_fixed_spec(spec: str, sections: int) -> tuple[int, str, str]:
    """`N:NAME=VALUE`, a value fixed for section N's query (from 1): (index from 0, name,
    value)."""
    number, colon, rest = spec.partition(":")
    name, equals, value = rest.partition("=")
    if not (colon and equals and name.strip()) or not number.strip().isdigit():
        raise InvalidRequestError(f"expects N:NAME=VALUE, got {spec!r}", field="sections")
    index = int(number) - 1
    if not 0 <= index < sections:
        raise InvalidRequestError(
            f"names section {number.strip()}; there are sections 1 to {sections}",
            field="sections",
        )
    return index, name.strip(), value
