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

from qexport.cli.admin import refusals
from qexport.cli.common import local_deps, out, remote, server_errors, server_refusals
from qexport.domain.approvals import Decision
from qexport.domain.commands import Decide
from qexport.services.accounts import local_principal
from qexport.services.approvals import listed
from qexport.services.deciding import decide_request
from qexport.services.views import approval_view

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
    client = remote(ctx)
    if client is not None:
        with client, server_errors():
            views = client.list_approvals(pending=pending)["items"]
    else:
        st, deps = local_deps(ctx)
        acting = local_principal(deps.accounts, st.requester)
        now = deps.clock.now()
        found = listed(
            deps.approvals,
            acting.user_id,
            acting.workspace_id,
            acting.role,
            pending_at=now if pending else None,
        )
        views = [approval_view(r, now) for r in found]
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
            view["requested_by"],
            view["created_at"] or "",
            view["expires_at"] or "",
        )
    out.print(table)


def _decide(ctx: typer.Context, approval_id: str, decision: Decision, reason: str | None) -> None:
    client = remote(ctx)
    if client is not None:
        # Exit statuses as `refusals()` gives them locally: 2 for a bad reason or an unknown
        # request, 1 for a refused decision (not an admin, four eyes, already decided).
        with client, server_refusals(bad_input=(400, 404, 422)):
            decided = client.decide(approval_id, decision.value, reason)
    else:
        st, deps = local_deps(ctx)
        acting = local_principal(deps.accounts, st.requester)
        with refusals():
            request = decide_request(deps, acting, Decide(approval_id, decision, reason))
        decided = approval_view(request, deps.clock.now())
    if decided["export_id"] is not None:
        out.print(
            f"approved: export {decided['export_id']} queued for {decided['requested_by']}",
            highlight=False,
        )
    else:
        out.print(f"denied: request {decided['id']}; nothing is exported", highlight=False)


@approvals_app.command("approve")
def approvals_approve(
    ctx: typer.Context,
    approval_id: str,
    reason: Annotated[str | None, typer.Option(help="A note for the requester.")] = None,
) -> None:
    """Approve a pending request: its export is queued, with the requester's rights."""
    _decide(ctx, approval_id, Decision.APPROVE, reason)


@approvals_app.command("deny")
def approvals_deny(
    ctx: typer.Context,
    approval_id: str,
    reason: Annotated[str | None, typer.Option(help="A note for the requester.")] = None,
) -> None:
    """Deny a pending request: nothing is exported."""
    _decide(ctx, approval_id, Decision.DENY, reason)
