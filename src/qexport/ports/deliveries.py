"""Deliveries: what is to be sent once a file is ready, claimed and settled one send at a time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qexport.domain.audit import AuditEvent
    from qexport.domain.exports import ExportRecord
    from qexport.domain.failures import FailureCode
    from qexport.domain.schedules import Delivery, Outcome


@dataclass(frozen=True)
class ClaimedDelivery:
    delivery: Delivery
    export: ExportRecord


class DeliveryStore(Protocol):
    """Deliveries: claimed once their export has settled; every write fenced by the lease."""

    def claim_delivery(self, *, now: datetime, lease_seconds: float) -> ClaimedDelivery | None: ...
    def mark_sent(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        outcome: Outcome,
        audit: AuditEvent | None = None,
    ) -> bool: ...
    def release_delivery(
        self, delivery_id: str, token: str, *, retry_at: datetime, error: str
    ) -> bool: ...
    def mark_failed(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        error: str,
        code: FailureCode | None = None,
    ) -> bool: ...
    def send_again(self, export_id: str, delivery_id: str, *, now: datetime, by: str) -> bool:
        """A failed delivery of the export back to waiting, due now, with a fresh attempt
        budget (`Delivery.tries` from 0), recording when and by whom; False, with nothing
        written, unless it was failed."""
        ...

    def list_deliveries(self, export_id: str) -> list[Delivery]: ...
    def has_unsent(self) -> bool: ...
