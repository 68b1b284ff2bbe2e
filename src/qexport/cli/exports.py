"""`qexport exports ...`: request, watch, download and cancel exports, in the local database
or, with QEXPORT_URL and QEXPORT_TOKEN, on a server."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Annotated, Any, NoReturn

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from qexport.cli.client import ApiError, Client, one_named
from qexport.cli.common import (
    BAD_INPUT,
    client_of,
    err,
    fail_api,
    fail_input,
    out,
    parse_kv,
    resolve_export_id,
    server_errors,
    server_refusals,
)
from qexport.cli.deliveries import exports_deliveries
from qexport.cli.downloads import download
from qexport.cli.schedules import (
    EMAIL_HELP,
    SLACK_HELP,
    TEAMS_HELP,
    WEBHOOK_HELP,
    option_of,
    parse_notify,
)
from qexport.domain.exports import (
    CANCELLED,
    SETTLED_STATUSES,
    shown_status,
)
from qexport.domain.humanize import human_size

SHORT_ID_CHARS = 8  # what `exports list` shows of an id, at least
# Optional for click, so that leaving it out gets a sentence saying where ids are found.
ExportRef = Annotated[
    str | None,
    typer.Argument(
        metavar="ID",
        help="The export's id, or its start (at least 4 characters): `qexport exports list`"
        " shows them.",
        show_default=False,
    ),
]

exports_app = typer.Typer(
    no_args_is_help=True,
    help="Request, watch and download exports: in the local database, or on a server when"
    " QEXPORT_URL and QEXPORT_TOKEN (qexport --url URL --token TOKEN exports ...) are set.",
)


# A server is asked less often than the local database: other clients share it.
REMOTE_POLL_SECONDS = 0.5
LOCAL_POLL_SECONDS = 0.2
# How long `--wait` sees an export queued before it says that a worker must take it.
QUEUED_HINT_SECONDS = 5.0


def _shown(view: dict[str, Any]) -> str:
    """The status people read for an export the API shows: `cancelled` for one its requester
    cancelled (the API's failed/cancelled), as the pages show it."""
    return shown_status(view["status"], (view.get("failure") or {}).get("code"))


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
        value = _shown(view) if key == "status" else view[key]
        table.add_row(key, "" if value is None else str(value))
    table.add_row("subject", f"{view['subject']['type']} {view['subject']['name']}")
    table.add_row("progress", f"{view['progress']['rows']:,} rows")
    if view["failure"]:
        table.add_row("failure", f"{view['failure']['code']}: {view['failure']['detail']}")
    out.print(table)


@exports_app.command("create")
def exports_create(  # noqa: PLR0913 - one per command-line option
    ctx: typer.Context,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="csv, tsv, jsonl, parquet or xlsx; a report: pdf, xlsx or html."
        ),
    ],
    query: Annotated[
        str | None, typer.Option(help="Query name, id or the start of its id.")
    ] = None,
    report: Annotated[
        str | None,
        typer.Option(help="Report title, id or the start of its id, instead of --query."),
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
    kind = "query" if query is not None else "report"
    ref = query or report or ""
    notify = [r.to_json() for r in parse_notify(email, webhook, slack, teams)]
    with client_of(ctx) as client:
        try:
            view = client.request_export(
                kind, ref, fmt, parameters, neutralize_formulas=neutralize, notify=notify
            )
        except ApiError as exc:
            _refused(client, exc, kind, ref)
        if view.get("kind") == "approval":
            _print_awaiting(view, as_json=as_json)
            return
        if wait:
            with server_errors():
                view = _wait(client, view["id"], quiet=as_json)
    _print_created(view, wait=wait, as_json=as_json)


def _refused(client: Client, exc: ApiError, kind: str, ref: str) -> NoReturn:
    """A refused request, exit 2 (1 for a bad token, or a server down or failing): every
    mistake, one line each, a recipient's led by its option (`--webhook: ...`); an unknown
    query or report with the nearest name the caller can read (`Client.subject` says it), or
    where to start when they can read none."""
    if exc.status == 404:
        names = [name for _id, name in client.subjects(kind)]
        hint = _none_yet(kind, names, on_server=_on_server(client))
        fail_input(f"{exc.detail}{hint} ({exc.code})")
    code = 1 if exc.status in (0, 401) or exc.status >= 500 else BAD_INPUT
    fail_api(exc, code, _recipient_option)


def _on_server(client: Client) -> bool:
    from qexport.cli.remote import QExportClient

    return isinstance(client, QExportClient)


def _recipient_option(field: str | None) -> str:
    """`--webhook: ` before a refused recipient; nothing before any other mistake."""
    field = field or ""
    return f"{option_of(field)}: " if field.startswith("notify") else ""


def _none_yet(what: str, names: list[str], *, on_server: bool = False) -> str:
    """Where to start when there is nothing to export: a fresh data directory."""
    if names:
        return ""
    if on_server:
        plural = "reports" if what == "report" else "queries"
        return f"; there are no {plural} you can read on this server"
    if what == "report":
        return "; there are no reports you can read yet (qexport reports add, or qexport demo)"
    return (
        "; there are no queries you can read yet: add one with"
        " qexport queries add NAME --sql 'SELECT …' (or try qexport demo)"
    )


def _print_awaiting(view: dict[str, Any], *, as_json: bool) -> None:
    """A sensitive query's request: recorded, waiting for another admin (nothing to wait for)."""
    if as_json:
        _print_view(view, True)
        return
    out.print(
        f"export request {view['id']} awaits an admin's approval (until {view['expires_at']}):"
        " the workspace's policy marks this query sensitive; nothing runs until another"
        " admin approves it",
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        "another admin approves it with: qexport --user ADMIN_ID --workspace WORKSPACE"
        f" approvals approve {view['id']}",
        highlight=False,
        soft_wrap=True,
    )


def _print_created(view: dict[str, Any], *, wait: bool, as_json: bool) -> None:
    if as_json:
        _print_view(view, True)
    elif wait:
        _print_summary(view)
    else:
        out.print(f"export {view['id']} {view['status']}")
        out.print(f"follow it: qexport exports wait {short_id(view['id'])}", highlight=False)
    if wait and view["status"] == "failed":
        raise typer.Exit(1)


def _time_taken(view: dict[str, Any]) -> str:
    """` in 15 s, after 63 s in the queue`: the time it ran apart from the time it waited
    (a wait under a second is not worth a word); the whole time when it never started."""
    created, started = view.get("created_at"), view.get("started_at")
    completed = view.get("completed_at")
    ran = _seconds_between(started, completed)
    if ran is None:
        taken = _seconds_between(created, completed)
        return f" in {_duration(taken)}" if taken is not None else ""
    waited = _seconds_between(created, started)
    queued = f", after {_duration(waited)} in the queue" if waited and waited >= 1 else ""
    return f" in {_duration(ran)}{queued}"


def _print_summary(view: dict[str, Any]) -> None:
    """How a waited-for export ended, for people: rows, size and time taken, then what to
    do next; a failure with its code and reason."""
    short = short_id(view["id"])
    took = _time_taken(view)
    if view["status"] == "succeeded":
        rows = view["row_count"] or 0
        out.print(
            f"export {short} succeeded: {rows:,} rows, {human_size(view['size_bytes'])}{took}"
            f" ({view['filename']})",
            highlight=False,
            soft_wrap=True,
        )
        out.print(f"download it: qexport exports download {short}", highlight=False)
        return
    failure = view.get("failure") or {}
    if _shown(view) == CANCELLED:
        out.print(f"export {short} cancelled{took}", highlight=False)
        return
    if view["status"] == "failed":
        code = failure.get("code") or "failed"
        err.print(
            Text.assemble(
                ("error:", "bold red"),
                f" export {short} failed ({code}){took}: {failure.get('detail') or ''}".rstrip(),
            ),
            highlight=False,
            soft_wrap=True,
        )
        out.print(f"details: qexport exports get {short}", highlight=False)
        return
    out.print(f"export {short} {view['status']}", highlight=False)


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (_instant(end) - _instant(start)).total_seconds()


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _duration(seconds: float) -> str:
    """`0.4 s`, `12.3 s`, `4 min 05 s`, `1 h 02 min`."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@exports_app.command("get")
def exports_get(
    ctx: typer.Context,
    export_id: ExportRef = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export as JSON.")] = False,
) -> None:
    """Show one export: its status, file, rows, size and times."""
    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_errors():
        _print_view(client.get_export(export_id), as_json)


@exports_app.command("list")
def exports_list(  # noqa: PLR0913 - one per command-line option
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the page as JSON.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Exports to show.")] = 50,
    status: Annotated[
        str | None,
        typer.Option(help="queued, running, succeeded, failed, expired or cancelled."),
    ] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="Only this format.")] = None,
    subject: Annotated[
        str | None,
        typer.Option(help="Only exports of this query or report (name, id or its start)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Requested on or after: 2026-12-01 or an ISO time (UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Requested before: an ISO time, or a date (included).")
    ] = None,
    search: Annotated[
        str | None, typer.Option(help="Only subjects whose name contains this.")
    ] = None,
    cursor: Annotated[
        str | None, typer.Option(help="Continue where a previous list stopped.")
    ] = None,
    all_pages: Annotated[
        bool, typer.Option("--all", help="Every matching export, however many.")
    ] = False,
) -> None:
    """List your exports, newest first, a page at a time.

    A workspace admin sees the workspace's, locally as on a server. Ids are shortened to
    what tells them apart; the other commands accept them."""
    filters = {
        key: value
        for key, value in {"format": fmt, "since": since, "until": until, "q": search}.items()
        if value
    }
    with client_of(ctx) as client:
        if subject:
            filters["subject"] = _subject_id(client, subject)
        with server_refusals():
            try:
                page = client.list_exports(
                    limit=None if all_pages else limit,
                    status=status,
                    cursor=cursor,
                    filters=filters,
                )
            except ApiError as exc:
                fail_api(exc, BAD_INPUT if exc.status == 422 else 1, _flag_of)
    _print_list(page, as_json, filtered=bool(filters or status))


# The list's options, as its API parameters name them in errors.
_FLAGS = {"q": "--search", "format": "--format", "cursor": "--cursor", "subject": "--subject"}


def _flag_of(field: str | None) -> str:
    """`--search: ` before a mistake in the API's `q`, and so on."""
    if not field:
        return ""
    return f"{_FLAGS.get(field, '--' + field.replace('_', '-'))}: "


def _subject_id(client: Client, ref: str) -> str:
    """The id of the query or report `ref` names (by name, title, id or the start of an id)
    among those the caller can read; unknown ones are refused, with the nearest name."""
    known = client.subjects("query") + client.subjects("report")
    try:
        return one_named(known, "query or report", ref)
    except ApiError as exc:
        fail_input(f"--subject: {exc.detail}")


def short_ids(ids: list[str], minimum: int = SHORT_ID_CHARS) -> dict[str, str]:
    """Each id cut to the shortest start (at least `minimum` characters) that no other id of
    `ids` shares: what `exports get`, `wait`, `download` and `cancel` accept."""
    shortened: dict[str, str] = {}
    for export_id in ids:
        length = minimum
        while length < len(export_id) and any(
            other != export_id and other.startswith(export_id[:length]) for other in ids
        ):
            length += 1
        shortened[export_id] = export_id[:length]
    return shortened


def short_id(export_id: str) -> str:
    return export_id[:SHORT_ID_CHARS]


_SUBJECT_COLUMN = 2
_GAP = 2  # spaces between two columns
_MIN_SUBJECT = 8


def _print_list(page: dict[str, Any], as_json: bool, *, filtered: bool = False) -> None:
    if as_json:
        print(json.dumps(page, indent=2))
        return
    views = page["items"]
    short = short_ids([v["id"] for v in views])
    # One line per export at 80 columns: the subject's name gives way (cut with an ellipsis).
    rows = [
        (
            short[view["id"]],
            _shown(view),
            view["subject"]["name"],
            view["format"],
            f"{view['row_count']:,}" if view["row_count"] is not None else "",
            human_size(view["size_bytes"]),
            f"{_instant(view['created_at']):%Y-%m-%d %H:%M}",
        )
        for view in views
    ]
    headers = ("id", "status", "subject", "format", "rows", "size", "requested (UTC)")
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    others = sum(w for i, w in enumerate(widths) if i != _SUBJECT_COLUMN)
    room = max(out.width - others - _GAP * (len(headers) - 1), _MIN_SUBJECT)
    table = Table(box=None, pad_edge=False, padding=(0, _GAP // 2), header_style="bold")
    for index, header in enumerate(headers):
        subject = index == _SUBJECT_COLUMN
        table.add_column(
            header,
            no_wrap=True,
            overflow="ellipsis" if subject else "fold",
            max_width=room if subject else None,
            justify="right" if header in ("rows", "size") else "left",
        )
    for row in rows:
        table.add_row(*row)
    if views:
        out.print(table)
    elif filtered:
        out.print("no exports match these filters")
    else:
        out.print(
            "no exports yet; request one: qexport exports create --query NAME --format csv",
            highlight=False,
        )
    if page.get("next_cursor"):
        err.print(
            f"more: qexport exports list --cursor {page['next_cursor']} (or --all)",
            highlight=False,
            soft_wrap=True,
        )


def _wait(client: Client, export_id: str, *, quiet: bool = False) -> dict[str, Any]:
    """Ask for the export (as the API shows it) until it settles, showing the rows written,
    the time elapsed and the rate on stderr as it goes."""
    interval = REMOTE_POLL_SECONDS if _on_server(client) else LOCAL_POLL_SECONDS
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[rows]:>12,} rows"),
        TextColumn("{task.fields[rate]:>14}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=True,
    ) as progress:
        short = short_id(export_id)
        task = progress.add_task(short, total=None, rows=0, rate="")
        rate = _Rate()
        hint_at = time.monotonic() + QUEUED_HINT_SECONDS
        while True:
            view = client.get_export(export_id)
            if view["status"] == "queued" and hint_at and time.monotonic() >= hint_at:
                hint_at = 0.0
                if not quiet:
                    progress.console.print(
                        f"export {short} is still queued: it starts when a worker takes it"
                        " (is one running? qexport worker)",
                        highlight=False,
                        soft_wrap=True,
                    )
            rows = view["progress"]["rows"] or 0
            progress.update(
                task,
                rows=rows,
                rate=rate.words(rows) if view["status"] == "running" else "",
                description=f"{short} {_shown(view)}",
            )
            if view["status"] in SETTLED_STATUSES:
                return view
            time.sleep(interval)


class _Rate:
    """Rows per second since the export was first seen writing rows."""

    def __init__(self) -> None:
        self._start: tuple[float, int] | None = None

    def words(self, rows: int) -> str:
        now = time.monotonic()
        if self._start is None:
            if rows:
                self._start = (now, rows)
            return ""
        began, first = self._start
        if now - began < 0.5 or rows <= first:
            return ""
        return f"{(rows - first) / (now - began):,.0f} rows/s"


@exports_app.command("wait")
def exports_wait(
    ctx: typer.Context,
    export_id: ExportRef = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export as JSON.")] = False,
) -> None:
    """Wait until an export settles, showing its progress.

    Then its rows, size and time taken, or why it failed (exit 1)."""
    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_errors():
        view = _wait(client, export_id, quiet=as_json)
    if as_json:
        _print_view(view, True)
    else:
        _print_summary(view)
    if view["status"] == "failed":
        raise typer.Exit(1)


@exports_app.command("download")
def exports_download(
    ctx: typer.Context,
    export_id: ExportRef = None,
    output: Annotated[
        str | None,
        typer.Option(
            "-o",
            "--output",
            metavar="<path>",
            help="A file, or a directory to write the export's file name into ('-': stdout)."
            " Default: the export's file name in the current directory.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a file that is already there.")
    ] = False,
    url: Annotated[
        bool, typer.Option("--url", help="Print a short-lived download link instead (S3).")
    ] = False,
) -> None:
    """Download an export's file, by default to its file name here.

    Refused once it has expired; from a server, the file is checked against the export's
    sha256. An existing file is never replaced without --force. A local download is recorded
    in the audit trail (file.downloaded, by the operator for --user) before any byte."""
    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_errors():
        download(client, export_id, output, link=url, force=force)


@exports_app.command("cancel")
def exports_cancel(ctx: typer.Context, export_id: ExportRef = None) -> None:
    """Cancel a queued or running export."""
    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_errors():
        view = client.cancel_export(export_id)
    out.print(f"export {view['id']} cancelled")


exports_app.command("deliveries")(exports_deliveries)
