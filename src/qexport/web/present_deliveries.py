"""How an export's deliveries, its public links and a schedule's runs read on a page."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from qexport.domain.accounts import Link, Principal
from qexport.domain.exports import ExportRecord
from qexport.domain.schedules import Channel, Delivery, DeliveryStatus, Outcome
from qexport.web.present import ExportRow, export_row, human_duration, when

CHANNELS = {
    Channel.EMAIL: "Email",
    Channel.WEBHOOK: "Webhook",
    Channel.SLACK: "Slack",
    Channel.TEAMS: "Teams",
}
DELIVERY_LABELS = {
    DeliveryStatus.WAITING: "Waiting",
    DeliveryStatus.SENDING: "Sending",
    DeliveryStatus.SENT: "Sent",
    DeliveryStatus.FAILED: "Failed",
}
_TOLD = {
    Outcome.FILE: "with the file's link",
    Outcome.FAILURE: "telling the export failed",
    Outcome.EXPIRED: "telling the file expired",
}


@dataclass(frozen=True)
class DeliveryRow:
    """One recipient's delivery as the pages show it."""

    id: str
    channel: str  # "Email", "Webhook", ...
    recipient: str  # masked for those who may not see it whole
    status: str  # waiting, sending, sent, failed (the badge's class)
    label: str  # its words
    state: str  # what that means now: "for the export to finish", "at ... with the file's link"
    reason: str  # failed: why; waiting to retry: why the last attempt failed
    attempts: int
    next_try: str
    resent: str  # "sent again by ann@example.com at ..." or ""
    can_send_again: bool

    @property
    def unsent(self) -> bool:
        return self.status in ("waiting", "sending")


def delivery_row(
    delivery: Delivery,
    record: ExportRecord,
    now: datetime,
    *,
    full: bool,
    can_send_again: bool = False,
    email_of: Callable[[str | None], str] = lambda user: user or "",
) -> DeliveryRow:
    """`full`: the recipient as written (the export's owner and admins); masked otherwise,
    exactly as the API masks a schedule's recipients."""
    shown = delivery.recipient if full else delivery.recipient.masked()
    state, next_try, reason = "", "", ""
    if delivery.status is DeliveryStatus.WAITING:
        if not record.settled:
            state, next_try = "for the export to finish", "when the export finishes"
        elif delivery.next_attempt_at is not None and delivery.next_attempt_at > now:
            left = human_duration(delivery.next_attempt_at - now)
            state, next_try = "to try again", f"{when(delivery.next_attempt_at)} (in {left})"
        else:
            state, next_try = "to be sent", "now"
        if delivery.attempt and delivery.last_error:
            reason = f"last attempt: {delivery.last_error}"
    elif delivery.status is DeliveryStatus.SENDING:
        state, next_try = f"attempt {delivery.attempt}", "now"
    elif delivery.status is DeliveryStatus.SENT:
        told = _TOLD.get(delivery.outcome, "") if delivery.outcome else ""
        state = f"{when(delivery.sent_at)} {told}".strip()
    else:
        reason = delivery.last_error or "failed"
    resent = (
        f"sent again by {email_of(delivery.resent_by)} at {when(delivery.resent_at)}"
        if delivery.resent_at
        else ""
    )
    return DeliveryRow(
        id=delivery.id,
        channel=CHANNELS.get(delivery.recipient.channel, delivery.recipient.channel.value),
        recipient=shown.target,
        status=delivery.status.value,
        label=DELIVERY_LABELS[delivery.status],
        state=state,
        reason=reason,
        attempts=delivery.attempt,
        next_try=next_try,
        resent=resent,
        can_send_again=can_send_again and delivery.status is DeliveryStatus.FAILED,
    )


def summary(rows: Sequence[DeliveryRow]) -> str:
    """`2 sent, 1 failed` (in the order deliveries go)."""
    counts = Counter(row.status for row in rows)
    order = ("sent", "failed", "sending", "waiting")
    return ", ".join(f"{counts[s]} {s}" for s in order if counts[s])


@dataclass(frozen=True)
class LinkRow:
    id: str
    created_by: str
    created: str
    expires: str
    last_used: str
    delivered_to: str  # the recipient whose message carries it ("" for a link made by hand)


def link_row(
    link: Link,
    record: ExportRecord,
    email_of: Callable[[str | None], str],
    delivered_to: str = "",
) -> LinkRow:
    return LinkRow(
        id=link.id,
        created_by=email_of(link.created_by),
        created=when(link.created_at),
        expires=when(link.expires_at or record.expires_at),
        last_used=when(link.last_used_at) if link.last_used_at else "never",
        delivered_to=delivered_to,
    )


@dataclass(frozen=True)
class RunRow:
    """A schedule's fired due time: its export's status and how its deliveries went."""

    due: str  # on the schedule's wall clock
    export: ExportRow
    href: str | None  # the export's page, for those who may see it
    deliveries: list[DeliveryRow]
    summary: str


def run_row(
    due_at: datetime,
    record: ExportRecord,
    deliveries: Sequence[Delivery],
    now: datetime,
    *,
    zone: str,
    principal: Principal,
    full: bool,
) -> RunRow:
    """`full`: recipients as written (the schedule's owner and admins), masked otherwise; the
    export's page is linked for those who may see it (its requester and admins)."""
    rows = [delivery_row(d, record, now, full=full) for d in deliveries]
    sees_export = record.requested_by == principal.user_id or principal.sees_workspace
    local = due_at.astimezone(ZoneInfo(zone))
    return RunRow(
        due=f"{local:%a %Y-%m-%d %H:%M %Z}",
        export=export_row(record, now),
        href=f"/exports/{record.id}" if sees_export else None,
        deliveries=rows,
        summary=summary(rows),
    )
