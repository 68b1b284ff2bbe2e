"""`qexport`: thin commands over the services."""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from qexport import bootstrap
from qexport.cli.admin import sources_app, tokens_app, users_app
from qexport.cli.approvals import approvals_app
from qexport.cli.audit import audit_app
from qexport.cli.common import State, fail, fail_input, local_deps, out, state
from qexport.cli.deliveries import exports_deliveries
from qexport.cli.exports import exports_app
from qexport.cli.members import members_app
from qexport.cli.preview import queries_preview
from qexport.cli.reports import reports_app
from qexport.cli.schedules import schedules_app
from qexport.cli.workspaces import workspaces_app
from qexport.config import Setting, Settings, declared
from qexport.container import Container
from qexport.domain.audit import OPERATOR, Action, operator_for
from qexport.domain.exports import Requester
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
from qexport.logs import configure_logging
from qexport.services.describe import (
    Described,
    Saving,
    describe_statement,
    describe_timeout,
)
from qexport.services.queries import check_sql, query_event

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Turn saved SQL queries into files."
)
db_app = typer.Typer(no_args_is_help=True, help="The metadata database.")
storage_app = typer.Typer(no_args_is_help=True, help="The object store.")
queries_app = typer.Typer(no_args_is_help=True, help="Saved queries.")
app.add_typer(db_app, name="db")
app.add_typer(storage_app, name="storage")
app.add_typer(queries_app, name="queries")
app.add_typer(exports_app, name="exports")
exports_app.command("deliveries")(exports_deliveries)
app.add_typer(users_app, name="users")
app.add_typer(tokens_app, name="tokens")
app.add_typer(sources_app, name="sources")
app.add_typer(reports_app, name="reports")
app.add_typer(schedules_app, name="schedules")
app.add_typer(workspaces_app, name="workspaces")
app.add_typer(members_app, name="members")
app.add_typer(audit_app, name="audit")
app.add_typer(approvals_app, name="approvals")

DEMO_HOST = "127.0.0.1"


def _metavar(s: Setting) -> str:
    """What a flag twin's value is, as its help shows it: the setting's own type (the flag
    itself hands Settings text, parsed like the variable's)."""
    if s.name.endswith("_url"):
        return "<url>"
    if s.type is float:
        return "<seconds>" if s.name.endswith("_seconds") else "<float>"
    return {Path: "<path>", timedelta: "<duration>", int: "<int>"}.get(s.type, "<str>")


def _setting_flags(callback: Callable[..., None]) -> Callable[..., None]:
    """`callback` behind one global option per setting declared with a flag twin
    (config.Settings, `flag=True`): each also reads its QEXPORT_* variable, and their values
    reach `callback` as `flags` (variable -> value given, or None)."""
    twins = [s for s in declared() if s.flag_name]

    def with_flags(**values: Any) -> None:
        callback(flags={s.env: values.pop(s.name) for s in twins}, **values)

    keyword = inspect.Parameter.KEYWORD_ONLY
    ctx, *own = [
        p.replace(kind=keyword)
        for p in inspect.signature(callback, eval_str=True).parameters.values()
        if p.name != "flags"
    ]
    options = [
        inspect.Parameter(
            s.name,
            keyword,
            default=None,
            annotation=Annotated[
                str | None,
                typer.Option(
                    s.flag_name,
                    metavar=_metavar(s),
                    envvar=s.env,
                    help=s.help,
                    show_default=False,
                    show_envvar=not s.secret,
                ),
            ],
        )
        for s in twins
    ]
    signature = inspect.Signature([ctx, *options, *own])
    with_flags.__signature__ = signature  # type: ignore[attr-defined]  # typer reads options here
    return with_flags


@app.callback()
@_setting_flags
def main_options(
    ctx: typer.Context,
    flags: dict[str, str | None],
    user: Annotated[str, typer.Option(envvar="QEXPORT_USER", help="Requester user id.")] = "demo",
    workspace: Annotated[
        str, typer.Option(envvar="QEXPORT_WORKSPACE", help="Requester workspace id.")
    ] = "demo",
    url: Annotated[
        str | None,
        typer.Option(
            envvar="QEXPORT_URL",
            help="A qexport server: with --token, the `exports` commands talk to it instead"
            " of the local database.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="QEXPORT_TOKEN", help="API token for --url (`qexport tokens create EMAIL`)."
        ),
    ] = None,
) -> None:
    # Client commands print results, not logs; the worker turns its logs up (see `worker`).
    configure_logging(level=logging.WARNING)
    # A flag wins over its variable; both are read, checked and reported by one parser.
    env = {**os.environ, **{k: v for k, v in flags.items() if v is not None}}
    try:
        settings = Settings.from_env(env)
    except ValueError as exc:
        fail_input(str(exc))
    ctx.obj = State(settings, Requester(user, workspace), url=url, token=token)


