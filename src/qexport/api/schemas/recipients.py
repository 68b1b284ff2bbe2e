"""Who hears about an export: one channel per recipient (email, webhook, Slack, Teams)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from qexport.domain.schedules import MAX_RECIPIENTS, MAX_URL_CHARS, RECIPIENT_SHAPES, Channel


class EmailRecipient(BaseModel):
    """A mail to this address: the file's public link (and maybe the file), or why it failed."""

    model_config = ConfigDict(extra="forbid")

    email: str = Field(max_length=254, examples=["ops@example.com"])


class WebhookRecipient(BaseModel):
    """A signed JSON POST to this URL (headers X-QExport-Signature and X-QExport-Delivery)."""

    model_config = ConfigDict(extra="forbid")

    webhook: str = Field(
        max_length=MAX_URL_CHARS,
        description="An http(s) URL without user name or password",
        examples=["https://hooks.example.com/qexport"],
    )


class SlackRecipient(BaseModel):
    """A Block Kit message in a Slack channel, through its incoming webhook: the export's name,
    rows, size, expiry and link, or why it failed. The URL is a secret: shown whole only to
    the schedule's owner and workspace admins."""

    model_config = ConfigDict(extra="forbid")

    slack: str = Field(
        max_length=MAX_URL_CHARS,
        description="The channel's incoming-webhook URL (https)",
        examples=["https://hooks.slack.com/services/T000/B000/XXXX"],
    )


class TeamsRecipient(BaseModel):
    """An Adaptive Card in a Microsoft Teams channel, through its incoming webhook (or a
    Workflows webhook): the same facts as for Slack. The URL is a secret, shown like Slack's."""

    model_config = ConfigDict(extra="forbid")

    teams: str = Field(
        max_length=MAX_URL_CHARS,
        description="The channel's incoming-webhook URL (https)",
        examples=["https://example.webhook.office.com/webhookb2/..."],
    )


_CHANNEL_NAMES = frozenset(channel.value for channel in Channel)


def _one_channel(value: Any) -> Any:
    """An object with no channel, two, or an unknown one is refused as a whole (`recipients.0`)
    rather than as each alternative's missing or extra member."""
    if isinstance(value, dict) and (len(value) != 1 or not value.keys() <= _CHANNEL_NAMES):
        raise ValueError(f"a recipient is exactly one of {RECIPIENT_SHAPES}")
    return value


Recipient = Annotated[
    EmailRecipient | WebhookRecipient | SlackRecipient | TeamsRecipient,
    BeforeValidator(_one_channel),
]

# The count is checked with the request's other values (every mistake at once); documented here.
Recipients = Annotated[list[Recipient], Field(json_schema_extra={"maxItems": MAX_RECIPIENTS})]
