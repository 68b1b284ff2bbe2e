"""`qexport reports add|list`: reports in the local metadata database.

A section is given as `--section 'HEADING|QUERY|DISPLAY[|ROW_CAP]'` (QUERY: a query's name
or id; DISPLAY: table, bar or line, and for a chart optionally `of VALUE[, VALUE...]` and
`by SERIES`: `line of revenue by category`), in document order. A value the report fixes for a
section's query is `--param 'N:NAME=VALUE'`, N counting sections from 1; parameters not fixed
are given when an export is requested. Bad input exits 2 with one line on stderr.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.table import Table

from qexport.cli.client import ApiError, subject_named
from qexport.cli.common import (
    BAD_INPUT,
    client_of,
    fail_api,
    fail_input,
    out,
    server_errors,
    server_refusals,
)
from qexport.domain.commands import ReportDraft
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import Visibility
from qexport.domain.reports import (
    Section,
    display_spec,
    parse_fixed_spec,
    parse_section_spec,
)

reports_app = typer.Typer(
    no_args_is_help=True, help="Reports: titled documents of several queries' results."
)

SECTION_HELP = (
    "HEADING|QUERY|DISPLAY[|ROW_CAP], in order; DISPLAY: table, bar or line, a chart"
    " optionally with its columns: 'line of revenue, orders by category'."
)
PARAM_HELP = "N:NAME=VALUE: a value fixed for section N's query (sections count from 1)."
_SECTION_FIELD = re.compile(r"^sections\.(\d+)(.*)$")


def _parse_section(spec: str) -> Section:
    try:
        return parse_section_spec(spec)
    except InvalidRequestError as exc:
        fail_input(f"--section {exc}")


def _parse_fixed(specs: list[str], count: int) -> dict[int, dict[str, str]]:
    """`N:NAME=VALUE` pairs by section index (from 0)."""
    fixed: dict[int, dict[str, str]] = {}
    for spec in specs:
        try:
            index, name, value = parse_fixed_spec(spec, count)
        except InvalidRequestError as exc:
            fail_input(f"--param {exc}")
        fixed.setdefault(index, {})[name] = value
    return fixed


def _query_id(queries: list[dict[str, Any]], number: int, ref: str) -> str:
    """The id of the query section `number` names (by its name, its id or the start of its
    id), among those the caller can read; exit 2 otherwise, with the nearest names."""
    try:
        return str(subject_named(queries, "query", ref)["id"])
    except ApiError as exc:
        fail_input(f"section {number}: {exc.detail}")


def _human_field(field: str | None) -> str:
    """`sections.0.parameters.since` -> `section 1 parameters.since`, as the user counts."""
    if not field:
        return ""
    found = _SECTION_FIELD.match(field)
    if found is None:
        return f"{field}: "
    return f"section {int(found[1]) + 1}{found[2].replace('.', ' ', 1)}: "


@reports_app.command("add")
def reports_add(
    ctx: typer.Context,
    title: str,
    section: Annotated[list[str], typer.Option(help=SECTION_HELP)],
    description: Annotated[str, typer.Option(help="Shown under the title.")] = "",
    param: Annotated[list[str] | None, typer.Option(help=PARAM_HELP)] = None,
    visible_to: Annotated[
        list[str] | None,
        typer.Option(help="Restrict to these users (default: the whole workspace)."),
    ] = None,
) -> None:
    """Save a report, e.g. `qexport reports add Sales --section 'Orders|orders|table'
    --section 'Big ones|orders|bar|20' --param 2:since=2024-01-15`."""
    parsed = [_parse_section(spec) for spec in section]
    fixed = _parse_fixed(param or [], len(parsed))
    members = frozenset(visible_to or ())
    with client_of(ctx) as client:
        with server_errors():
            queries = client.list_subjects("query")
        sections = [
            replace(s, query_id=_query_id(queries, number, s.query_id), parameters=fixed.get(i, {}))
            for i, (number, s) in enumerate(enumerate(parsed, start=1))
        ]
        draft = ReportDraft(
            title=title,
            description=description,
            sections=tuple(sections),
            visibility=Visibility.MEMBERS if members else Visibility.WORKSPACE,
            members=members,
        )
        try:
            report = client.save_report(draft)
        except ApiError as exc:
            bad_input = exc.status in (400, 404, 413, 422)
            fail_api(exc, BAD_INPUT if bad_input else 1, _human_field)
    out.print(f"saved report {title!r} ({report['id']})")


@reports_app.command("list")
def reports_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List the workspace's reports that you can read (locally, or on a server with
    QEXPORT_URL and QEXPORT_TOKEN)."""
    with client_of(ctx) as client, server_errors():
        found = client.list_subjects("report")
    if as_json:
        print(json.dumps(found, indent=2))
        return
    table = Table("title", "sections", "visibility", "id")
    for report in found:
        sections = [Section.from_json(s) for s in report["sections"]]
        headings = ", ".join(f"{s.heading} ({display_spec(s)})" for s in sections)
        table.add_row(report["title"], headings, report["visibility"], report["id"])
    out.print(table)


@reports_app.command("delete")
def reports_delete(
    ctx: typer.Context,
    report: Annotated[str, typer.Argument(help="Its title, its id or the start of its id.")],
) -> None:
    """Delete a report (an editor or admin); its unsettled exports then fail with
    access_lost."""
    with client_of(ctx) as client, server_refusals():
        found = client.delete_subject("report", report)
    out.print(f"deleted report {found['title']!r} ({found['id']})", highlight=False, soft_wrap=True)
