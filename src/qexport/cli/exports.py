"""`qexport exports ...`: request, watch, download and cancel exports, in the local database
or, with QEXPORT_URL and QEXPORT_TOKEN, on a server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, NoReturn

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from qexport.cli.common import (
    did_you_mean,
    err,
    fail,
    fail_input,
    fail_problems,
    local_deps,
    out,
    parse_kv,
    remote,
    resolve_export_id,
    server_errors,
    server_refusals,
)
from qexport.cli.deliveries import exports_deliveries
from qexport.cli.schedules import (
    EMAIL_HELP,
    SLACK_HELP,
    TEAMS_HELP,
    WEBHOOK_HELP,
    option_of,
    parse_notify,
    recipients_json,
)
from qexport.container import Container
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.audit import operator_for
from qexport.domain.commands import RequestExport, SubjectKind, SubjectRef
from qexport.domain.cursors import decode_page_cursor, encode_page_cursor
from qexport.domain.exports import (
    CANCELLED,
    SETTLED_STATUSES,
    ExportRecord,
    Requester,
    safe_filename,
    shown_status,
)
from qexport.domain.failures import (
    InvalidRequestError,
    NotFoundError,
    Problems,
    QExportError,
)
from qexport.domain.humanize import human_size
from qexport.domain.queries import can_read
from qexport.domain.reports import can_read_report
from qexport.ports import Presigner
from qexport.services.accounts import local_principal
from qexport.services.exports import (
    ExportListing,
    cancel_export,
    downloadable,
    get_visible_export,
    hand_over_file,
    hand_over_link,
    list_export_page,
    parse_listing,
)
from qexport.services.requests import request
from qexport.services.views import approval_view, export_view

if TYPE_CHECKING:
    from qexport.cli.client import QExportClient

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
# How long `--wait` sees an export queued before it says that a worker must take it.
QUEUED_HINT_SECONDS = 5.0


def _print_export(record: ExportRecord, deps: Container, as_json: bool) -> None:
    _print_view(export_view(record, deps.clock.now()), as_json)


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
        str | None, typer.Option(help="Report title or id, instead of --query.")
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
                view = _remote_create(
                    client,
                    query,
                    report,
                    fmt,
                    parameters,
                    neutralize,
                    [r.to_json() for r in notify],
                )
            if view.get("kind") == "approval":
                _print_awaiting(view, as_json=as_json)
                return
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
    kind: SubjectKind = "query" if query is not None else "report"
    command = RequestExport(
        SubjectRef(kind, query or report or "", by_name=True),
        fmt,
        parameters,
        neutralize,
        tuple(recipients_json(email, webhook, slack, teams)),
    )
    try:
        record = request(deps, local_principal(deps.accounts, st.requester), command)
    except NotFoundError as exc:
        fail_input(str(exc) + _local_suggestion(deps, st.requester, query, report))
    except QExportError as exc:
        _refused(exc)
    if isinstance(record, ApprovalRequest):
        now = deps.clock.now()
        _print_awaiting(approval_view(record, now), as_json=as_json)
        return
    view = export_view(record, deps.clock.now())
    if wait:
        view = _wait(_local_view(deps, st.requester, record.id), record.id, quiet=as_json)
    _print_created(view, wait=wait, as_json=as_json)


def _refused(exc: QExportError) -> NoReturn:
    """A local refusal, exit 2: every mistake, one line each, a recipient's led by its
    option (`--webhook: ...`)."""
    if isinstance(exc, InvalidRequestError):
        fail_problems(exc, _recipient_option)
    fail_input(str(exc))


def _recipient_option(problem: InvalidRequestError) -> str:
    """`--webhook: ` before a refused recipient; nothing before any other mistake."""
    field = problem.field or ""
    return f"{option_of(field)}: " if field.startswith("notify") else ""


def _local_suggestion(
    deps: Container, requester: Requester, query: str | None, report: str | None
) -> str:
    """A close name among the queries (or reports) the requester may read."""
    principal_reports = [
        r.title
        for r in deps.catalog.list_reports(requester.workspace_id)
        if can_read_report(requester, r)
    ]
    if report is not None:
        return did_you_mean(report, principal_reports) or _none_yet("report", principal_reports)
    names = [
        q.name for q in deps.catalog.list_queries(requester.workspace_id) if can_read(requester, q)
    ]
    return did_you_mean(query or "", names) or _none_yet("query", names)


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


def _remote_create(
    client: QExportClient,
    query: str | None,
    report: str | None,
    fmt: str,
    parameters: dict[str, str],
    neutralize: bool,
    notify: list[dict[str, str]],
) -> dict[str, Any]:
    """Request the export on the server, by name or id; an unknown name gets suggestions."""
    from qexport.cli.client import ApiError

    ref = report if report is not None else query
    assert ref is not None
    path, label = ("/reports", "title") if report is not None else ("/queries", "name")
    subject_id, names = client.lookup(path, label, ref)
    try:
        if report is not None:
            return client.create_export(
                subject_id, fmt, parameters, subject="report", notify=notify
            )
        return client.create_export(
            subject_id, fmt, parameters, neutralize_formulas=neutralize, notify=notify
        )
    except ApiError as exc:
        if exc.status == 404 and subject_id == ref:  # no such name: perhaps a typo
            what = "report" if report is not None else "query"
            hint = did_you_mean(ref, names) or _none_yet(what, names, on_server=True)
            fail_input(f"{exc.detail}{hint} ({exc.code})")
        raise


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


def _print_summary(view: dict[str, Any]) -> None:
    """How a waited-for export ended, for people: rows, size and time taken, then what to
    do next; a failure with its code and reason."""
    short = short_id(view["id"])
    taken = _seconds_between(view.get("created_at"), view.get("completed_at"))
    took = f" in {_duration(taken)}" if taken is not None else ""
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
    as_json: Annotated[bool, typer.Option("--json", help="Print the page as JSON.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Exports to show.")] = 50,
    status: Annotated[
        str | None,
        typer.Option(help="queued, running, succeeded, failed, expired or cancelled."),
    ] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="Only this format.")] = None,
    subject: Annotated[
        str | None, typer.Option(help="Only exports of this query (name or id) or report.")
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

    On a server, an admin sees the workspace's. Ids are shortened to what tells them apart;
    the other commands accept them."""
    client = remote(ctx)
    if client is not None:
        filters = {
            key: value
            for key, value in {
                "format": fmt,
                "since": since,
                "until": until,
                "q": search,
            }.items()
            if value
        }
        with client, server_refusals():
            if subject:
                filters["subject"] = _remote_subject(client, subject)
            page = client.list_exports(
                limit=None if all_pages else limit, status=status, cursor=cursor, filters=filters
            )
        _print_list(page, as_json, filtered=bool(filters or status))
        return
    st, deps = local_deps(ctx)
    problems = Problems()
    listing, at = ExportListing(), None
    with problems.check():
        listing = parse_listing(
            status=status,
            fmt=fmt,
            subject=_local_subject(deps, st.requester, subject) if subject else None,
            since=since,
            until=until,
            search=search,
        )
    with problems.check():
        at = decode_page_cursor(cursor) if cursor else None
    try:
        problems.raise_any()
    except InvalidRequestError as exc:
        fail_input(_flag_words(exc))
    items: list[dict[str, Any]] = []
    now = deps.clock.now()
    before = at.at if at is not None and not at.newer else None
    after = at.at if at is not None and at.newer else None  # an API's prev_cursor: one page
    while True:
        found = list_export_page(
            deps.exports,
            deps.clock,
            st.requester,
            listing,
            limit=min(limit - len(items), PAGE_SIZE) if not all_pages else PAGE_SIZE,
            before=before,
            after=after,
        )
        items.extend(export_view(r, now) for r in found.items)
        before, after = found.older, None
        if before is None or (not all_pages and len(items) >= limit):
            break
    next_cursor = encode_page_cursor(before) if before is not None else None
    _print_list({"items": items, "next_cursor": next_cursor}, as_json, filtered=listing.filtered)


