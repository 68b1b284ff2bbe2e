"""`qexport users|tokens|sources`: administering accounts and data sources.

A source URL with a password is never taken from the command line (other users see it):
`--url-stdin` or an `env:VARIABLE` reference instead.

Whoever can reach the metadata database administers it; these commands act without a token.
Bad input exits 2 with one line on stderr; tokens and passwords are never printed back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.table import Table

from qexport.cli.common import err, fail, fail_input, out, state
from qexport.config import Settings
from qexport.domain.accounts import ApiToken
from qexport.domain.failures import InvalidRequestError, NotFoundError, QExportError
from qexport.ports import AccountStore, Clock, ScheduleStore
from qexport.services import accounts as service
from qexport.services import sources as sources_service
from qexport.services.source_urls import url_has_password
from qexport.services.views import iso_time
from qexport.sources.registry import grant_words

users_app = typer.Typer(no_args_is_help=True, help="Users and their roles in workspaces.")
tokens_app = typer.Typer(no_args_is_help=True, help="API tokens (Authorization: Bearer).")
sources_app = typer.Typer(no_args_is_help=True, help="Data sources that queries name.")


@dataclass(frozen=True)
class Admin:
    accounts: AccountStore
    clock: Clock
    settings: Settings
    schedules: ScheduleStore


def admin_context(ctx: typer.Context) -> Admin:
    st = state(ctx)
    deps = st.deps()
    return Admin(deps.accounts, deps.clock, st.settings, deps.schedules)


def note(message: str) -> None:
    """Say what happened on stderr, so that stdout carries only the result."""
    err.print(message, highlight=False, soft_wrap=True)


@contextmanager
def refusals() -> Iterator[None]:
    """Bad input (exit 2) and other failures (exit 1) as one line on stderr."""
    try:
        yield
    except (InvalidRequestError, NotFoundError, ValueError) as exc:
        fail_input(str(exc))
    except QExportError as exc:
        fail(str(exc))


# ---------------------------------------------------------------- users


def _read_password() -> str:
    # One line: the line ending is not part of the password, anything else is.
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        fail_input("--password-stdin read an empty password")
    return password


@users_app.command("create")
def users_create(
    ctx: typer.Context,
    email: str,
    workspace: Annotated[str, typer.Option(help="Workspace (created if absent).")],
    role: Annotated[str, typer.Option(help="viewer, editor or admin.")],
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read a password from stdin (one line).")
    ] = False,
) -> None:
    """Make EMAIL a member of a workspace with a role, creating the user if needed; print the
    user id."""
    password = _read_password() if password_stdin else None
    admin = admin_context(ctx)
    with refusals():
        added = service.add_user(
            admin.accounts, admin.clock, email, workspace=workspace, role=role, password=password
        )
    user = added.user
    verb = "created user" if added.new_user else "user"
    where = f"new workspace {workspace!r}" if added.new_workspace else f"workspace {workspace!r}"
    note(f"{verb} {user.email} is {role} in {where}")
    if added.new_user and password is None:
        note(
            f"{user.email} has no password yet: give one with `qexport users set-password"
            f" {user.email} --password-stdin` (then they sign in to the pages), or an API"
            f" token with `qexport tokens create {user.email}`"
        )
    print(user.id)


@users_app.command("list")
def users_list(
    ctx: typer.Context,
    workspace: Annotated[
        str | None, typer.Option(help="Workspace (default: the requester's, --workspace).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List a workspace's members and their roles (as `members list`)."""
    print_members(ctx, workspace, as_json=as_json)


def print_members(ctx: typer.Context, workspace: str | None, *, as_json: bool) -> None:
    """A workspace's members: email, role, id and whether disabled, as a table or JSON."""
    admin = admin_context(ctx)
    name = workspace or state(ctx).requester.workspace_id
    with refusals():
        members = service.list_members(admin.accounts, name)
    rows: list[dict[str, str | bool]] = [
        {
            "id": user.id,
            "email": user.email,
            "role": m.role.value,
            "workspace": m.workspace_id,
            "disabled": user.disabled,
        }
        for user, m in members
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("email", "role", "id", "", title=f"workspace {name}")
    for user, m in members:
        table.add_row(user.email, m.role.value, user.id, "disabled" if user.disabled else "")
    out.print(table)


@users_app.command("set-password")
def users_set_password(
    ctx: typer.Context,
    email: str,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin (one line).")
    ] = False,
) -> None:
    """Give EMAIL a new password (read from stdin); every session they have ends."""
    if not password_stdin:
        fail_input("give --password-stdin and the password on stdin (never on the command line)")
    password = _read_password()
    admin = admin_context(ctx)
    with refusals():
        user = service.change_password(admin.accounts, email, password)
    note(f"changed the password of {user.email}; their sessions have ended")