# ---------------------------------------------------------------- db, storage


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Bring the metadata database to the newest schema."""
    revision = bootstrap.upgrade_database(state(ctx).settings)
    out.print(f"database at revision {revision}")


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
    if apply and check:
        fail_input("choose one of --apply and --check")
    deps = state(ctx).deps()
    retention = deps.settings.retention
    try:
        rules = deps.retention_rules()
        if rules is None:
            fail(f"no lifecycle rules for {type(deps.objects).__name__}")
        if rules.swept and check:
            out.print(
                "the filesystem store keeps no rules to drift from:"
                " run `qexport storage lifecycle --apply` daily to apply them"
            )
            return
        if apply or (rules.swept and not check):
            out.print(rules.apply(deps.clock.now(), retention))
            return
        if not check:
            fail_input("on S3, choose --apply (write the bucket rules) or --check (report drift)")
        where = rules.where
        drift = rules.drift(retention)
        for line in drift:
            out.print(f"{where}: {line}", highlight=False)
        if drift:
            raise typer.Exit(1)
        out.print(f"{where}: lifecycle rules in place")
    except QExportError as exc:
        fail(str(exc))


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
    _refuse_unsafe_start(settings, "worker")
    _check_worker_start(settings)
    if processes == 1:
        _run_worker(settings, concurrency, drain, supervised=False, group_slots=concurrency)
        return
    from qexport.worker.processes import Supervisor

    supervisor = Supervisor(
        lambda _index: _run_worker(
            settings, concurrency, drain, supervised=True, group_slots=concurrency * processes
        ),
        processes,
        drain=drain,
    )
    supervisor.install_signal_handlers()
    raise typer.Exit(supervisor.run())


def _check_worker_start(settings: Settings) -> None:
    """Refuse to start on a configuration that cannot work, with one clear line, instead of
    claiming exports only to fail them (or crash-looping under a process manager)."""
    deps = _build_checked(settings, "worker")
    deps.close()  # the supervisor forks next: close, not inherit


def _refuse_unsafe_start(settings: Settings, service: str) -> None:
    """Exit 2 with one line when `service` must not run on these settings (see
    Settings.service_refusal), before anything connects."""
    refusal = settings.service_refusal(service)
    if refusal is not None:
        fail_input(refusal)


def _refuse_uvicorns_proxy_variable(settings: Settings) -> None:
    """Exit 2 when FORWARDED_ALLOW_IPS is set and QEXPORT_TRUSTED_PROXIES is not: qexport reads
    X-Forwarded-For itself (proxies.py), so an operator relying on uvicorn's variable behind
    a balancer would see every client as the balancer, one address for the sign-in throttle
    to hold them all to."""
    if os.environ.get("FORWARDED_ALLOW_IPS", "").strip() and not settings.trusted_proxies:
        fail_input(
            "serve cannot start: FORWARDED_ALLOW_IPS is not read by qexport; name the proxies"
            " whose X-Forwarded-For is believed in QEXPORT_TRUSTED_PROXIES (addresses or CIDRs,"
            " e.g. 10.0.0.5) and unset FORWARDED_ALLOW_IPS"
        )


def _build_checked(settings: Settings, what: str, *, serving: bool = False) -> Container:
    """The adapters, migrated and checked (database answers, object store usable); exit 3
    with one line saying why otherwise. `serving`: a server's (bootstrap.build)."""
    import sqlalchemy.exc

    try:
        deps = bootstrap.build(settings, serving=serving)
        bootstrap.check_ready(deps)
    except (QExportError, ValueError) as exc:
        fail(f"{what} cannot start: {exc}", 3)
    except sqlalchemy.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        fail(f"{what} cannot start: the metadata database is unavailable: {reason}", 3)
    return deps


