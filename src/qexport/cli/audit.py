"""`qexport audit verify|prune|checkpoint|list`: the operator's side of the audit trail.

Like `users` and `tokens`, these read the metadata database directly: whoever can reach it
administers the installation. `verify` needs the secret (QEXPORT_SECRET_KEY) and the object
store, where the chains' checkpoints are: it exits 1 naming the first event of a chain that
does not match, an anchor no prune made, or what a checkpoint holds that the chain lacks;
`list` filters as the API's GET /api/v1/audit does.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from qexport.cli.common import fail, fail_input, out, state
from qexport.domain.audit import RecordedEvent, Stretch
from qexport.domain.failures import InvalidRequestError, QExportError
from qexport.services import audit_trail
from qexport.services.audit_checkpoints import Checkpointer, CheckpointPass
from qexport.services.views import iso_time

audit_app = typer.Typer(no_args_is_help=True, help="The audit trail: verify, prune, list.")


@audit_app.command("verify")
def audit_verify(
    ctx: typer.Context,
    workspace: Annotated[
        str | None, typer.Option(help="Only this workspace's chain ('*': the installation's).")
    ] = None,
) -> None:
    """Walk each chain from its anchor with the secret, and compare it with its newest
    checkpoint in storage; exit 1 naming what does not match and where."""
    st = state(ctx)
    deps = st.deps()
    try:
        reports = audit_trail.verify(
            deps.audit,
            deps.objects,
            workspace,
            checkpoint_every=st.settings.audit_checkpoint_every,
        )
    except QExportError as exc:
        fail(f"cannot verify the audit trail: {exc}", 1)
    for report in reports:
        out.print(_verdict(report), highlight=False)
    if not all(report.ok for report in reports):
        raise typer.Exit(1)
    total = sum(r.check.verified for r in reports)
    out.print(f"{total} event(s) in {len(reports)} chain(s) verified", highlight=False)


def _verdict(report: audit_trail.ChainReport) -> str:
    """One chain's line: what is wrong (first), how its events are keyed, its checkpoint."""
    check = report.check
    line = f"chain {check.workspace_id!r}: "
    if check.broken is not None:
        e = check.broken
        line += (
            f"event {e.id} (sequence {e.seq}, {e.action} at {iso_time(e.at)}) does not match:"
            f" {check.reason}; {check.verified} event(s) before it verified"
        )
    elif report.finding is not None:
        line += f"{report.finding}; {check.verified} event(s) verified"
    else:
        line += f"{check.verified} event(s) verified"
    if check.stretches:
        line += f" ({'; '.join(map(_stretch, check.stretches))})"
    if report.ok and report.checkpoint is not None and report.checkpoint.checkpoint is not None:
        said = report.checkpoint.checkpoint
        line += f", holding its checkpoint of {iso_time(said.written_at)} (sequence {said.seq})"
    if report.note is not None:
        line += f"; {report.note}"
    return line


def _stretch(stretch: Stretch) -> str:
    span = (
        f"sequence {stretch.first_seq}"
        if stretch.first_seq == stretch.last_seq
        else f"sequences {stretch.first_seq}-{stretch.last_seq}"
    )
    if stretch.key_id is None:
        return f"{span}: SHA-256, unkeyed (from before keys)"
    return f"{span}: HMAC-SHA256, key {stretch.key_id}"


@audit_app.command("prune")
def audit_prune(ctx: typer.Context) -> None:
    """Delete events older than QEXPORT_AUDIT_RETENTION days; every chain stays verifiable
    from its first kept event (its anchor is kept, named by an `audit.pruned` event in the
    chain), and each pruned chain is checkpointed. The prune is itself an event."""
    st = state(ctx)
    deps = st.deps()
    days = st.settings.audit_retention
    done = audit_trail.prune(
        deps.audit,
        deps.objects,
        deps.clock,
        retention_days=days,
        checkpoint_every=st.settings.audit_checkpoint_every,
    )
    out.print(
        f"deleted {sum(done.deleted.values())} event(s) older than {days} days"
        f" from {len(done.deleted)} chain(s)",
        highlight=False,
    )
    _checkpoints_said(done.checkpoints)


@audit_app.command("checkpoint")
def audit_checkpoint(ctx: typer.Context) -> None:
    """Checkpoint every chain's head to the object store now (workers do it every
    QEXPORT_AUDIT_CHECKPOINT_EVERY for the chains that moved)."""
    st = state(ctx)
    deps = st.deps()
    checkpointer = Checkpointer(
        deps.audit, deps.objects, deps.clock, st.settings.audit_checkpoint_every
    )
    try:
        done = checkpointer.run_once(force=True)
    except QExportError as exc:
        fail(f"cannot checkpoint the audit trail: {exc}", 1)
    _checkpoints_said(done)


def _checkpoints_said(done: CheckpointPass) -> None:
    out.print(f"wrote {len(done.written)} checkpoint(s) to storage", highlight=False)
    for workspace_id, reason in done.failed.items():
        out.print(f"chain {workspace_id!r}: no checkpoint written: {reason}", highlight=False)
    if done.failed:
        raise typer.Exit(1)


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
        "seq": e.seq,
        "key_id": e.key_id,
        "prev_hash": e.prev_hash,
        "hash": e.hash,
    }


@audit_app.command("list")
def audit_list(  # noqa: PLR0913 - one per command-line option
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
