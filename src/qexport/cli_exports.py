"""`qexport exports ...`: request, watch, download and cancel exports, in the local database
or, with QEXPORT_URL and QEXPORT_TOKEN, on a server."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from qexport.cli_common import (
    err,
    fail,
    fail_input,
    local_deps,
    out,
    parse_kv,
    remote,
    server_errors,
)
from qexport.cli_schedules import (
    EMAIL_HELP,
    SLACK_HELP,
    TEAMS_HELP,
    WEBHOOK_HELP,
    local_notify,
    parse_notify,
)
from qexport.container import Container
from qexport.domain.exports import EXPIRED, ExportRecord, Requester
from qexport.domain.failures import QExportError
from qexport.humanize import human_size
from qexport.ports import Presigner
from qexport.services.exports import (
    cancel_export,
    downloadable,
    get_visible_export,
    open_download,
)
from qexport.services.requests import request_export, request_report_export
from qexport.services.views import export_view

if TYPE_CHECKING:
    from qexport.client import QExportClient

exports_app = typer.Typer(
    no_args_is_help=True,
    help="Request, watch and download exports: in the local database, or on a server when"
    " QEXPORT_URL and QEXPORT_TOKEN (qexport --url URL --token TOKEN exports ...) are set.",
)


SETTLED_VIEWS = frozenset({"succeeded", "failed", EXPIRED})
# A server is asked less often than the local database: other clients share it.
REMOTE_POLL_SECONDS = 0.5


def _print_export(record: ExportRecord, deps: Container, as_json: bool) -> None:
    _print_view(export_view(record, deps.clock.now()), as_json)


def _print_view(view: dict[str, Any], as_json: bool) -> None:
    """An export as the API shows it (DESIGN section 5): as JSON, or as a two-column table."""
    if as_json:
        print(json.dumps(view, indent=2))
        return
    table = Table(show_header=False, box=None)
    for key in (
        "id",
        "status",
        "format",
        "filename",
        "row_count",
        "size_bytes",
        "sha256",
        "attempts",
        "created_at",
        "completed_at",
        "expires_at",
    ):
        table.add_row(key, "" if view[key] is None else str(view[key]))
    table.add_row("subject", f"{view['subject']['type']} {view['subject']['name']}")
    table.add_row("progress", f"{view['progress']['rows']:,} rows")
    if view["failure"]:
        table.add_row("failure", f"{view['failure']['code']}: {view['failure']['detail']}")
    out.print(table)


@exports_app.command("create")
def exports_create(
    ctx: typer.Context,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="csv, tsv, jsonl, parquet or xlsx; a report: pdf, xlsx or html."
        ),
    ],
    query: Annotated[str | None, typer.Option(help="Query name or id.")] = None,
    report: Annotated[
        str | None, typer.Option(help="Report title or id, instead of --query (local only).")
    ] = None,
    param: Annotated[list[str] | None, typer.Option(help="NAME=VALUE, repeatable.")] = None,
    neutralize: Annotated[
        bool, typer.Option(help="Neutralise formula-looking strings in csv/tsv/xlsx.")
    ] = True,
    wait: Annotated[
        bool, typer.Option(help="Wait until the export settles (a worker must be running).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export as JSON.")] = False,
    email: Annotated[list[str] | None, typer.Option(help=EMAIL_HELP)] = None,
    webhook: Annotated[list[str] | None, typer.Option(help=WEBHOOK_HELP)] = None,
    slack: Annotated[list[str] | None, typer.Option(help=SLACK_HELP)] = None,
    teams: Annotated[list[str] | None, typer.Option(help=TEAMS_HELP)] = None,
) -> None:
    """Request an export; bad input is refused and nothing is recorded."""
    parameters = parse_kv(param or [])
    if (query is None) == (report is None):
        fail_input("give exactly one of --query and --report")
    notify = parse_notify(email, webhook, slack, teams)
    client = remote(ctx)
    if client is not None:
        with client:
            with server_errors(client_error_code=2):
                if report is not None:
                    view = client.create_export(
                        client.resolve_report(report),
                        fmt,
                        parameters,
                        subject="report",
                        notify=[r.to_json() for r in notify],
                    )
                else:
                    assert query is not None
                    view = client.create_export(
                        client.resolve_query(query),
                        fmt,
                        parameters,
                        neutralize_formulas=neutralize,
                        notify=[r.to_json() for r in notify],
                    )
            if wait:
                export_id = view["id"]
                with server_errors():
                    view = _wait(
                        lambda: client.get_export(export_id),
                        export_id,
                        quiet=as_json,
                        interval=REMOTE_POLL_SECONDS,
                    )
        _print_created(view, wait=wait, as_json=as_json)
        return
    st, deps = local_deps(ctx)
    if notify:
        notify = local_notify(ctx, email, webhook, slack, teams)
    try:
        if report is not None:
            record = request_report_export(
                deps.exports,
                deps.catalog,
                deps.clock,
                st.requester,
                report_ref=report,
                fmt=fmt,
                parameters=dict(parameters),
                neutralize_formulas=neutralize,
                match_title=True,
                notify=notify,
            )
        else:
            assert query is not None
            record = request_export(
                deps.exports,
                deps.catalog,
                deps.clock,
                st.requester,
                query_ref=query,
                fmt=fmt,
                parameters=parameters,
                neutralize_formulas=neutralize,
                notify=notify,
            )
    except QExportError as exc:
        fail_input(str(exc))
    view = export_view(record, deps.clock.now())
    if wait:
        view = _wait(_local_view(deps, st.requester, record.id), record.id, quiet=as_json)
    _print_created(view, wait=wait, as_json=as_json)


def _print_created(view: dict[str, Any], *, wait: bool, as_json: bool) -> None:
    if as_json:
        _print_view(view, True)
    else:
        out.print(f"export {view['id']} {view['status']}")
    if wait and view["status"] == "failed":
        raise typer.Exit(1)


@exports_app.command("get")
def exports_get(
    ctx: typer.Context, export_id: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show one export."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            _print_view(client.get_export(export_id), as_json)
        return
    st, deps = local_deps(ctx)
    try:
        record = get_visible_export(deps.exports, st.requester, export_id)
    except QExportError as exc:
        fail(str(exc))
    _print_export(record, deps, as_json)


@exports_app.command("list")
def exports_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
) -> None:
    """List your exports, newest first (on a server, an admin sees the workspace's)."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            page = client.list_exports(limit=limit)
        _print_list(page, as_json)
        return
    st, deps = local_deps(ctx)
    records = deps.exports.list_exports(
        workspace_id=st.requester.workspace_id, requested_by=st.requester.user_id, limit=limit
    )
    now = deps.clock.now()
    _print_list({"items": [export_view(r, now) for r in records], "next_cursor": None}, as_json)


def _print_list(page: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(page, indent=2))
        return
    table = Table("id", "status", "query", "format", "rows", "size", "created")
    for view in page["items"]:
        created = datetime.fromisoformat(view["created_at"].replace("Z", "+00:00"))
        table.add_row(
            view["id"],
            view["status"],
            view["subject"]["name"],
            view["format"],
            f"{view['row_count']:,}" if view["row_count"] is not None else "",
            human_size(view["size_bytes"]),
            f"{created:%Y-%m-%d %H:%M:%S}",
        )
    out.print(table)


def _local_view(
    deps: Container, requester: Requester, export_id: str
) -> Callable[[], dict[str, Any]]:
    return lambda: export_view(
        get_visible_export(deps.exports, requester, export_id), deps.clock.now()
    )


def _wait(
    fetch: Callable[[], dict[str, Any]],
    export_id: str,
    *,
    quiet: bool = False,
    interval: float = 0.2,
) -> dict[str, Any]:
    """Poll `fetch` (the export as the API shows it) with a progress bar until it settles."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[rows]:>12,} rows"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=True,
    ) as progress:
        task = progress.add_task(export_id[:8], total=None, rows=0)
        while True:
            view = fetch()
            progress.update(
                task,
                rows=view["progress"]["rows"],
                description=f"{export_id[:8]} {view['status']}",
            )
            if view["status"] in SETTLED_VIEWS:
                return view
            time.sleep(interval)


@exports_app.command("wait")
def exports_wait(
    ctx: typer.Context, export_id: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Wait until the export settles; exit 1 if it failed."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            view = _wait(
                lambda: client.get_export(export_id),
                export_id,
                quiet=as_json,
                interval=REMOTE_POLL_SECONDS,
            )
    else:
        st, deps = local_deps(ctx)
        try:
            view = _wait(_local_view(deps, st.requester, export_id), export_id, quiet=as_json)
        except QExportError as exc:
            fail(str(exc))
    _print_view(view, as_json)
    if view["status"] == "failed":
        raise typer.Exit(1)


def _print_download_link(deps: Container, requester: Requester, export_id: str) -> None:
    objects = deps.objects
    if not isinstance(objects, Presigner):
        fail_input("download links need S3 storage; use --output with the filesystem store")
    try:
        record = downloadable(deps.exports, deps.catalog, deps.clock, requester, export_id)
        assert record.expires_at is not None
        left = (record.expires_at - deps.clock.now()).total_seconds()
        # Never valid past the export's own expiry: the link dies with the file.
        valid = max(1, min(objects.presign_seconds, int(left)))
        link = objects.presigned_url(record.storage_key, record.filename, max_seconds=valid)
    except QExportError as exc:
        fail(str(exc))
    out.print(link, highlight=False, soft_wrap=True)
    err.print(f"valid for {valid} s ({human_size(record.size_bytes)})")


@exports_app.command("download")
def exports_download(
    ctx: typer.Context,
    export_id: str,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Where to write the file ('-' for stdout)."),
    ] = None,
    url: Annotated[
        bool, typer.Option("--url", help="Print a short-lived download link instead (S3).")
    ] = False,
) -> None:
    """Download the file of a succeeded export (refused once it has expired); from a server,
    the file is checked against the export's sha256."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            _remote_download(client, export_id, output, link=url)
        return
    st, deps = local_deps(ctx)
    if url:
        _print_download_link(deps, st.requester, export_id)
        return
    if output is None:
        fail_input("give --output PATH (or '-' for stdout), or --url for a download link")
    try:
        record, stream = open_download(
            deps.exports, deps.catalog, deps.objects, deps.clock, st.requester, export_id
        )
    except QExportError as exc:
        fail(str(exc))
    with stream:
        if str(output) == "-":
            shutil.copyfileobj(stream, sys.stdout.buffer)
            return
        with _replacing(output) as fh:
            shutil.copyfileobj(stream, fh, 1024 * 1024)
    err.print(
        f"wrote {output} ({human_size(record.size_bytes)}, sha256 {record.sha256})", soft_wrap=True
    )


@contextlib.contextmanager
def _replacing(output: Path) -> Iterator[BinaryIO]:
    """Write next to `output`, then rename over it: a failed download leaves nothing behind."""
    tmp = output.with_name(f".{output.name}.part")
    try:
        with tmp.open("wb") as fh:
            yield fh
        tmp.replace(output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _remote_download(
    client: QExportClient, export_id: str, output: Path | None, *, link: bool
) -> None:
    if link:
        location = client.file_location(export_id)
        if location is None:
            fail_input("this server serves files itself: use --output PATH")
        out.print(location, highlight=False, soft_wrap=True)
        return
    if output is None:
        fail_input("give --output PATH (or '-' for stdout), or --url for a download link")
    if str(output) == "-":
        client.download(export_id, sys.stdout.buffer)
        return
    with _replacing(output) as fh:
        view = client.download(export_id, fh)
    err.print(
        f"wrote {output} ({human_size(view['size_bytes'])}, sha256 {view['sha256']})",
        soft_wrap=True,
    )


@exports_app.command("cancel")
def exports_cancel(ctx: typer.Context, export_id: str) -> None:
    """Cancel a queued or running export."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            view = client.cancel_export(export_id)
        out.print(f"export {view['id']} cancelled")
        return
    st, deps = local_deps(ctx)
    try:
        record = cancel_export(deps.exports, deps.clock, st.requester, export_id)
    except QExportError as exc:
        fail(str(exc))
    out.print(f"export {record.id} cancelled")
