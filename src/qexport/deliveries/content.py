"""What a delivery says: the email and the webhook payload for a settled export.

A succeeded export is delivered as its public link (and, when small enough, the file
itself); a failed one as its failure code and reason; one that expired before it could be
delivered as a short notice. The delivery id travels with both as the idempotency key.
"""

from __future__ import annotations

import json
import mimetypes
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Any

from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import readable_detail
from qexport.domain.humanize import human_size
from qexport.domain.schedules import Delivery, Outcome
from qexport.services.views import iso_time

DELIVERY_HEADER = "X-QExport-Delivery"
_STATUS = {Outcome.FILE: "succeeded", Outcome.FAILURE: "failed", Outcome.EXPIRED: "expired"}


@dataclass(frozen=True)
class Notice:
    """One delivery of one settled export; `link` is set for the outcome `file` only."""

    delivery: Delivery
    export: ExportRecord
    outcome: Outcome
    link: str | None = None
    link_expires_at: datetime | None = None  # sooner than the file's by the workspace's policy
    # The file goes out neither linked nor attached: made without an approval from what the
    # workspace's policy marks sensitive since (services/links.py).
    withheld: bool = False


def outcome_of(export: ExportRecord, now: datetime) -> Outcome:
    if export.status is Status.FAILED:
        return Outcome.FAILURE
    if export.expires_at is not None and now >= export.expires_at:
        return Outcome.EXPIRED
    return Outcome.FILE


def readable_time(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "unknown"


def _subject_line(export: ExportRecord) -> str:
    return f'{export.subject_type} "{export.subject_name}"'


def email_subject(notice: Notice) -> str:
    export = notice.export
    if notice.outcome is Outcome.FILE:
        rows = export.row_count or 0
        return f"Export ready: {export.subject_name} ({rows:,} rows, {export.format})"
    if notice.outcome is Outcome.FAILURE:
        return f"Export failed: {export.subject_name}"
    return f"Export expired before delivery: {export.subject_name}"


def _link_life(notice: Notice) -> str:
    ends = notice.link_expires_at
    file_ends = notice.export.expires_at
    if ends is None or file_ends is None or ends >= file_ends:
        return f"The link works until the file expires ({readable_time(file_ends)})."
    return f"The link works until {readable_time(ends)} (the workspace's policy)."


def email_text(notice: Notice) -> str:
    export = notice.export
    if notice.outcome is Outcome.FILE:
        intro = f"Your export of the {_subject_line(export)} is ready."
        lines = [
            f"File:      {export.filename} ({export.format})",
            f"Rows:      {export.row_count or 0:,}",
            f"Size:      {human_size(export.size_bytes or 0)}",
            f"Expires:   {readable_time(export.expires_at)}",
            "",
            *(
                [
                    f"Download:  {notice.link}",
                    _link_life(notice),
                ]
                if notice.link
                else [
                    "Download:  sign in to qexport and open the export (this workspace's policy",
                    "           marks what it was made from sensitive)."
                    if notice.withheld
                    else "           allows no public links).",
                ]
            ),
        ]
    elif notice.outcome is Outcome.FAILURE:
        intro = f"The export of the {_subject_line(export)} failed; no file was made."
        lines = [
            f"Format:    {export.format}",
            f"Code:      {export.failure_code or 'internal'}",
            f"Reason:    {readable_detail(export.failure_detail) or 'unknown'}",
        ]
    else:
        intro = (
            f"The export of the {_subject_line(export)} expired at"
            f" {readable_time(export.expires_at)}, before it could be delivered."
        )
        lines = [
            f"File:      {export.filename} ({export.format})",
            "Ask for the export again to get a new file.",
        ]
    footer = [f"Export:    {export.id}", f"Delivery:  {notice.delivery.id}"]
    if notice.delivery.schedule_id:
        footer.append(f"Schedule:  {notice.delivery.schedule_id}")
    if notice.delivery.subscriber is not None:
        footer += ["", _SUBSCRIBED]
    return "\n".join([intro, "", *lines, "", "--", *footer, ""])


# Said to a subscriber (services/subscribers.py), who asked for these mails themselves.
_SUBSCRIBED = (
    "You get this because you subscribed to the schedule; Unsubscribe on its page in qexport"
    " (or `qexport schedules unsubscribe ID`) to stop."
)


def email_message(notice: Notice, *, attachment: bytes | None = None) -> EmailMessage:
    """The email for `notice`, To its recipient; the sender adds From."""
    message = EmailMessage()
    message["To"] = notice.delivery.recipient.target
    message["Subject"] = email_subject(notice)
    message["Message-ID"] = f"<{notice.delivery.id}@qexport>"
    message[DELIVERY_HEADER] = notice.delivery.id
    message.set_content(email_text(notice))
    if attachment is not None and notice.outcome is Outcome.FILE:
        media = mimetypes.guess_type(notice.export.filename)[0] or "application/octet-stream"
        maintype, subtype = media.split("/", 1)
        message.add_attachment(
            attachment, maintype=maintype, subtype=subtype, filename=notice.export.filename
        )
    return message


def webhook_payload(notice: Notice) -> dict[str, Any]:
    export, delivered = notice.export, notice.outcome is Outcome.FILE
    failure = (
        {
            "code": str(export.failure_code or "internal"),
            "detail": readable_detail(export.failure_detail),
        }
        if notice.outcome is Outcome.FAILURE
        else None
    )
    return {
        "delivery_id": notice.delivery.id,
        "export_id": export.id,
        "status": _STATUS[notice.outcome],
        "subject": {
            "type": export.subject_type,
            "id": export.subject_id,
            "name": export.subject_name,
        },
        "format": export.format,
        "filename": export.filename,
        "rows": export.row_count if export.status is Status.SUCCEEDED else None,
        "size_bytes": export.size_bytes if export.status is Status.SUCCEEDED else None,
        "sha256": export.sha256 if export.status is Status.SUCCEEDED else None,
        "expires_at": iso_time(export.expires_at),
        "link": notice.link if delivered else None,
        "failure": failure,
        "schedule_id": notice.delivery.schedule_id,
    }


def webhook_body(notice: Notice) -> bytes:
    """The exact bytes that are signed and sent."""
    return json.dumps(webhook_payload(notice), separators=(",", ":")).encode()
