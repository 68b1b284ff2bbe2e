"""`qexport audit verify|prune|list`: the operator's side of the audit trail.

Like `users` and `tokens`, these read the metadata database directly: whoever can reach it
administers the installation. `verify` exits 1 naming the first event of a chain that does
not match; `list` filters as the API's GET /api/v1/audit does.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from qexport.cli_common import fail_input, out, state
from qexport.domain.audit import RecordedEvent
from qexport.domain.failures import InvalidRequestError
from qexport.services import audit_trail
from qexport.services.views import iso_time

audit_app = typer.Typer(no_args_is_help=True, help="The audit trail: verify, prune, list.")


@audit_app.command("verify")
def audit_verify(
    ctx: typer.Context,
    workspace: Annotated[
        str | None, typer.Option(help="Only this workspace's chain ('*': the installation's).")
    ] = None,
) -> None:
    """Walk each chain from its anchor; exit 1 naming the first event that does not match."""
    deps = state(ctx).deps()
    checks = audit_trail.verify(deps.audit, workspace)
    broken = [c for c in checks if c.broken is not None]
    for check in broken:
        assert check.broken is not None
        e = check.broken
        out.print(
            f"chain {check.workspace_id!r}: event {e.id} ({e.action} at {iso_time(e.at)})"
            f" does not match: {check.reason}; {check.verified} event(s) before it verified",
            highlight=False,
        )
    if broken:
        raise typer.Exit(1)
    total = sum(c.verified for c in checks)
    out.print(f"{total} event(s) in {len(checks)} chain(s) verified", highlight=False)


@audit_app.command("prune")
def audit_prune(ctx: typer.Context) -> None:
    """Delete events older than QEXPORT_AUDIT_RETENTION days; every chain stays verifiable
    from its first kept event (its anchor is kept). The prune is itself an event."""
    st = state(ctx)
    deps = st.deps()
    days = st.settings.audit_retention
    pruned = audit_trail.prune(deps.audit, deps.clock, retention_days=days)
    out.print(
        f"deleted {sum(pruned.values())} event(s) older than {days} days"
        f" from {len(pruned)} chain(s)",
        highlight=False,
    )


def event_json(e: RecordedEvent) -> dict[str, Any]:
    """An event as `list --json` and the API show it (details parsed back to JSON)."""
    return {
        "id": e.id,
        "at": iso_time(e.at),
        "workspace": e.workspace_id,
        "actor": {"kind": e.actor_kind, "id": e.actor_id},
        "action": e.action,
        "target": {"kind": e.target_kind, "id": e.target_id},
        "outcome": e.outcome,
        "client_address": e.client_address,
        "details": json.loads(e.details),
        "prev_hash": e.prev_hash,
        "hash": e.hash,
    }


@audit_app.command("list")
def audit_list(
    ctx: typer.Context,
    workspace: Annotated[
        str | None, typer.Option(help="Only this workspace's events (default: every one).")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Only this actor id (a user id...).")] = None,
    action: Annotated[
        str | None, typer.Option(help="Only this action, or a prefix ending in '.' (export.).")
    ] = None,
    target: Annotated[str | None, typer.Option(help="Only this target id.")] = None,
    since: Annotated[str | None, typer.Option(help="At or after: a date or ISO time.")] = None,
    until: Annotated[str | None, typer.Option(help="Before: a time, or a whole date.")] = None,
    cursor: Annotated[str | None, typer.Option(help="The next page's cursor, as printed.")] = None,
    limit: Annotated[int, typer.Option(help="Events per page (1 to 200).")] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List events newest first, each with its details (a preview's query, parameters and
    rows shown); the last line (or `next_cursor`) continues with older ones."""
    deps = state(ctx).deps()
    try:
        narrow = audit_trail.parse_filter(
            actor=actor, action=action, target=target, since=since, until=until
        )
        before = audit_trail.decode_cursor(cursor) if cursor is not None else None
        found = audit_trail.page(deps.audit, workspace, narrow, before_id=before, limit=limit)
    except InvalidRequestError as exc:
        fail_input(f"--{exc.field}: {exc.detail}" if exc.field else str(exc))
    if as_json:
        body = {"items": [event_json(e) for e in found.items], "next_cursor": found.next_cursor}
        print(json.dumps(body, indent=2))
        return
    table = Table(
        "id", "at", "workspace", "actor", "action", "target", "outcome", "address", "details"
    )
    for e in found.items:
        table.add_row(
            str(e.id),
            iso_time(e.at) or "",
            e.workspace_id,
            f"{e.actor_kind}:{e.actor_id or ''}",
            e.action,
            f"{e.target_kind or ''}:{e.target_id or ''}",
            e.outcome,
            e.client_address or "",
            audit_trail.details_line(e.details),
        )
    out.print(table)
    if found.next_cursor:
        out.print(f"more: --cursor {found.next_cursor}", highlight=False)
