"""Slack and Microsoft Teams: a settled export announced in a channel through the channel's
incoming webhook, as a Slack Block Kit message or a Teams Adaptive Card.

Each says what the email says (content.py) in the chat's own layout: the export's name, rows,
size, expiry and its link as a button; a failure's code and reason; an expired file's notice.
The POST itself is a webhook's (webhook.py): the same egress policy and workspace webhook
hosts, the same judging of answers, so the same retries. It is not signed (neither service
checks a signature: the URL is the secret) and carries the delivery id in a header only.

Teams takes the Adaptive Card in a `message` envelope, the one format that both its
Office 365 connector webhooks and its Workflows (Power Automate) webhooks accept.

Text that members wrote (a query's name, an engine's reason) is never read as markup: Slack
gets it as `plain_text`, or as mrkdwn with `& < >` escaped so that `<!channel>` cannot ping a
whole channel nor `<url|text>` disguise a link; Teams gets markdown link brackets escaped.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from qexport.deliveries.content import Notice, email_subject, readable_time
from qexport.deliveries.webhook import WebhookSender
from qexport.domain.failures import readable_detail
from qexport.domain.humanize import human_size
from qexport.domain.schedules import Channel, Outcome

SLACK_HEADER_CHARS = 150  # Block Kit's limit on a header's text
SLACK_BUTTON_CHARS = 75  # ... and on a button's
ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
ADAPTIVE_CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
ADAPTIVE_CARD_VERSION = "1.4"  # rendered by Teams on desktop, web and mobile


def headline(notice: Notice) -> str:
    """`Export ready: orders`, `Export failed: orders`, `Export expired before delivery: …`."""
    export = notice.export
    if notice.outcome is Outcome.FILE:
        return f"Export ready: {export.subject_name}"
    return email_subject(notice)


def facts(notice: Notice) -> list[tuple[str, str]]:
    """The label and value pairs both layouts show, in this order."""
    export = notice.export
    if notice.outcome is Outcome.FILE:
        return [
            ("Rows", f"{export.row_count or 0:,}"),
            ("Size", human_size(export.size_bytes or 0)),
            ("Format", export.format),
            ("Expires", readable_time(export.expires_at)),
        ]
    if notice.outcome is Outcome.FAILURE:
        return [("Format", export.format), ("Code", str(export.failure_code or "internal"))]
    return [("File", export.filename), ("Expired", readable_time(export.expires_at))]


def _reason(notice: Notice) -> str | None:
    if notice.outcome is Outcome.FAILURE:
        return readable_detail(notice.export.failure_detail) or "unknown"
    if notice.outcome is Outcome.EXPIRED:
        return "Ask for the export again to get a new file."
    return None


def _footer(notice: Notice) -> str:
    parts = [f"Export {notice.export.id}"]
    if notice.delivery.schedule_id:
        parts.append(f"schedule {notice.delivery.schedule_id}")
    return " · ".join(parts)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- Slack


def slack_escape(text: str) -> str:
    """Text for Slack's mrkdwn, read as written (Slack's own three escapes)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(notice: Notice) -> dict[str, Any]:
    """A Block Kit message; `text` is the notification's fallback (and what screen readers
    announce first)."""
    title = headline(notice)
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": _cut(title, SLACK_HEADER_CHARS)},
        },
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*{label}*\n{slack_escape(value)}"}
                for label, value in facts(notice)
            ],
        },
    ]
    reason = _reason(notice)
    if reason:
        blocks.append({"type": "section", "text": {"type": "plain_text", "text": reason}})
    if notice.link:
        filename = slack_escape(notice.export.filename)
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"<{notice.link}|{filename}> can be downloaded until"
                    f" {readable_time(notice.export.expires_at)}.",
                },
                "accessory": {
                    "type": "button",
                    "action_id": "download",
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Download"},
                    "url": notice.link,
                },
            }
        )
    blocks.append(
        {"type": "context", "elements": [{"type": "plain_text", "text": _footer(notice)}]}
    )
    return {"text": slack_escape(title), "blocks": blocks}


# ---------------------------------------------------------------- Teams


def teams_escape(text: str) -> str:
    """Text for a card's markdown with link syntax disarmed (`[text](url)`)."""
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def teams_message(notice: Notice) -> dict[str, Any]:
    """An Adaptive Card in the `message` envelope Teams' incoming webhooks take."""
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": teams_escape(headline(notice)),
            "style": "heading",
            "size": "Medium",
            "weight": "Bolder",
            "wrap": True,
        },
        {
            "type": "FactSet",
            "facts": [
                {"title": label, "value": teams_escape(value)} for label, value in facts(notice)
            ],
        },
    ]
    reason = _reason(notice)
    if reason:
        body.append({"type": "TextBlock", "text": teams_escape(reason), "wrap": True})
    body.append({"type": "TextBlock", "text": _footer(notice), "isSubtle": True, "size": "Small"})
    card: dict[str, Any] = {
        "$schema": ADAPTIVE_CARD_SCHEMA,
        "type": "AdaptiveCard",
        "version": ADAPTIVE_CARD_VERSION,
        "body": body,
    }
    if notice.link:
        card["actions"] = [
            {
                "type": "Action.OpenUrl",
                "title": f"Download {notice.export.filename}",
                "url": notice.link,
            }
        ]
    return {
        "type": "message",
        "attachments": [{"contentType": ADAPTIVE_CARD, "contentUrl": None, "content": card}],
    }


# ---------------------------------------------------------------- sending


def chat_body(notice: Notice) -> bytes:
    """The bytes posted to the notice's Slack or Teams recipient."""
    if notice.delivery.recipient.channel is Channel.SLACK:
        payload = slack_message(notice)
    else:
        payload = teams_message(notice)
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def send_chat(
    sender: WebhookSender, notice: Notice, *, hosts: Collection[str] | None = None
) -> None:
    """Post the notice to its Slack or Teams channel; DeliveryError as a webhook's."""
    sender.post(
        notice.delivery.recipient.target,
        chat_body(notice),
        headers={"X-QExport-Delivery": notice.delivery.id},
        hosts=hosts,
    )
