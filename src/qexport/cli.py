"""`qexport`: thin commands over the services."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from qexport import bootstrap
from qexport.config import Settings
from qexport.domain.exports import ExportRecord, Requester, effective_status
from qexport.domain.failures import QExportError
from qexport.domain.queries import Query, Visibility, parse_param_spec
from qexport.logs import configure_logging
from qexport.services.exports import (
    cancel_export,
    downloadable,
    get_visible_export,
    open_download,
)
from qexport.services.requests import request_export
from qexport.services.views import export_view
from qexport.worker.runner import Deps

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Turn saved SQL queries into files."
)
db_app = typer.Typer(no_args_is_help=True, help="The metadata database.")
storage_app = typer.Typer(no_args_is_help=True, help="The object store.")
queries_app = typer.Typer(no_args_is_help=True, help="Saved queries.")
exports_app = typer.Typer(no_args_is_help=True, help="Request, watch and download exports.")
app.add_typer(db_app, name="db")
app.add_typer(storage_app, name="storage")
app.add_typer(queries_app, name="queries")
app.add_typer(exports_app, name="exports")

out = Console()
err = Console(stderr=True)


@dataclass
class State:
    settings: Settings
    requester: Requester
    _deps: Deps | None = None

    def deps(self) -> Deps:
        if self._deps is None:
            self._deps = bootstrap.build(self.settings)
        return self._deps


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


@app.callback()
def main_options(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar="QEXPORT_DATA_DIR", help="Where the embedded default keeps its files."),
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(envvar="QEXPORT_DATABASE_URL", help="Metadata database URL.")
    ] = None,
    storage_url: Annotated[
        str | None,
        typer.Option(envvar="QEXPORT_STORAGE_URL", help="Object store URL (file:///path)."),
    ] = None,
    user: Annotated[str, typer.Option(envvar="QEXPORT_USER", help="Requester user id.")] = "demo",
    workspace: Annotated[
        str, typer.Option(envvar="QEXPORT_WORKSPACE", help="Requester workspace id.")
    ] = "demo",
) -> None:
    # Client commands print results, not logs; the worker turns its logs up (see `worker`).
    configure_logging(level=logging.WARNING)
    try:
        settings = Settings.from_env().with_overrides(
            data_dir=data_dir, database_url=database_url, storage_url=storage_url
        )
        if data_dir is not None and database_url is None and storage_url is None:
            # A data dir given on the command line also moves the defaults that live in it.
            settings = Settings(**{**settings.__dict__, "database_url": "", "storage_url": ""})
    except ValueError as exc:
        fail(str(exc), 2)
    ctx.obj = State(settings, Requester(user, workspace))


def state(ctx: typer.Context) -> State:
    obj = ctx.obj
    assert isinstance(obj, State)
    return obj


# ---------------------------------------------------------------- db, storage


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Bring the metadata database to the newest schema."""
    from qexport.store.engine import create_engine, current_revision, migrate

    engine = create_engine(state(ctx).settings.database_url)
    migrate(engine)
    out.print(f"database at revision {current_revision(engine)}")


@storage_app.command("lifecycle")
def storage_lifecycle(
    ctx: typer.Context,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write the rules (S3) or run the sweep (filesystem).")
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Report drift from the rules; exit 1 if any.")
    ] = False,
) -> None:
    """The retention rules: files expire retention + 1 day after completion, uploads left
    incomplete are dropped after 1 day. On S3 they are bucket lifecycle rules (`--apply`
    writes them, `--check` compares); on the filesystem store this command is the sweeper
    (run it from cron), and it is what runs when no option is given there."""
    from qexport.storage.filesystem import FilesystemObjectStore

    if apply and check:
        fail("choose one of --apply and --check", 2)
    deps = state(ctx).deps()
    retention = deps.settings.retention
    try:
        if isinstance(deps.objects, FilesystemObjectStore):
            _filesystem_lifecycle(deps, check=check)
            return
        from qexport.storage.s3 import S3ObjectStore
        from qexport.storage.s3_lifecycle import apply_lifecycle, check_lifecycle, expiry_days

        if not isinstance(deps.objects, S3ObjectStore):
            fail(f"no lifecycle rules for {type(deps.objects).__name__}")
        store = deps.objects
        where = f"s3://{store.bucket}/{store.prefix}"
        if apply:
            apply_lifecycle(store, retention)
            out.print(
                f"{where}: rules written (exports expire after {expiry_days(retention)} days,"
                " incomplete uploads are aborted after 1 day)"
            )
            return
        if not check:
            fail("on S3, choose --apply (write the bucket rules) or --check (report drift)", 2)
        drift = check_lifecycle(store, retention)
        for line in drift:
            out.print(f"{where}: {line}", highlight=False)
        if drift:
            raise typer.Exit(1)
        out.print(f"{where}: lifecycle rules in place")
    except QExportError as exc:
        fail(str(exc))