@users_app.command("disable")
def users_disable(ctx: typer.Context, email: str) -> None:
    """Disable EMAIL: no sign-in; their sessions and API tokens stop working at once and the
    schedules they own are paused."""
    admin = admin_context(ctx)
    with refusals():
        done = service.set_disabled(
            admin.accounts, admin.schedules, admin.clock, email, disabled=True
        )
    state_now = "disabled" if done.changed else "was already disabled"
    note(f"{done.user.email} {state_now}; {done.schedules_paused} schedule(s) paused")


@users_app.command("enable")
def users_enable(ctx: typer.Context, email: str) -> None:
    """Enable EMAIL again: they can sign in, and their unrevoked tokens work again (their
    schedules stay paused until resumed)."""
    admin = admin_context(ctx)
    with refusals():
        done = service.set_disabled(
            admin.accounts, admin.schedules, admin.clock, email, disabled=False
        )
    note(f"{done.user.email} enabled" if done.changed else f"{done.user.email} was not disabled")


# ---------------------------------------------------------------- tokens


@tokens_app.command("create")
def tokens_create(
    ctx: typer.Context,
    email: str,
    workspace: Annotated[
        str | None, typer.Option(help="Workspace (default: the user's only one).")
    ] = None,
) -> None:
    """Create an API token for EMAIL and print only the token (it is shown once)."""
    admin = admin_context(ctx)
    with refusals():
        issued = service.issue_token(admin.accounts, admin.clock, email, workspace=workspace)
    record = issued.record
    note(f"token {record.id} for {email.strip().lower()} in workspace {record.workspace_id}")
    print(issued.token)


@tokens_app.command("revoke")
def tokens_revoke(ctx: typer.Context, token_id: str) -> None:
    """Revoke a token by its id (shown by `tokens list`); it stops working at once."""
    admin = admin_context(ctx)
    with refusals():
        revoked = service.revoke_token(admin.accounts, admin.clock, token_id)
    shown = service.token_id_of(token_id)
    note(f"revoked token {shown}" if revoked else f"token {shown} was already revoked")


def _token_row(token: ApiToken) -> dict[str, str | None]:
    return {
        "id": token.id,
        "workspace": token.workspace_id,
        "created_at": iso_time(token.created_at),
        "last_used_at": iso_time(token.last_used_at),
        "revoked_at": iso_time(token.revoked_at),
    }


