"""`qexport approvals list|approve|deny`: export requests of sensitive queries.

Like `qexport exports`, these act as the user `--user` names in `--workspace` on the local
database, or as the token's user on a server (QEXPORT_URL and QEXPORT_TOKEN): an admin sees
and decides the workspace's requests, anyone else lists their own. An admin may not approve
their own request (four eyes). Locally, the audit trail names the operator's CLI acting as
that user.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from qexport.cli.client import Client
from qexport.cli.common import client_of, out, resolve_id, server_refusals
from qexport.domain.approvals import Decision

approvals_app = typer.Typer(
    no_args_is_help=True,
    help="Export requests of sensitive queries: list, approve, deny. In the local database, or"
    " on a server when QEXPORT_URL and QEXPORT_TOKEN are set.",
)


@approvals_app.command("list")
def approvals_list(
    ctx: typer.Context,
    pending: Annotated[bool, typer.Option(help="Only those still waiting.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Newest first: an admin sees the workspace's requests, anyone else their own."""
    with client_of(ctx) as client, server_refusals():
        views = client.list_approvals(pending=pending)["items"]
        names = client.member_names() if views and not as_json else {}
    if as_json:
        print(json.dumps({"items": views}, indent=2))
        return
    table = Table("id", "status", "subject", "format", "requested by", "asked", "expires")
    for view in views:
        table.add_row(
            view["id"],
            view["status"],
            f"{view['subject']['type']} {view['subject']['name']}",
            view["format"],
            names.get(view["requested_by"], view["requested_by"]),  # an email, not an id
            view["created_at"] or "",
            view["expires_at"] or "",
        )
    out.print(table)


def _decide(ctx: typer.Context, approval_id: str, decision: Decision, reason: str | None) -> None:
    # Exit status 2 for a bad reason or an unknown request, 1 for a refused decision (not an
    # admin, four eyes, already decided).
    unknown = f"no approval request {approval_id.strip()!r}"
    approval_id = resolve_id(
        ctx, approval_id, "approval request", _requests_starting, unknown=unknown, unknown_exit=2
    )
    with client_of(ctx) as client, server_refusals(bad_input=(400, 404, 422)):
        decided = client.decide(approval_id, decision.value, reason)
    if decided["export_id"] is not None:
        out.print(
            f"approved: export {decided['export_id']} queued for {decided['requested_by']}",
            highlight=False,
        )
    else:
        out.print(f"denied: request {decided['id']}; nothing is exported", highlight=False)


def _requests_starting(client: Client, prefix: str) -> list[tuple[str, str]]:
    """(id, what it asks for) of each request the caller sees whose id starts `prefix`."""
    found = client.list_approvals(pending=False)["items"]
    return [
        (str(view["id"]), f"{view['subject']['name']} {view['format']}")
        for view in found
        if str(view["id"]).startswith(prefix)
    ]


_APPROVAL_ID = typer.Argument(
    help="The request's id, or its start (4 characters or more): `approvals list` shows them."
)


@approvals_app.command("approve")
def approvals_approve(
    ctx: typer.Context,
    approval_id: Annotated[str, _APPROVAL_ID],
    reason: Annotated[str | None, typer.Option(help="A note for the requester.")] = None,
) -> None:
    """Approve a pending request: its export is queued, with the requester's rights."""
    _decide(ctx, approval_id, Decision.APPROVE, reason)


@approvals_app.command("deny")
def approvals_deny(
    ctx: typer.Context,
    approval_id: Annotated[str, _APPROVAL_ID],
    reason: Annotated[str | None, typer.Option(help="A note for the requester.")] = None,
) -> None:
    """Deny a pending request: nothing is exported."""
    _decide(ctx, approval_id, Decision.DENY, reason)
