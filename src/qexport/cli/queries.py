"""`qexport queries`: saved queries, checked by their source before they are saved."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.table import Table

from qexport import bootstrap
from qexport.cli.client import ApiError
from qexport.cli.common import (
    BAD_INPUT,
    client_of,
    fail_api,
    fail_input,
    out,
    server_errors,
    server_refusals,
)
from qexport.cli.preview import queries_preview
from qexport.domain.commands import QueryDraft
from qexport.domain.failures import QExportError
from qexport.domain.queries import Parameter, Visibility, parse_param_spec

queries_app = typer.Typer(no_args_is_help=True, help="Saved queries.")


@queries_app.command("add")
def queries_add(
    ctx: typer.Context,
    name: str,
    sql: Annotated[str, typer.Option(help="The SELECT statement; parameters as $name.")],
    source: Annotated[str, typer.Option(help="Data source name.")] = bootstrap.DEMO_SOURCE,
    param: Annotated[
        list[str] | None,
        typer.Option(help="NAME:TYPE[=DEFAULT]; types: string, integer, number, date, boolean."),
    ] = None,
    visible_to: Annotated[
        list[str] | None,
        typer.Option(help="Restrict to these users (default: the whole workspace)."),
    ] = None,
    filename: Annotated[
        str | None,
        typer.Option(
            "--filename",
            help="File name template of its exports: {name}, {date}, {time}, {format} and"
            " parameters such as {since} (default {name}_{date}).",
        ),
    ] = None,
) -> None:
    """Save a query; its source checks the SQL first, and nothing is saved if it refuses."""
    params = _params(param or [])
    members = frozenset(visible_to or ())
    draft = QueryDraft(
        name=name,
        sql=sql,
        source=source,
        parameters=params,
        visibility=Visibility.MEMBERS if members else Visibility.WORKSPACE,
        members=members,
        filename_template=filename,
    )
    with client_of(ctx) as client, _refused_save():
        saved = client.save_query(draft)
    out.print(f"saved query {name!r} ({saved['id']})")
    _print_columns(saved["columns"])


@queries_app.command("update")
def queries_update(
    ctx: typer.Context,
    name: str,
    sql: Annotated[
        str | None, typer.Option(help="A new SELECT statement; parameters as $name.")
    ] = None,
    source: Annotated[str | None, typer.Option(help="A new data source name.")] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(help="NAME:TYPE[=DEFAULT], replacing every parameter when given."),
    ] = None,
    filename: Annotated[
        str | None,
        typer.Option(
            "--filename",
            help="File name template of its exports: {name}, {date}, {time}, {format} and"
            " parameters such as {since} ('' for the default, {name}_{date}).",
        ),
    ] = None,
) -> None:
    """Change a query's SQL, source or parameters; its source checks the result first."""
    params = None if param is None else _params(param)
    with client_of(ctx) as client, _refused_save():
        current = client.subject("query", name)
        draft = QueryDraft(
            name=current["name"],
            sql=current["sql"] if sql is None else sql,
            source=current["source"] if source is None else source,
            parameters=(
                tuple(Parameter.from_json(p) for p in current["parameters"])
                if params is None
                else params
            ),
            visibility=Visibility(current["visibility"]),
            members=frozenset(current["members"]),
            filename_template=current["filename_template"] if filename is None else filename,
        )
        saved = client.save_query(draft, current["id"])
    out.print(f"updated query {name!r} ({saved['id']})")
    _print_columns(saved["columns"])


def _params(specs: list[str]) -> tuple[Parameter, ...]:
    """The parameters `--param NAME:TYPE[=DEFAULT]` declare; a bad one exits 2."""
    try:
        return tuple(parse_param_spec(p) for p in specs)
    except QExportError as exc:
        fail_input(f"--param {exc}")


@contextlib.contextmanager
def _refused_save() -> Iterator[None]:
    """A refused save as the server says it, each mistake led by the option that gave it
    (exit 2); a source that cannot be reached, too many checks this minute or a refusal
    that is not about the values given, one line (exit 1)."""
    try:
        yield
    except ApiError as exc:
        bad_input = exc.status in (400, 404, 413, 422)
        fail_api(exc, BAD_INPUT if bad_input else 1, _option_of)


# The option of `queries add|update` that gave each field of a query (the name: the argument).
_OPTIONS = {
    "sql": "--sql",
    "source": "--source",
    "parameters": "--param",
    "visibility": "--visible-to",
    "members": "--visible-to",
    "filename_template": "--filename",
}


def _option_of(field: str | None) -> str:
    option = _OPTIONS.get((field or "").split(".")[0])
    return f"{option}: " if option else ""


def _print_columns(columns: list[dict[str, str]] | None) -> None:
    words = ", ".join(f"{c['name']} {c['type']}" for c in columns or ())
    out.print(f"columns: {words}", highlight=False)


@queries_app.command("list")
def queries_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List the workspace's queries that you can read (locally, or on a server with
    QEXPORT_URL and QEXPORT_TOKEN)."""
    with client_of(ctx) as client, server_errors():
        found = client.list_subjects("query")
    if as_json:
        print(json.dumps(found, indent=2))
        return
    table = Table("name", "source", "parameters", "visibility", "id")
    for q in found:
        params = ", ".join(
            f"{p['name']}:{p['type']}" + ("" if p["required"] else f"={p['default']}")
            for p in q["parameters"]
        )
        table.add_row(q["name"], q["source"], params, q["visibility"], q["id"])
    out.print(table)


@queries_app.command("delete")
def queries_delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Its name, its id or the start of its id.")],
) -> None:
    """Delete a query (an editor or admin); its unsettled exports then fail with
    access_lost."""
    with client_of(ctx) as client, server_refusals():
        deleted = client.delete_subject("query", name)
    out.print(f"deleted query {deleted['name']!r}", highlight=False, soft_wrap=True)


queries_app.command("preview")(queries_preview)
