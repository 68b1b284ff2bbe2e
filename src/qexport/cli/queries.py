"""`qexport queries`: saved queries, checked by their source before they are saved."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Annotated

import typer
from rich.table import Table

from qexport import bootstrap
from qexport.cli.common import (
    State,
    client_of,
    fail,
    fail_input,
    local_deps,
    out,
    server_errors,
)
from qexport.cli.preview import queries_preview
from qexport.container import Container
from qexport.domain.audit import OPERATOR, Action, operator_for
from qexport.domain.failures import (
    InvalidRequestError,
    MetadataUnavailableError,
    QExportError,
    SourceUnavailableError,
    StatementRefusedError,
    TooManyRequestsError,
)
from qexport.domain.queries import (
    Parameter,
    Query,
    ResultColumn,
    Visibility,
    check_filename_template,
    parse_param_spec,
)
from qexport.services.describe import (
    Described,
    Saving,
    describe_statement,
    describe_timeout,
)
from qexport.services.queries import check_sql, query_event

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
    st, deps = local_deps(ctx)
    try:
        params = tuple(parse_param_spec(p) for p in param or [])
    except QExportError as exc:
        fail_input(str(exc))
    usable = deps.sources.names_for(st.requester.workspace_id)
    if source not in usable:
        fail_input(
            f"unknown source {source!r} for workspace {st.requester.workspace_id!r}"
            f" (usable: {', '.join(usable) or 'none'})"
        )
    if deps.catalog.find_query(st.requester.workspace_id, name) is not None:
        fail_input(
            f"a query named {name!r} already exists in workspace {st.requester.workspace_id!r}"
        )
    template = _filename_template(filename, params)
    described = _described(st, deps, source, sql, params, name=name)
    query = Query(
        id=str(uuid.uuid4()),
        workspace_id=st.requester.workspace_id,
        name=name,
        sql=sql,
        source=source,
        parameters=params,
        visibility=Visibility.MEMBERS if visible_to else Visibility.WORKSPACE,
        members=frozenset(visible_to or ()),
        owner=st.requester.user_id,
        columns=described.columns,
        filename_template=template,
        reads=described.reads,
    )
    deps.catalog.add_query(query, audit=query_event(OPERATOR, Action.QUERY_CREATED, query))
    out.print(f"saved query {name!r} ({query.id})")
    _print_columns(described.columns)


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
    st, deps = local_deps(ctx)
    current = deps.catalog.find_query(st.requester.workspace_id, name)
    if current is None:
        fail_input(f"no query named {name!r}")
    try:
        params = current.parameters if param is None else tuple(map(parse_param_spec, param))
    except QExportError as exc:
        fail_input(str(exc))
    source = current.source if source is None else source
    usable = deps.sources.names_for(st.requester.workspace_id)
    if source not in usable:
        fail_input(
            f"unknown source {source!r} for workspace {st.requester.workspace_id!r}"
            f" (usable: {', '.join(usable) or 'none'})"
        )
    sql = current.sql if sql is None else sql
    template = (
        _filename_template(filename, params)
        if filename is not None
        else current.filename_template and _filename_template(current.filename_template, params)
    )
    described = _described(st, deps, source, sql, params, name=name, query_id=current.id)
    updated = replace(
        current,
        sql=sql,
        source=source,
        parameters=params,
        columns=described.columns,
        filename_template=template,
        reads=described.reads,
    )
    changed = query_event(OPERATOR, Action.QUERY_CHANGED, updated, before=current)
    if not deps.catalog.update_query(updated, audit=changed):
        fail(f"no query named {name!r}")
    out.print(f"updated query {name!r} ({current.id})")
    _print_columns(described.columns)


def _filename_template(given: str | None, params: tuple[Parameter, ...]) -> str | None:
    """A checked file name template (None: the default); an unknown placeholder exits 2."""
    if given is None or not given.strip():
        return None
    try:
        return check_filename_template(given, [p.name for p in params])
    except InvalidRequestError as exc:
        fail_input(f"--filename: {exc.detail}")


def _print_columns(columns: tuple[ResultColumn, ...]) -> None:
    words = ", ".join(f"{c.name} {c.type}" for c in columns)
    out.print(f"columns: {words}", highlight=False)


def _described(
    st: State,
    deps: Container,
    source: str,
    sql: str,
    params: tuple[Parameter, ...],
    *,
    name: str,
    query_id: str | None = None,
) -> Described:
    """The columns the source describes and the tables it reads, with the requester's
    rights; a statement it refuses exits 2 with its message (recorded, and one of the
    requester's previews of the minute), an unreachable source 1, none of those previews
    left 1 before the source is asked (nothing is saved either way)."""
    try:
        check_sql(sql)
    except InvalidRequestError as exc:
        fail_input(exc.detail)
    # Forked from this process, which has opened no source (previews/processes.py).
    runner = bootstrap.preview_processes(deps.settings, start_method="fork")
    try:
        return describe_statement(
            deps.sources,
            runner,
            st.requester,
            source=source,
            sql=sql,
            parameters=params,
            timeout_seconds=describe_timeout(deps.settings.statement_timeout_seconds),
            ration=replace(deps.save_ration(), actor=operator_for(st.requester.user_id)),
            saving=Saving(name=name, query_id=query_id),
        )
    except StatementRefusedError as exc:
        fail_input(f"source {source!r} refuses the SQL: {exc.detail}")
    except InvalidRequestError as exc:
        fail_input(exc.detail)
    except SourceUnavailableError as exc:
        fail(exc.detail)
    except TooManyRequestsError as exc:
        fail(f"{exc.detail} (too_many_requests)")
    except MetadataUnavailableError as exc:
        fail(f"{exc.detail} ({exc.code.value})")
    finally:
        runner.close()


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
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Its name or id.")]
) -> None:
    """Delete a query (an editor or admin); its unsettled exports then fail with
    access_lost."""
    with client_of(ctx) as client, server_errors():
        deleted = client.delete_subject("query", name)
    out.print(f"deleted query {deleted['name']!r}", highlight=False, soft_wrap=True)


queries_app.command("preview")(queries_preview)
