"""The demo's schedule: a weekly export pushed to a webhook receiver that checks signatures.

The receiver runs in the demo's own process on 127.0.0.1 and verifies `X-QExport-Signature`
exactly as a real receiver would, from the documented scheme: HMAC-SHA256 with the
workspace's signing key over `"<t>." + body`, and a timestamp no older than five minutes.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from zoneinfo import ZoneInfo

from rich.console import Console

from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.domain.queries import Query
from qexport.domain.schedules import (
    Channel,
    Delivery,
    DeliveryStatus,
    Recipient,
    Schedule,
    next_due,
)
from qexport.ports import Clock, ScheduleStore

DEMO_CRON = "0 8 * * 1"
DEMO_TIMEZONE = "Europe/Berlin"
DEMO_HOOK_PATH = "/demo-webhook"
SIGNATURE_TOLERANCE_SECONDS = 300  # older signatures are refused as possible replays
RECEIVER_ADDRESS = "127.0.0.1"


def receiver_allowed(settings: Settings) -> Settings:
    """The settings the demo's deliveries are sent with: the egress policy refuses loopback,
    so they open exactly the receiver's address (the demo's API keeps the default policy)."""
    return replace(settings, egress_allow=f"{RECEIVER_ADDRESS}/32")


def signature_valid(key: str, header: str, body: bytes, *, now: float) -> bool:
    """Check `t=<unix seconds>,v1=<hex>` against the body, as a webhook receiver should."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    timestamp, given = fields.get("t", ""), fields.get("v1", "")
    if not timestamp.isdigit() or not given:
        return False
    if abs(now - int(timestamp)) > SIGNATURE_TOLERANCE_SECONDS:
        return False
    expected = hmac.new(key.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), given)


class DemoReceiver:
    """A webhook receiver on 127.0.0.1 (a free port) in a background thread. It answers 204
    to a correctly signed POST and 401 otherwise, and remembers, per delivery id, whether the
    signature was valid; with a console, it prints a line for each webhook."""

    def __init__(self, key: Callable[[], str], console: Console | None = None) -> None:
        self._key = key
        self.console = console
        self.verified: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((RECEIVER_ADDRESS, 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="demo-webhook", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{RECEIVER_ADDRESS}:{self._server.server_address[1]}{DEMO_HOOK_PATH}"

    def received(self, delivery_id: str, header: str, body: bytes) -> bool:
        valid = signature_valid(self._key(), header, body, now=time.time())
        with self._lock:
            self.verified[delivery_id] = valid
        if self.console is not None:
            verdict = "signature verified" if valid else "signature INVALID (refused)"
            self.console.print(
                f"webhook received: delivery {delivery_id}, {verdict}",
                highlight=False,
                soft_wrap=True,
            )
        return valid

    def __enter__(self) -> DemoReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(receiver: DemoReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            ok = self.path == DEMO_HOOK_PATH and receiver.received(
                self.headers.get("X-QExport-Delivery", ""),
                self.headers.get("X-QExport-Signature", ""),
                body,
            )
            self.send_response(204 if ok else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the demo prints its own line per webhook

    return Handler


def register_demo_schedule(
    schedules: ScheduleStore, clock: Clock, requester: Requester, query: Query, webhook: str
) -> Schedule:
    """Save the weekly schedule (once), its webhook pointed at this run's receiver."""
    recipients = (Recipient(Channel.WEBHOOK, webhook),)
    for schedule in schedules.list_schedules(requester.workspace_id):
        if schedule.subject_id == query.id and schedule.cron == DEMO_CRON:
            moved = replace(schedule, recipients=recipients)
            schedules.update_schedule(moved)
            return moved
    now = clock.now()
    return schedules.add_schedule(
        Schedule(
            id=str(uuid.uuid4()),
            workspace_id=requester.workspace_id,
            owner=requester.user_id,
            subject_type="query",
            subject_id=query.id,
            format="csv",
            parameters={},
            cron=DEMO_CRON,
            timezone=DEMO_TIMEZONE,
            recipients=recipients,
            next_due_at=next_due(DEMO_CRON, DEMO_TIMEZONE, now),
            created_at=now,
        )
    )


def delivery_line(
    schedule: Schedule, subject: str, delivery: Delivery, receiver: DemoReceiver
) -> str:
    """One line saying what became of a delivery of the demo schedule."""
    if delivery.status is DeliveryStatus.SENT:
        verdict = receiver.verified.get(delivery.id)
        what = "delivered" + (", signature verified" if verdict else ", signature NOT verified")
    else:
        what = delivery.status.value + (f" ({delivery.last_error})" if delivery.last_error else "")
    line = f"schedule {subject!r} -> {delivery.recipient.channel.value} {what}"
    if schedule.next_due_at is not None:
        local = schedule.next_due_at.astimezone(ZoneInfo(schedule.timezone))
        line += f", next run {local:%a %Y-%m-%d %H:%M} {schedule.timezone}"
    return line