PAGE_SIZE = 200
# The list's options, as its API parameters name them in errors.
_FLAGS = {"q": "--search", "format": "--format", "cursor": "--cursor", "subject": "--subject"}


def _flag_words(exc: InvalidRequestError) -> str:
    """Every problem found, each naming its option (`--search` rather than `q`)."""
    words = []
    for problem in exc.problems:
        detail, field = problem.detail, problem.field or ""
        flag = _FLAGS.get(field, f"--{field.replace('_', '-')}")
        words.append(f"{flag}: {detail.removeprefix(field + ' ')}" if field else detail)
    return "; ".join(words)


def _local_subject(deps: Container, requester: Requester, ref: str) -> str:
    """The id of the query or report `ref` names (by name, title or id); unknown ones are
    refused, with suggestions."""
    queries = [
        q for q in deps.catalog.list_queries(requester.workspace_id) if can_read(requester, q)
    ]
    reports = [
        r
        for r in deps.catalog.list_reports(requester.workspace_id)
        if can_read_report(requester, r)
    ]
    ids = [q.id for q in queries if ref in (q.name, q.id)]
    ids += [r.id for r in reports if ref in (r.title, r.id)]
    if not ids:
        names = [q.name for q in queries] + [r.title for r in reports]
        fail_input(
            f"--subject: no query or report {ref!r} that you can read" + did_you_mean(ref, names)
        )
    return ids[0]