def _filesystem_lifecycle(deps: Deps, *, check: bool) -> None:
    from qexport.storage.filesystem import FilesystemObjectStore
    from qexport.storage.lifecycle import apply_filesystem_lifecycle

    assert isinstance(deps.objects, FilesystemObjectStore)
    if check:
        out.print(
            "the filesystem store keeps no rules to drift from:"
            " run `qexport storage lifecycle --apply` daily to apply them"
        )
        return
    report = apply_filesystem_lifecycle(deps.objects, deps.clock.now(), deps.settings.retention)
    out.print(
        f"deleted {report.objects_deleted} file(s) past retention + 1 day, removed"
        f" {report.uploads_removed} incomplete upload(s) older than 1 day and"
        f" {report.orphan_meta_removed} orphan metadata file(s)"
    )


# ---------------------------------------------------------------- worker


@app.command()
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Exports produced at once by each process.")
    ] = 1,
    processes: Annotated[
        int, typer.Option(min=1, help="Worker processes, kept running by this one.")
    ] = 1,
    drain: Annotated[bool, typer.Option(help="Exit once nothing is queued or running.")] = False,
) -> None:
    """Claim queued exports and produce their files until stopped (SIGTERM/SIGINT)."""
    configure_logging(level=logging.INFO)
    settings = state(ctx).settings
    _check_worker_start(settings)
    if processes == 1:
        _run_worker(settings, concurrency, drain, supervised=False)
        return
    from qexport.worker.processes import Supervisor

    supervisor = Supervisor(
        lambda _index: _run_worker(settings, concurrency, drain, supervised=True),
        processes,
        drain=drain,
    )
    supervisor.install_signal_handlers()
    raise typer.Exit(supervisor.run())


def _check_worker_start(settings: Settings) -> None:
    """Refuse to start on a configuration that cannot work, with one clear line, instead of
    claiming exports only to fail them (or crash-looping under a process manager)."""
    import sqlalchemy.exc

    try:
        deps = bootstrap.build(settings)
        bootstrap.check_ready(deps)
    except (QExportError, ValueError) as exc:
        fail(f"worker cannot start: {exc}", 3)
    except sqlalchemy.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        fail(f"worker cannot start: the metadata database is unavailable: {reason}", 3)
    from qexport.store.sql import SqlMetadataStore

    if isinstance(deps.store, SqlMetadataStore):  # the supervisor forks next: close, not inherit
        deps.store.engine.dispose()


def _run_worker(settings: Settings, concurrency: int, drain: bool, *, supervised: bool) -> None:
    from qexport.worker.loop import Worker

    w = Worker(bootstrap.build(settings, upgrade=False), concurrency=concurrency, drain=drain)
    w.install_signal_handlers(sigint=not supervised)
    wakeups = bootstrap.listener(settings, w.wake)
    if wakeups is not None:
        wakeups.start()
    try:
        w.run()
    finally:
        if wakeups is not None:
            wakeups.stop()


