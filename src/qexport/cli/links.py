"""`qexport links`: public links to an export's file, created, listed and revoked by their
creator or a workspace admin, in the local database or on a server (QEXPORT_URL)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from qexport.cli.client import Client
from qexport.cli.common import client_of, out, resolve_export_id, resolve_id, server_refusals
from qexport.services.exports import MAX_CANDIDATES

links_app = typer.Typer(
    no_args_is_help=True,
    help="Public links to exports' files: create, list, revoke. In the local database, or on a"
    " server when QEXPORT_URL and QEXPORT_TOKEN are set.",
)

_EXPORT_ID = typer.Argument(help="The export's id or its start (4 characters or more).")


@links_app.command("create")
def links_create(
    ctx: typer.Context,
    export_id: Annotated[str, _EXPORT_ID],
    days: Annotated[
        int | None,
        typer.Option(
            "--days",
            min=1,
            help="Days it works (default: until the file expires).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Make a public URL for a file you could download now.

    Anyone with it can download the file until it expires or is revoked; it is shown only
    this once."""
    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_refusals():
        view = client.create_link(export_id, days)
    if as_json:
        print(json.dumps(view, indent=2))
        return
    out.print(view["url"], highlight=False, soft_wrap=True)
    out.print(
        f"link {view['id']}, until {view['expires_at']}; revoke it: qexport links revoke"
        f" {view['id']}",
        highlight=False,
        soft_wrap=True,
    )


@links_app.command("list")
def links_list(
    ctx: typer.Context,
    export_id: Annotated[str, _EXPORT_ID],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List an export's live links that you may revoke.

    Yours, or every one for a workspace admin; oldest first; their URLs are not shown
    again."""
    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_refusals():
        items: list[dict[str, Any]] = client.list_links(export_id)["items"]
        names = client.member_names() if items and not as_json else {}
    if as_json:
        print(json.dumps({"items": items}, indent=2))
        return
    if not items:
        out.print(f"no live links; make one: qexport links create {export_id[:8]}")
        return
    table = Table("id", "created by", "created (UTC)", "expires (UTC)", "last used", box=None)
    for item in items:
        table.add_row(
            item["id"],
            names.get(item["created_by"], item["created_by"]),  # an email, not an id
            _minute(item["created_at"]),
            _minute(item["expires_at"]),
            _minute(item["last_used_at"]) or "never",
        )
    out.print(table)


def _minute(instant: str | None) -> str:
    return instant.replace("T", " ")[:16] if instant else ""


@links_app.command("revoke")
def links_revoke(
    ctx: typer.Context,
    link_id: Annotated[
        str,
        typer.Argument(
            help="The link's id, or the start of a live link's (4 characters or more), as"
            " `links list` shows it."
        ),
    ],
) -> None:
    """Revoke a link: it stops working at once (revoking it again by its id is no error)."""
    unknown = f"no link {link_id.strip()!r}"
    link_id = resolve_id(ctx, link_id, "link", _links_starting, unknown=unknown)
    with client_of(ctx) as client, server_refusals():
        client.revoke_link(link_id)
    out.print(f"link {link_id} revoked", highlight=False, soft_wrap=True)


def _links_starting(client: Client, prefix: str) -> list[tuple[str, str]]:
    """(id, the export it shares) of each live link the caller may revoke whose id starts
    with `prefix`."""
    found = client.links_starting(prefix, MAX_CANDIDATES + 1)
    return [(str(view["id"]), f"export {str(view['export_id'])[:8]}") for view in found]