def _remote_subject(client: QExportClient, ref: str) -> str:
    """The id of the query or report named `ref` on the server, else `ref` itself (an id)."""
    query_id, _ = client.lookup("/queries", "name", ref)
    if query_id != ref:
        return query_id
    return client.lookup("/reports", "title", ref)[0]


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
    """Poll `fetch` (the export as the API shows it) until it settles, showing the rows
    written, the time elapsed and the rate on stderr as it goes."""
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
            view = fetch()
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
    if as_json:
        _print_view(view, True)
    else:
        _print_summary(view)
    if view["status"] == "failed":
        raise typer.Exit(1)


def _print_download_link(deps: Container, requester: Requester, export_id: str) -> None:
    objects = deps.objects
    if not isinstance(objects, Presigner):
        fail_input("download links need S3 storage; use --output with the filesystem store")
    try:
        record = downloadable(deps.exports, deps.catalog, deps.clock, requester, export_id)
        actor = operator_for(requester.user_id)
        link, valid = hand_over_link(objects, deps.audit, deps.clock, actor, record)
    except QExportError as exc:
        fail(str(exc))
    out.print(link, highlight=False, soft_wrap=True)
    err.print(f"valid for {valid} s ({human_size(record.size_bytes)})")


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
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            _remote_download(client, export_id, output, link=url, force=force)
        return
    st, deps = local_deps(ctx)
    if url:
        _print_download_link(deps, st.requester, export_id)
        return
    try:
        record = downloadable(deps.exports, deps.catalog, deps.clock, st.requester, export_id)
    except QExportError as exc:
        fail(str(exc))
    target = None if output == "-" else download_target(output, record.filename, force=force)
    try:
        actor = operator_for(st.requester.user_id)
        stream = hand_over_file(deps.objects, deps.audit, deps.clock, actor, record)
    except QExportError as exc:
        fail(str(exc))
    with stream:
        if target is None:
            shutil.copyfileobj(stream, sys.stdout.buffer)
            return
        with _writing(target) as fh:
            shutil.copyfileobj(stream, fh, 1024 * 1024)
    err.print(
        f"wrote {target} ({human_size(record.size_bytes)}, sha256 {record.sha256})", soft_wrap=True
    )


# What every export's file name looks like (domain/exports.py's safe_filename makes them).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def plain_file_name(filename: str) -> str:
    """The export's file name as one plain name inside the directory it is written to: what
    qexport names files is kept; anything else (a server's `../../.bashrc`, `/etc/x`, `..`)
    is made safe the same way, so it can never leave that directory."""
    if _PLAIN_NAME.fullmatch(filename) and ".." not in filename:
        return filename
    stem, dot, extension = filename.rpartition(".")
    if not dot or not stem:
        stem, extension = filename, ""
    return safe_filename(stem, re.sub(r"[^A-Za-z0-9]", "", extension)[:10] or "bin")


def download_target(output: str | None, filename: str, *, force: bool) -> Path:
    """Where a download goes: `output` if it names a file, the export's file name inside it
    if it names a directory (`.`, `DIR/`), else that name here; an existing file only with
    `force`. The export's own name never reaches outside the directory (`plain_file_name`)."""
    filename = plain_file_name(filename)
    if output is None:
        target = Path(filename)
    elif Path(output).is_dir():
        target = Path(output) / filename
    elif output.endswith(("/", os.sep)):
        fail_input(f"no directory {output!r}: create it first, or name a file")
    else:
        target = Path(output)
    if target.is_dir():
        fail_input(f"{str(target)!r} is a directory; name a file, or a directory to write into")
    if target.exists() and not force:
        fail_input(f"{str(target)!r} already exists; pass --force to replace it")
    if not target.parent.is_dir():
        fail_input(f"no directory {str(target.parent)!r} to write {target.name!r} into")
    return target


@contextlib.contextmanager
def _writing(output: Path) -> Iterator[BinaryIO]:
    """`_replacing`, with a file system's refusal as one line instead of a traceback."""
    try:
        with _replacing(output) as fh:
            yield fh
    except OSError as exc:
        fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")


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
    client: QExportClient, export_id: str, output: str | None, *, link: bool, force: bool
) -> None:
    if link:
        location = client.file_location(export_id)
        if location is None:
            fail_input("this server serves files itself: use --output PATH")
        out.print(location, highlight=False, soft_wrap=True)
        return
    if output == "-":
        client.download(export_id, sys.stdout.buffer)
        return
    view = client.get_export(export_id)
    if view["status"] != "succeeded":  # the server's refusal says why, before any file exists
        client.file_location(export_id)
    target = download_target(output, str(view["filename"]), force=force)
    with _writing(target) as fh:
        view = client.download(export_id, fh)
    err.print(
        f"wrote {target} ({human_size(view['size_bytes'])}, sha256 {view['sha256']})",
        soft_wrap=True,
    )


@exports_app.command("cancel")
def exports_cancel(ctx: typer.Context, export_id: ExportRef = None) -> None:
    """Cancel a queued or running export."""
    export_id = resolve_export_id(ctx, export_id)
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


exports_app.command("deliveries")(exports_deliveries)