# ---------------------------------------------------------------- queries


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
) -> None:
    """Save a query."""
    st = state(ctx)
    deps = st.deps()
    try:
        params = tuple(parse_param_spec(p) for p in param or [])
    except QExportError as exc:
        fail(str(exc), 2)
    if source not in deps.sources:
        fail(f"unknown source {source!r} (configured: {', '.join(sorted(deps.sources))})", 2)
    if deps.store.find_query(st.requester.workspace_id, name) is not None:
        fail(f"a query named {name!r} already exists in workspace {st.requester.workspace_id!r}", 2)
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
    )
    deps.store.add_query(query)
    out.print(f"saved query {name!r} ({query.id})")


@queries_app.command("list")
def queries_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List the workspace's queries."""
    st = state(ctx)
    found = st.deps().store.list_queries(st.requester.workspace_id)
    if as_json:
        print(json.dumps([_query_json(q) for q in found], indent=2))
        return
    table = Table("name", "source", "parameters", "visibility", "id")
    for q in found:
        params = ", ".join(
            f"{p.name}:{p.type.value}" + ("" if p.required else f"={p.default}")
            for p in q.parameters
        )
        table.add_row(q.name, q.source, params, q.visibility.value, q.id)
    out.print(table)


@queries_app.command("delete")
def queries_delete(ctx: typer.Context, name: str) -> None:
    """Delete a query; its unsettled exports then fail with access_lost."""
    st = state(ctx)
    deps = st.deps()
    query = deps.store.find_query(st.requester.workspace_id, name)
    if query is None or not deps.store.delete_query(query.id):
        fail(f"no query named {name!r}")
    out.print(f"deleted query {name!r}")


def _query_json(q: Query) -> dict[str, Any]:
    return {
        "id": q.id,
        "name": q.name,
        "sql": q.sql,
        "source": q.source,
        "parameters": [p.to_json() for p in q.parameters],
        "visibility": q.visibility.value,
    }


# ---------------------------------------------------------------- exports


def _parse_kv(pairs: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--param expects KEY=VALUE, got {pair!r}", 2)
        values[key] = value
    return values


def _print_export(record: ExportRecord, deps: Deps, as_json: bool) -> None:
    view = export_view(record, deps.clock.now())
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
    query: Annotated[str, typer.Option(help="Query name or id.")],
    fmt: Annotated[str, typer.Option("--format", help="csv, tsv, jsonl, parquet or xlsx.")],
    param: Annotated[list[str] | None, typer.Option(help="KEY=VALUE, repeatable.")] = None,
    neutralize: Annotated[
        bool, typer.Option(help="Neutralise formula-looking strings in csv/tsv/xlsx.")
    ] = True,
    wait: Annotated[bool, typer.Option(help="Wait until the export settles.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export as JSON.")] = False,
) -> None:
    """Request an export; bad input is refused and nothing is recorded."""
    st = state(ctx)
    deps = st.deps()
    try:
        record = request_export(
            deps.store,
            deps.clock,
            st.requester,
            query_ref=query,
            fmt=fmt,
            parameters=_parse_kv(param or []),
            neutralize_formulas=neutralize,
        )
    except QExportError as exc:
        fail(str(exc), 2)
    if wait:
        record = _wait(deps, st.requester, record.id, quiet=as_json)
    if as_json:
        _print_export(record, deps, True)
    else:
        out.print(f"export {record.id} {effective_status(record, deps.clock.now())}")
    if wait and record.status.value == "failed":
        raise typer.Exit(1)


