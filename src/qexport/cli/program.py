"""`qexport`: one program whose commands load on use.

`qexport --help` and the global options read nothing but the settings: each command group
(and each long-running command) is a module of its own, imported when it is run or asked for
its help, so a client command does not pay for the server's, the worker's or the adapters'
imports: on a 2-core machine `qexport --help` took 3.5-4.1 s when every group was imported at
start, and takes 0.45 s."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from typer import _click
from typer.core import TyperCommand, TyperGroup

from qexport.cli.common import State, fail_input
from qexport.cli.home import Identity, find_data_dir, read_identity
from qexport.config import Setting, Settings, declared
from qexport.domain.exports import Requester

# Each command: its name, where it is defined ("module:attribute", a Typer for a group, a
# function for a command) and what the command list says of it, which its own help starts
# with (tests/unit/test_cli_program.py).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    (
        "init",
        "init:init",
        "Set up an installation: its data directory and first admin, whom the CLI acts as.",
    ),
    (
        "worker",
        "run:worker",
        "Claim queued exports and produce their files until stopped (SIGTERM/SIGINT).",
    ),
    (
        "scheduler",
        "run:scheduler",
        "Fire due schedules and send deliveries until stopped (SIGTERM/SIGINT).",
    ),
    ("serve", "run:serve", "Serve the HTTP API until SIGTERM/SIGINT."),
    (
        "demo",
        "run:demo",
        "Everything on the embedded default: data, queries, a worker, one export per format.",
    ),
    ("db", "upkeep:db_app", "The metadata database."),
    ("storage", "upkeep:storage_app", "The object store."),
    ("queries", "queries:queries_app", "Saved queries."),
    ("exports", "exports:exports_app", "Request, watch and download exports."),
    ("users", "admin:users_app", "Users and their roles in workspaces."),
    ("tokens", "admin:tokens_app", "API tokens (Authorization: Bearer)."),
    ("sources", "admin:sources_app", "Data sources that queries name."),
    ("reports", "reports:reports_app", "Reports: titled documents of several queries' results."),
    (
        "schedules",
        "schedules:schedules_app",
        "Schedules: an export on a cron timetable, mailed or posted to its recipients.",
    ),
    ("workspaces", "workspaces:workspaces_app", "Workspaces' settings."),
    ("members", "members:members_app", "A workspace's members."),
    ("audit", "audit:audit_app", "The audit trail: verify, prune, list."),
    (
        "approvals",
        "approvals:approvals_app",
        "Export requests of sensitive queries: list, approve, deny.",
    ),
    ("links", "links:links_app", "Public links to exports' files: create, list, revoke."),
)


class _Later(TyperCommand):
    """A command not imported yet: its name and summary, for the command list."""

    def __init__(self, name: str, where: str, summary: str) -> None:
        super().__init__(name, help=summary)
        self.where = where

    def load(self) -> _click.Command:
        module, attribute = self.where.split(":")
        defined = getattr(importlib.import_module(f"qexport.cli.{module}"), attribute)
        if isinstance(defined, typer.Typer):
            command: _click.Command = typer.main.get_group(defined)
        else:
            single = typer.Typer()
            single.command()(defined)
            command = typer.main.get_command(single)
        command.name = self.name
        return command


class _Program(TyperGroup):
    """The root command: its commands are imported when one is run or asked for its help;
    its own help lists them by their summaries, importing none."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, where, summary in COMMANDS:
            self.add_command(_Later(name, where, summary))
        self._listing = False

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Later) and not self._listing:
            command = self.commands[cmd_name] = command.load()
        return command

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=_Program,
    no_args_is_help=True,
    add_completion=False,
    help="Turn saved SQL queries into files.",
)


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


# long: the program's global options, one documented parameter each
@app.callback(invoke_without_command=True)
@_setting_flags
def main_options(
    ctx: typer.Context,
    flags: dict[str, str | None],
    user: Annotated[
        str | None,
        typer.Option(
            envvar="QEXPORT_USER",
            help="Requester user id (default: the account `qexport init` or the demo made).",
            show_default=False,
        ),
    ] = None,
    workspace: Annotated[
        str | None,
        typer.Option(
            envvar="QEXPORT_WORKSPACE",
            help="Requester workspace id (default: that account's).",
            show_default=False,
        ),
    ] = None,
    act_as: Annotated[
        str | None,
        typer.Option(
            "--as",
            metavar="<email>",
            help="Act as this member on the local database (recorded as the operator acting"
            " for them).",
            show_default=False,
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            envvar="QEXPORT_URL",
            help="A qexport server: with --token, the client commands (exports, schedules,"
            " links, approvals, queries list|delete|preview, reports list|delete) talk to it"
            " instead of the local database.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="QEXPORT_TOKEN", help="API token for --url (`qexport tokens create EMAIL`)."
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version, the data directory and who the CLI acts as."
        ),
    ] = False,
) -> None:
    from qexport.logs import configure_logging  # structlog: not for --help

    # Client commands print results, not logs; the worker turns its logs up (see `worker`).
    configure_logging(level=logging.WARNING)
    # A flag wins over its variable; both are read, checked and reported by one parser.
    settings, found, identity = _installation(
        {**os.environ, **{k: v for k, v in flags.items() if v is not None}}
    )
    if act_as is not None and url is not None:
        fail_input("--as acts on the local database; with --url, the token says who acts")
    requester = Requester(
        user or (identity.user_id if identity else "demo"),
        workspace or (identity.workspace if identity else "demo"),
    )
    ctx.obj = State(settings, requester, url=url, token=token, data_dir_found=found, act_as=act_as)
    if version:
        _print_version(settings, found, identity)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def _installation(env: dict[str, str]) -> tuple[Settings, bool, Identity | None]:
    """The settings `env` gives, with the data directory found as git finds its folder when
    none is named (cli/home.py); whether one was named or found; whom the CLI acts as there."""
    found = True
    if not env.get("QEXPORT_DATA_DIR"):
        where = find_data_dir(Path.cwd())
        found = where is not None
        if where is not None:
            env["QEXPORT_DATA_DIR"] = str(where)
    try:
        settings = Settings.from_env(env)
        return settings, found, read_identity(settings.data_dir) if found else None
    except ValueError as exc:
        fail_input(str(exc))


def _print_version(settings: Settings, found: bool, identity: Identity | None) -> None:
    from qexport import __version__

    where = settings.data_dir.resolve()
    typer.echo(f"qexport {__version__}")
    typer.echo(
        f"data directory: {where}"
        if found
        else f"data directory: none here or above ({where} if `qexport init` is run here)"
    )
    if identity is not None:
        typer.echo(f"acts as: {identity.email} in workspace {identity.workspace!r}")


def main() -> None:
    app()
