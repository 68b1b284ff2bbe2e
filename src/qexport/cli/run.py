"""The long-running commands, `qexport worker`, `scheduler` and `serve`, and `qexport demo`."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from qexport import bootstrap
from qexport.cli.common import err, fail, fail_input, out, state
from qexport.config import Settings
from qexport.container import Container
from qexport.domain.exports import Requester
from qexport.domain.failures import (
    QExportError,
)
from qexport.logs import configure_logging

DEMO_HOST = "127.0.0.1"


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
    settings = state(ctx).local_settings()
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
    X-Forwarded-For itself (net/proxies.py), so an operator relying on uvicorn's variable behind
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
    # A worker reads sources: DuckDB (the built-in ones open on first use) loads now, not
    # within its first export's time.
    importlib.import_module("qexport.sources.duckdb.source")
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


def scheduler(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
) -> None:
    """Fire due schedules and send deliveries until stopped (SIGTERM/SIGINT): each pass
    creates the export and the deliveries of every due schedule, and the deliveries whose
    export has settled are sent (email, webhook, Slack, Teams) every poll
    (QEXPORT_SCHEDULER_POLL_SECONDS). Any number of schedulers may run at once: each due
    time still fires exactly one export, and each recipient hears once."""
    from qexport.scheduler.loop import Scheduler

    configure_logging(level=logging.INFO)
    settings = state(ctx).local_settings()
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
    settings = with_public_url(state(ctx).local_settings(), host, port)
    _refuse_unsafe_start(settings, "serve")
    _refuse_uvicorns_proxy_variable(settings)
    deps = _build_checked(settings, "server", serving=True)
    processes = workers or cores()
    _say_where(ctx, local_url(host, port))
    if processes == 1:
        application = create_app(deps)
        structlog.get_logger().info("server_starting", url=local_url(host, port), workers=1)
        run_server(application, host, port)
        return
    deps.close()  # the children fork next and build their own: close, not inherit
    _serve_processes(settings, host, port, processes)


def _say_where(ctx: typer.Context, url: str) -> None:
    """On a terminal, the address to open and who signs in, before the log lines start."""
    if not sys.stderr.isatty():
        return
    from qexport.cli.home import read_identity

    st = state(ctx)
    known = read_identity(st.settings.data_dir) if st.data_dir_found else None
    who = f" as {known.email}" if known else ""
    err.print(
        f"qexport is serving at {url}\nOpen it in a browser and sign in{who}"
        " (`qexport users set-password EMAIL --password-stdin` gives a password). Ctrl-C stops.",
        highlight=False,
        soft_wrap=True,
    )


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


# ---------------------------------------------------------------- demo


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
    from qexport.api.server import local_url, with_public_url
    from qexport.demo.run import demo_admin, demo_receiver, run_demo, serve_demo

    st = state(ctx)
    # The demo's deliveries link to the server it starts (--serve) on 127.0.0.1.
    st.settings = with_public_url(st.settings, DEMO_HOST, port)
    deps = st.deps(create=True)
    email = _first_admin(deps, st.requester, demo_admin(deps, st.requester))
    # The receiver outlives the first part under --serve: the schedule still points at it.
    with demo_receiver(deps, st.requester) as receiver:
        code = run_demo(deps, st.requester, rows=rows, console=out, receiver=receiver)
        if serve_api:
            receiver.console = out
            try:
                serve_demo(deps, st.requester, host=DEMO_HOST, port=port, console=out)
            except QExportError as exc:
                fail(str(exc))
        else:
            out.print(
                f"Sign in to the pages: run `qexport demo --serve` (or `qexport serve`), open"
                f" {local_url(DEMO_HOST, port)} and sign in as {email}.",
                soft_wrap=True,
            )
    raise typer.Exit(code)


def _first_admin(deps: Container, requester: Requester, password: str | None) -> str:
    """Make `requester` the account the local CLI acts as, unless one is set (cli/home.py),
    printing a new account's password once; its email."""
    from qexport.cli.home import Identity, read_identity, write_identity

    user = deps.accounts.get_user(requester.user_id)
    email = user.email if user is not None else requester.user_id
    if read_identity(deps.settings.data_dir) is None:
        write_identity(
            deps.settings.data_dir, Identity(requester.user_id, email, requester.workspace_id)
        )
    if password is not None:
        out.print(
            f"Admin account: {email}, password {password} (shown once; change it with"
            f" `qexport users set-password {email} --password-stdin`). The command line acts"
            " as this account.",
            soft_wrap=True,
        )
    return email