@exports_app.command("get")
def exports_get(
    ctx: typer.Context, export_id: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show one export."""
    st = state(ctx)
    deps = st.deps()
    try:
        record = get_visible_export(deps.store, st.requester, export_id)
    except QExportError as exc:
        fail(str(exc))
    _print_export(record, deps, as_json)


@exports_app.command("list")
def exports_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
) -> None:
    """List your exports, newest first."""
    st = state(ctx)
    deps = st.deps()
    records = deps.store.list_exports(
        workspace_id=st.requester.workspace_id, requested_by=st.requester.user_id, limit=limit
    )
    now = deps.clock.now()
    if as_json:
        print(
            json.dumps(
                {"items": [export_view(r, now) for r in records], "next_cursor": None}, indent=2
            )
        )
        return
    table = Table("id", "status", "query", "format", "rows", "size", "created")
    for r in records:
        table.add_row(
            r.id,
            effective_status(r, now),
            r.subject_name,
            r.format,
            f"{r.row_count:,}" if r.row_count is not None else "",
            _human_size(r.size_bytes),
            f"{r.created_at:%Y-%m-%d %H:%M:%S}",
        )
    out.print(table)


def _wait(deps: Deps, requester: Requester, export_id: str, *, quiet: bool = False) -> ExportRecord:
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
            record = get_visible_export(deps.store, requester, export_id)
            progress.update(
                task,
                rows=record.progress_rows,
                description=f"{export_id[:8]} {record.status.value}",
            )
            if record.settled:
                return record
            time.sleep(0.2)


@exports_app.command("wait")
def exports_wait(
    ctx: typer.Context, export_id: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Wait until the export settles; exit 1 if it failed."""
    st = state(ctx)
    deps = st.deps()
    try:
        record = _wait(deps, st.requester, export_id, quiet=as_json)
    except QExportError as exc:
        fail(str(exc))
    _print_export(record, deps, as_json)
    if record.status.value == "failed":
        raise typer.Exit(1)


def _print_download_link(deps: Deps, requester: Requester, export_id: str) -> None:
    from qexport.storage.s3 import S3ObjectStore

    if not isinstance(deps.objects, S3ObjectStore):
        fail("download links need S3 storage; use --output with the filesystem store", 2)
    try:
        record = downloadable(deps.store, deps.clock, requester, export_id)
        assert record.expires_at is not None
        left = (record.expires_at - deps.clock.now()).total_seconds()
        # Never valid past the export's own expiry: the link dies with the file.
        valid = max(1, min(deps.objects.presign_seconds, int(left)))
        link = deps.objects.presigned_url(record.storage_key, record.filename, max_seconds=valid)
    except QExportError as exc:
        fail(str(exc))
    out.print(link, highlight=False, soft_wrap=True)
    err.print(f"valid for {valid} s ({_human_size(record.size_bytes)})")


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
    """Download the file of a succeeded export (refused once it has expired)."""
    st = state(ctx)
    deps = st.deps()
    if url:
        _print_download_link(deps, st.requester, export_id)
        return
    if output is None:
        fail("give --output PATH (or '-' for stdout), or --url for a download link", 2)
    try:
        record, stream = open_download(
            deps.store, deps.objects, deps.clock, st.requester, export_id
        )
    except QExportError as exc:
        fail(str(exc))
    with stream:
        if str(output) == "-":
            shutil.copyfileobj(stream, sys.stdout.buffer)
            return
        tmp = output.with_name(f".{output.name}.part")
        try:
            with tmp.open("wb") as fh:
                shutil.copyfileobj(stream, fh, 1024 * 1024)
            tmp.replace(output)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    err.print(f"wrote {output} ({_human_size(record.size_bytes)}, sha256 {record.sha256})")


@exports_app.command("cancel")
def exports_cancel(ctx: typer.Context, export_id: str) -> None:
    """Cancel a queued or running export."""
    st = state(ctx)
    deps = st.deps()
    try:
        record = cancel_export(deps.store, deps.clock, st.requester, export_id)
    except QExportError as exc:
        fail(str(exc))
    out.print(f"export {record.id} cancelled")


def _human_size(size: int | None) -> str:
    if size is None:
        return ""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{size} B"


# ---------------------------------------------------------------- demo


@app.command()
def demo(
    ctx: typer.Context,
    rows: Annotated[
        int, typer.Option(min=1, help="Orders in the generated demo dataset.")
    ] = 1_000_000,
) -> None:
    """Everything on the embedded default: data, queries, a worker, one export per format."""
    from qexport.demo import run_demo

    raise typer.Exit(run_demo(state(ctx).deps(), state(ctx).requester, rows=rows, console=out))


def main() -> None:
    app()