def _lower_priority(settings: Settings, *, keep: int) -> None:
    """Run this process's exports after the servers on its machine: at niceness
    QEXPORT_WORKER_NICE and, on Linux, in the idle scheduling class. On Linux both are a
    thread's own: every thread already running is lowered (the libraries' native ones, started
    on import), but `keep` (the heartbeat thread, worker/lease.py), and those started later
    (DuckDB's, the slots) and the processes forked later inherit it."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():  # not Linux: the process's niceness
        if settings.worker_nice:
            os.nice(settings.worker_nice)
        return
    threads = [int(t.name) for t in tasks.iterdir() if int(t.name) != keep]
    if settings.worker_nice:
        _each_thread(
            threads,
            lambda tid: os.setpriority(
                os.PRIO_PROCESS,
                tid,
                min(os.getpriority(os.PRIO_PROCESS, tid) + settings.worker_nice, 19),
            ),
        )
    if settings.worker_idle:
        _each_thread(
            threads, lambda tid: os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        )


def _each_thread(threads: list[int], change: Callable[[int], None]) -> None:
    """`change` each thread, those that ended meanwhile aside; if refused (a sandbox that
    forbids it), the threads are left as they are and the refusal logged."""
    for tid in threads:
        try:
            change(tid)
        except ProcessLookupError:
            continue
        except OSError as exc:
            import structlog

            structlog.get_logger().warning("worker_priority_not_lowered", reason=str(exc))
            return


def _run_worker(
    settings: Settings, concurrency: int, drain: bool, *, supervised: bool, group_slots: int
) -> None:
    import structlog

    from qexport.sources.scratch import remove_abandoned
    from qexport.worker.lease import start_heartbeats
    from qexport.worker.loop import Worker
    from qexport.worker.memory import watch_memory

    remove_abandoned()  # pipes and spill of workers killed outright (SIGKILL, OOM killer)
    beating = start_heartbeats()  # before the lowering, which leaves it out
    _lower_priority(settings, keep=beating)
    structlog.get_logger().info(
        "worker_priority_set",
        nice=settings.worker_nice,
        idle=settings.worker_idle,
        heartbeat_thread=beating,
    )
    w = Worker(
        bootstrap.build(settings, upgrade=False),
        concurrency=concurrency,
        drain=drain,
        group_slots=group_slots,
        memory=watch_memory(
            settings.worker_max_memory, lambda: _renew_worker(supervised=supervised, now=True)
        ),
    )
    w.install_signal_handlers(sigint=not supervised)
    wakeups = bootstrap.listener(settings, w.wake)
    if wakeups is not None:
        wakeups.start()
    try:
        w.run()
    finally:
        if wakeups is not None:
            wakeups.stop()
    if w.memory_kept:
        _renew_worker(supervised=supervised)


def _renew_worker(*, supervised: bool, now: bool = False) -> None:
    """A fresh process for a worker whose memory a fresh one gets back (worker/memory.py):
    its supervisor starts one, or this one executes itself again (same pid and command).
    `now`: from any thread, while other threads still run (their exports settled first)."""
    from qexport.worker.processes import RENEW_EXIT_STATUS

    sys.stdout.flush()
    sys.stderr.flush()
    if supervised:
        if now:
            os._exit(RENEW_EXIT_STATUS)  # a thread's SystemExit would end that thread only
        raise SystemExit(RENEW_EXIT_STATUS)
    # The priority this process lowered itself to is kept across exec: not lowered again (its
    # heartbeat thread, started from a lowered thread, then runs lowered too: a process may
    # not raise its own priority back without the privilege to).
    env = {**os.environ, "QEXPORT_WORKER_NICE": "0", "QEXPORT_WORKER_IDLE": "false"}
    os.execve(sys.executable, sys.orig_argv, env)  # noqa: S606 - this very command, run again


@app.command()
def scheduler(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
) -> None:
    """Fire due schedules and send deliveries until stopped (SIGTERM/SIGINT): each pass
    creates the export and the deliveries of every due schedule, and the deliveries whose
    export has settled are sent (email, webhook, Slack, Teams) every poll
    (QEXPORT_SCHEDULER_POLL_SECONDS). Any number of schedulers may run at once: each due
    time still fires exactly one export, and each recipient hears once."""
    from qexport.schedules.loop import Scheduler

    configure_logging(level=logging.INFO)
    settings = state(ctx).settings
    _refuse_unsafe_start(settings, "scheduler")
    deps = _build_checked(settings, "scheduler")
    dispatcher = bootstrap.dispatcher(deps)
    runner = Scheduler(deps, dispatcher=dispatcher)
    try:
        if once:
            raise typer.Exit(0 if runner.run_once().ok else 1)
        runner.install_signal_handlers()
        runner.run()
    finally:
        dispatcher.close()


# ---------------------------------------------------------------- serve


# A server process is asynchronous: more of them than cores only adds memory and database
# connections (33 each on PostgreSQL). The bound stops a slip of the keyboard (--workers 1000)
# from forking the machine out of memory.
MAX_SERVERS_PER_CORE = 4


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Server processes on the one port, each a whole server sharing only the"
            " database and the object store, kept running by this one (default: one per core;"
            f" at most {MAX_SERVERS_PER_CORE} per core).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the HTTP API until SIGTERM/SIGINT; /healthz, /readyz and /metrics need no token
    (protect /metrics at the proxy if its counts are private)."""
    import structlog

    from qexport.api.server import cores, local_url, run_server, with_public_url
    from qexport.app import create_app

    configure_logging(level=logging.INFO)
    most = MAX_SERVERS_PER_CORE * cores()
    if workers is not None and workers > most:
        fail_input(
            f"--workers {workers}: at most {most} on this machine ({MAX_SERVERS_PER_CORE} per"
            " core; one per core already serves every request the cores can)"
        )
    settings = with_public_url(state(ctx).settings, host, port)
    _refuse_unsafe_start(settings, "serve")
    _refuse_uvicorns_proxy_variable(settings)
    deps = _build_checked(settings, "server", serving=True)
    processes = workers or cores()
    if processes == 1:
        application = create_app(deps)
        structlog.get_logger().info("server_starting", url=local_url(host, port), workers=1)
        run_server(application, host, port)
        return
    deps.close()  # the children fork next and build their own: close, not inherit
    _serve_processes(settings, host, port, processes)


