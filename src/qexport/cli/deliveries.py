"""`qexport exports deliveries ID`: who hears about an export and how far each delivery got,
in the local database or, with QEXPORT_URL and QEXPORT_TOKEN, on a server."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from qexport.cli.common import client_of, out, server_errors
from qexport.domain.exports import UNSETTLED_STATUSES


def exports_deliveries(
    ctx: typer.Context,
    export_id: Annotated[str, typer.Argument(help="The export's id or its start.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print them as JSON.")] = False,
) -> None:
    """List who hears about an export and how far each delivery got.

    Per recipient: waiting, sending, sent or failed; attempts; sent when, why, or next try."""
    from qexport.cli.common import resolve_export_id

    export_id = resolve_export_id(ctx, export_id)
    with client_of(ctx) as client, server_errors():
        items = client.list_deliveries(export_id).get("items", [])
        settled = client.get_export(export_id)["status"] not in UNSETTLED_STATUSES
    if as_json:
        print(json.dumps({"items": items}, indent=2))
        return
    if not items:
        out.print("no deliveries: nobody was to hear about this export")
        return
    table = Table("recipient", "status", "attempts", "detail")
    table.columns[0].overflow = "fold"
    table.columns[3].overflow = "fold"
    for item in items:
        ((channel, target),) = item["recipient"].items()
        detail = _detail(item, settled=settled)
        table.add_row(f"{channel} {target}", item["status"], str(item["attempts"]), detail)
    out.print(table)


def _detail(item: dict[str, Any], *, settled: bool) -> str:
    """What the status means now, in a few words."""
    status = item["status"]
    if status == "sent":
        return f"sent {_time(item['sent_at'])} ({item['outcome']})"
    if status == "failed":
        return str(item.get("last_error") or "failed")
    if status == "waiting" and item.get("next_attempt_at"):
        last = f"; last: {item['last_error']}" if item.get("last_error") else ""
        return f"next try {_time(item['next_attempt_at'])}{last}"
    if status == "sending":
        return "being sent"
    return "due now" if settled else "waits for the export to finish"


def _time(value: str | None) -> str:
    """An API instant (`2026-12-01T10:41:00.123Z`) to the second, as the pages show it."""
    if not value:
        return ""
    return f"{datetime.fromisoformat(value.replace('Z', '+00:00')):%Y-%m-%d %H:%M:%S} UTC"