@tokens_app.command("list")
def tokens_list(
    ctx: typer.Context, email: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List a user's tokens (ids and times; the tokens themselves are not stored)."""
    admin = admin_context(ctx)
    with refusals():
        rows = [_token_row(t) for t in service.list_tokens(admin.accounts, email)]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("id", "workspace", "created", "last used", "revoked", box=None)
    for row in rows:
        # Minutes are enough on screen (the JSON has more): the table fits 80 columns.
        table.add_row(*((row[k] or "")[:16].replace("T", " ") for k in row))
    out.print(table)


# ---------------------------------------------------------------- sources


def _read_url() -> str:
    url = sys.stdin.readline().strip()
    if not url:
        fail_input("--url-stdin read an empty URL")
    return url


def _check_source_input(url: str | None, *, url_stdin: bool, workspace: str) -> None:
    """The URL given once (an argument, or on stdin), never with a password on the command
    line, and the workspace the source belongs to."""
    if url_stdin == (url is not None):
        fail_input("give the URL as an argument or with --url-stdin (one of them)")
    if url is not None and url_has_password(url):
        fail_input(
            "a password on the command line is visible to other users: give the URL with"
            " --url-stdin or as env:VARIABLE"
        )
    if not workspace:
        fail_input("--workspace names the workspace the source belongs to")


@sources_app.command("add")
def sources_add(
    ctx: typer.Context,
    name: str,
    url: Annotated[
        str | None,
        typer.Argument(
            help="duckdb:///absolute/path.duckdb, postgresql://user@host/db (no password"
            " here: use --url-stdin), or env:VARIABLE (read by each worker)."
        ),
    ] = None,
    workspace: Annotated[
        str, typer.Option("--workspace", help="The workspace the source belongs to.")
    ] = "",
    share_with: Annotated[
        list[str] | None,
        typer.Option("--share-with", help="Another workspace that may use it (`*`: all)."),
    ] = None,
    url_stdin: Annotated[
        bool, typer.Option("--url-stdin", help="Read the URL (with its password) from stdin.")
    ] = False,
    allow_privileged_role: Annotated[
        bool,
        typer.Option(
            "--allow-privileged-role",
            help="Accept a PostgreSQL role that may do more than read (logged at every start).",
        ),
    ] = False,
) -> None:
    """Register a data source for a workspace; a PostgreSQL source's role is checked first.

    Workers already running find it at their next export that names it.
    """
    from qexport import bootstrap

    _check_source_input(url, url_stdin=url_stdin, workspace=workspace)
    given = _read_url() if url is None else url
    admin = admin_context(ctx)
    settings = admin.settings
    request = sources_service.SourceRequest(
        name, given, workspace, frozenset(share_with or ()), allow_privileged_role
    )
    with refusals():
        findings = sources_service.register_source(
            admin.accounts,
            admin.clock,
            settings,
            request,
            check_role=lambda n, u, allow: bootstrap.check_source_role(n, u, settings, allow),
            identify=lambda n, u: bootstrap.source_identity(n, u, settings),
        )
    for finding in findings:
        note(f"warning: the role of source {name} {finding} (allowed by --allow-privileged-role)")
    shown = sources_service.shown_url(name, given, "", owner=workspace)
    note(f"registered source {name} ({shown}) for workspace {workspace}")


OwnerOption = Annotated[
    str | None,
    typer.Option(
        "--owner",
        help="The workspace that registered the source, when several have one of that name.",
    ),
]


def _share(
    ctx: typer.Context, name: str, workspace: str, owner: str | None, *, shared: bool
) -> None:
    from qexport import bootstrap

    admin = admin_context(ctx)
    settings = admin.settings
    with refusals():
        changed = sources_service.share_source(
            admin.accounts,
            settings,
            name,
            workspace,
            shared=shared,
            owner=owner,
            identify=lambda n, u: bootstrap.source_identity(n, u, settings),
            clock=admin.clock,
        )
    verb = "may use" if shared else "may no longer use"
    note(f"workspace {workspace} {verb} source {name}" + ("" if changed else " (unchanged)"))


@sources_app.command("share")
def sources_share(ctx: typer.Context, name: str, workspace: str, owner: OwnerOption = None) -> None:
    """Let WORKSPACE (`*`: every workspace) use a registered source, under its name; refused
    when WORKSPACE already has a source of that name."""
    _share(ctx, name, workspace, owner, shared=True)


@sources_app.command("unshare")
def sources_unshare(
    ctx: typer.Context, name: str, workspace: str, owner: OwnerOption = None
) -> None:
    """Stop WORKSPACE using a registered source; its exports on it fail access_lost."""
    _share(ctx, name, workspace, owner, shared=False)


@sources_app.command("list")
def sources_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """List the data sources, built-in, configured and registered, with who may use them
    (passwords masked)."""
    admin = admin_context(ctx)
    with refusals():
        views = sources_service.all_sources(admin.accounts, admin.settings)
    rows = [
        {
            "name": v.name,
            "owner": v.owner,
            "kind": v.kind,
            "url": v.url,
            "origin": v.origin,
            "workspaces": sorted(v.workspaces),
            "allow_privileged_role": v.allow_privileged_role,
        }
        for v in views
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("name", "owner", "url", "origin", "workspaces")
    for view in views:
        owner = view.owner if view.origin == "registered" else ""
        table.add_row(view.name, owner or "-", view.url, view.origin, grant_words(view.workspaces))
    out.print(table)