def _serve_processes(settings: Settings, host: str, port: int, processes: int) -> None:
    """`processes` forked servers on `port`, kept running by this process, which serves
    nothing itself and forwards SIGTERM/SIGINT to them. On Linux each listens on a socket of
    its own, the kernel sharing the connections out; elsewhere they accept on one socket
    bound here."""
    import structlog

    from qexport.api.server import balances_connections, listening_socket, local_url, run_server
    from qexport.app import create_app
    from qexport.worker.processes import Supervisor

    own_shares = balances_connections()
    try:
        # Bound here (and held, never listened on) so that a taken port fails at once. Sockets
        # that share a port (SO_REUSEPORT) bind beside any other such socket of this user, so
        # another qexport serve would be joined without a word and served half its clients:
        # a socket that does not share the port is bound first, which any listener refuses.
        if own_shares:
            listening_socket(host, port).close()
        sock = listening_socket(host, port, own_share=own_shares)
    except OSError as exc:
        fail(f"server cannot start: cannot listen on {host}:{port}: {exc.strerror or exc}", 3)

    def one_server(_index: int) -> None:
        deps = bootstrap.build(settings, upgrade=False, serving=True)
        try:
            share = listening_socket(host, port, own_share=True) if own_shares else sock
            run_server(create_app(deps), host, port, sock=share)
        finally:
            deps.close()

    supervisor = Supervisor(one_server, processes, kind="server", end_with_supervisor=True)
    supervisor.install_signal_handlers()
    structlog.get_logger().info("server_starting", url=local_url(host, port), workers=processes)
    raise typer.Exit(supervisor.run())


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
    """List the workspace's queries."""
    st, deps = local_deps(ctx)
    found = deps.catalog.list_queries(st.requester.workspace_id)
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
    st, deps = local_deps(ctx)
    query = deps.catalog.find_query(st.requester.workspace_id, name)
    if query is None or not deps.catalog.delete_query(
        query.id, audit=query_event(OPERATOR, Action.QUERY_DELETED, query)
    ):
        fail(f"no query named {name!r}")
    out.print(f"deleted query {name!r}")


queries_app.command("preview")(queries_preview)


def _query_json(q: Query) -> dict[str, Any]:
    return {
        "id": q.id,
        "name": q.name,
        "sql": q.sql,
        "source": q.source,
        "parameters": [p.to_json() for p in q.parameters],
        "visibility": q.visibility.value,
        "columns": None if q.columns is None else [c.to_json() for c in q.columns],
    }


# ---------------------------------------------------------------- demo


@app.command()
def demo(
    ctx: typer.Context,
    rows: Annotated[
        int, typer.Option(min=1, help="Orders in the generated demo dataset.")
    ] = 1_000_000,
    serve_api: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Then serve the API on 127.0.0.1 with a worker until Ctrl-C, printing its URL"
            " and a token.",
        ),
    ] = False,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port for --serve.")] = 8000,
) -> None:
    """Everything on the embedded default: data, queries, a worker, one export per format, and
    a weekly schedule fired once and delivered to a local webhook receiver."""
    from qexport.api.server import with_public_url
    from qexport.demo import demo_receiver, run_demo, serve_demo

    st = state(ctx)
    # The demo's deliveries link to the server it starts (--serve) on 127.0.0.1.
    st.settings = with_public_url(st.settings, DEMO_HOST, port)
    deps = st.deps()
    # The receiver outlives the first part under --serve: the schedule still points at it.
    with demo_receiver(deps, st.requester) as receiver:
        code = run_demo(deps, st.requester, rows=rows, console=out, receiver=receiver)
        if serve_api:
            receiver.console = out
            try:
                serve_demo(deps, st.requester, host=DEMO_HOST, port=port, console=out)
            except QExportError as exc:
                fail(str(exc))
    raise typer.Exit(code)


def main() -> None:
    app()
