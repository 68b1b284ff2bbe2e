"""`qexport approvals list|approve|deny`: export requests of sensitive queries.

Like `qexport export`, these act as the user `--user` names in `--workspace` (read from the
metadata database directly): an admin sees and decides the workspace's requests, anyone else
lists their own. An admin may not approve their own request (four eyes). The audit trail
names the operator's CLI acting as that user.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from qexport.cli.admin import refusals
from qexport.cli.common import local_deps, out
from qexport.domain.approvals import Decision, checked_reason
from qexport.domain.audit import Actor, ActorKind
from qexport.services.approvals import Decider, Rebuild, decide, listed
from qexport.services.requests import approved_export
from qexport.services.views import approval_view, iso_time

approvals_app = typer.Typer(
    no_args_is_help=True, help="Export requests of sensitive queries: list, approve, deny."
)


@approvals_app.command("list")
def approvals_list(
    ctx: typer.Context,
    pending: Annotated[bool, typer.Option(help="Only those still waiting.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Newest first: an admin sees the workspace's requests, anyone else their own."""
    st, deps = local_deps(ctx)
    user, workspace = st.requester.user_id, st.requester.workspace_id
    role = deps.accounts.role_of(workspace, user)
    now = deps.clock.now()
    found = listed(deps.approvals, user, workspace, role, pending_at=now if pending else None)
    if as_json:
        print(json.dumps({"items": [approval_view(r, now) for r in found]}, indent=2))
        return
    table = Table("id", "status", "subject", "format", "requested by", "asked", "expires")
    for r in found:
        table.add_row(
            r.id,
            r.effective_status(now).value,
            f"{r.subject_type} {r.subject_name}",
            r.format,
            r.requested_by,
            iso_time(r.created_at) or "",
            iso_time(r.expires_at) or "",
        )
    out.print(table)


def _decide(ctx: typer.Context, approval_id: str, decision: Decision, reason: str | None) -> None:
    st, deps = local_deps(ctx)
    user, workspace = st.requester.user_id, st.requester.workspace_id
    with refusals():
        decided = decide(
            deps.approval_desk(),
            deps.audit,
            deps.clock,
            Rebuild(deps.catalog, deps.accounts, approved_export(deps.catalog, deps.clock)),
            Decider(
                user,
                workspace,
                deps.accounts.role_of(workspace, user),
                Actor(ActorKind.OPERATOR, user),
            ),
            approval_id,
            decision,
            checked_reason(reason),
        )
    if decided.export_id is not None:
        out.print(
            f"approved: export {decided.export_id} queued for {decided.requested_by}",
            highlight=False,
        )
    else:
        out.print(f"denied: request {decided.id}; nothing is exported", highlight=False)


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
