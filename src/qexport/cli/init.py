"""`qexport init`: an installation's data directory and its first admin account, which the
local command line then acts as (cli/home.py)."""

from __future__ import annotations

import secrets
import sys
from typing import Annotated

import typer

from qexport.cli.admin import note, refusals
from qexport.cli.common import fail_input, out, state
from qexport.cli.home import Identity, read_identity, write_identity


def init(
    ctx: typer.Context,
    email: Annotated[str, typer.Option(help="The first admin's email (they sign in with it).")],
    workspace: Annotated[str, typer.Option(help="Their workspace (created).")] = "main",
    password_stdin: Annotated[
        bool,
        typer.Option(
            "--password-stdin",
            help="Read their password from stdin (one line); else one is made and shown once.",
        ),
    ] = False,
) -> None:
    """Set up an installation: its data directory and first admin, whom the CLI acts as.

    The data directory is made here unless QEXPORT_DATA_DIR names one; the admin's password is
    made and shown once unless --password-stdin gives it."""
    from qexport.services import accounts as service

    st = state(ctx)
    settings = st.local_settings(create=True)
    known = read_identity(settings.data_dir) if settings.data_dir.is_dir() else None
    if known is not None:
        fail_input(
            f"{settings.data_dir.resolve()} is set up already: the command line acts as"
            f" {known.email} in workspace {known.workspace!r} (`qexport users create` adds"
            " people, `--as EMAIL` acts as one of them)"
        )
    password = _password(password_stdin)
    deps = st.deps(create=True)
    existing = deps.accounts.find_user(email.strip().lower())
    with refusals():
        added = service.add_user(
            deps.accounts,
            deps.clock,
            email,
            workspace=workspace,
            role="admin",
            password=password if existing is None else None,
        )
    user = added.user
    write_identity(settings.data_dir, Identity(user.id, user.email, workspace))
    note(f"set up qexport in {settings.data_dir.resolve()}")
    if existing is not None:
        out.print(f"{user.email} (an existing user, password unchanged) is admin of {workspace!r}")
    elif password_stdin:
        out.print(f"{user.email} is admin of {workspace!r}, with the password given")
    else:
        out.print(
            f"{user.email} is admin of {workspace!r}; password: {password} (shown once;"
            f" `qexport users set-password {user.email} --password-stdin` changes it)",
            soft_wrap=True,
        )
    out.print(
        f"The command line acts as {user.email} from now on (`--as EMAIL`: another member).\n"
        "Next: `qexport sources add NAME URL` for your data, then `qexport serve` and sign in"
        " at http://127.0.0.1:8000.",
        soft_wrap=True,
    )


def _password(from_stdin: bool) -> str:
    if not from_stdin:
        return secrets.token_urlsafe(12)
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        fail_input("--password-stdin read an empty password")
    return password
