"""`qexport workspaces timezone W [ZONE]`: the time zone a workspace's reports are dated in."""

from __future__ import annotations

from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from qexport.cli_admin import admin_context, note
from qexport.cli_common import fail_input

workspaces_app = typer.Typer(no_args_is_help=True, help="Workspaces' settings.")

MAX_ZONE_CHARS = 64  # the column's width; every IANA name fits


def _check_zone(zone: str) -> str:
    """The IANA name if zoneinfo knows it; exit 2 otherwise."""
    if not zone or len(zone) > MAX_ZONE_CHARS or zone != zone.strip():
        fail_input(f"{zone!r} is not a time zone name (e.g. Europe/Paris, UTC)")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        fail_input(f"unknown time zone {zone!r} (an IANA name, e.g. Europe/Paris, UTC)")
    return zone


@workspaces_app.command("timezone")
def workspaces_timezone(
    ctx: typer.Context,
    workspace: str,
    zone: Annotated[
        str | None, typer.Argument(help="An IANA name; leave out to print the current one.")
    ] = None,
) -> None:
    """Print, or set, the time zone the workspace's reports show their generation time in."""
    accounts = admin_context(ctx).accounts
    if not accounts.workspace_exists(workspace):
        fail_input(
            f"no workspace {workspace!r} with accounts"
            f" (qexport users create EMAIL --workspace {workspace} ...)"
        )
    if zone is None:
        print(accounts.workspace_timezone(workspace))
        return
    accounts.set_workspace_timezone(workspace, _check_zone(zone))
    note(f"workspace {workspace} now dates its reports in {zone}")
