"""`qexport links`: public links to an export's file, created, listed and revoked by their
creator or a workspace admin, in the local database or on a server (QEXPORT_URL)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table

from qexport.cli.common import fail, fail_input, local_deps, out, remote, server_errors
from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError, QExportError

if TYPE_CHECKING:
    from qexport.container import Container

links_app = typer.Typer(
    no_args_is_help=True,
    help="Public links to exports' files: create, list, revoke. In the local database, or on a"
    " server when QEXPORT_URL and QEXPORT_TOKEN are set.",
)

_EXPORT_ID = typer.Argument(help="The export's id or its start (4 characters or more).")


def _local(ctx: typer.Context) -> tuple[Container, Principal]:
    """The local database and who acts in it, as `schedules` does: a member with their role
    in a workspace with accounts; in one without, the command line administers its own."""
    from qexport.services.accounts import local_principal

    st, deps = local_deps(ctx)
    return deps, local_principal(deps.accounts, st.requester)


def _refused(exc: QExportError) -> NoReturn:
    if isinstance(exc, InvalidRequestError):
        fail_input(exc.detail)
    fail(str(exc))


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
    from qexport.cli.common import resolve_export_id

    export_id = resolve_export_id(ctx, export_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            view = client.create_link(export_id, days)
    else:
        from qexport.domain.commands import CreateLink
        from qexport.services.links import create_link
        from qexport.services.views import iso_time

        deps, principal = _local(ctx)
        if not deps.settings.public_base_url:
            # A server makes its links for its own address; the command line knows none, and
            # a link without one is no URL anyone can open: made nowhere, refused here.
            fail_input(
                "set QEXPORT_PUBLIC_BASE_URL (or --public-base-url) to the address people reach"
                " `qexport serve` at; a public link's URL starts with it"
            )
        try:
            created = create_link(deps, principal, CreateLink(export_id, days))
        except QExportError as exc:
            _refused(exc)
        view = {
            "id": created.link.id,
            "url": created.url,
            "expires_at": iso_time(created.expires_at),
        }
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
    from qexport.cli.common import resolve_export_id

    export_id = resolve_export_id(ctx, export_id)
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            items: list[dict[str, Any]] = client.list_links(export_id)["items"]
    else:
        from qexport.services.links import list_live_links
        from qexport.services.views import iso_time

        deps, principal = _local(ctx)
        try:
            record, found = list_live_links(
                deps.exports, deps.accounts, deps.clock, principal, export_id
            )
        except QExportError as exc:
            _refused(exc)
        items = [
            {
                "id": link.id,
                "created_by": link.created_by,
                "created_at": iso_time(link.created_at),
                "expires_at": iso_time(link.expires_at or record.expires_at),
                "last_used_at": iso_time(link.last_used_at) if link.last_used_at else None,
            }
            for link in found
        ]
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
            item["created_by"],
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
    link_id: Annotated[str, typer.Argument(help="The link's id (links list).")],
) -> None:
    """Revoke a link: it stops working at once (revoking it again is no error)."""
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            client.revoke_link(link_id)
    else:
        from qexport.domain.commands import RevokeLink
        from qexport.services.links import revoke_link

        deps, principal = _local(ctx)
        try:
            revoke_link(deps, principal, RevokeLink(link_id))
        except QExportError as exc:
            _refused(exc)
    out.print(f"link {link_id} revoked", highlight=False, soft_wrap=True)
