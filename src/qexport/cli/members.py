"""`qexport members list|remove`: who belongs to a workspace, and ending a membership."""

from __future__ import annotations

from typing import Annotated

import typer

from qexport.cli.admin import admin_context, note, print_members, refusals
from qexport.services import accounts as service

members_app = typer.Typer(no_args_is_help=True, help="A workspace's members.")


@members_app.command("list")
def members_list(
    ctx: typer.Context,
    workspace: Annotated[
        str | None, typer.Option(help="Workspace (default: the requester's, --workspace).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List a workspace's members: email, role, id (and whether disabled)."""
    print_members(ctx, workspace, as_json=as_json)


@members_app.command("remove")
def members_remove(
    ctx: typer.Context,
    email: str,
    workspace: Annotated[str, typer.Option(help="The workspace to remove EMAIL from.")],
) -> None:
    """Remove EMAIL from a workspace: their sessions end, their tokens for it are revoked and
    the schedules they own there are paused. The last admin cannot be removed."""
    admin = admin_context(ctx)
    schedules = admin.schedules
    with refusals():
        removed = service.remove_member(
            admin.accounts, schedules, admin.clock, email, workspace=workspace
        )
    note(
        f"removed {removed.user.email} from workspace {workspace!r}:"
        f" {removed.tokens_revoked} token(s) revoked,"
        f" {removed.schedules_paused} schedule(s) paused, sessions ended"
    )
