"""An export's deliveries, one per recipient."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from qexport.api.schemas.recipients import Recipient
from qexport.domain.failures import FailureCode

DeliveryStatusName = Literal["waiting", "sending", "sent", "failed"]
OutcomeName = Literal["file", "failure", "expired"]


class Delivery(BaseModel):
    """One recipient's delivery of an export; `id` is the idempotency key it is sent with."""

    id: str
    recipient: Recipient
    status: DeliveryStatusName = Field(
        description="waiting (for the export, or for the next attempt), sending, sent, failed"
    )
    attempts: int
    outcome: OutcomeName | None = Field(
        description="What the recipient was told: the file, the failure, or that it expired"
    )
    last_error: str | None = Field(
        description="Why the last attempt failed, one readable reason (no addresses or ports)"
    )
    failure_code: FailureCode | None = Field(
        description="Set when the delivery failed with a code: destination_refused"
    )
    sent_at: datetime | None
    created_at: datetime
    next_attempt_at: datetime | None = Field(
        None, description="When a waiting delivery is tried next; null: as soon as it can be"
    )
    resent_at: datetime | None = Field(
        None, description="When a person last sent it again after it failed; null if never"
    )


class DeliveryList(BaseModel):
    items: list[Delivery]
