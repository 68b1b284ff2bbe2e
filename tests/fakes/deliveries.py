"""Deliveries in memory: those the in-memory export queue recorded with each export, claimed
once their export has settled, every write fenced by the lease.

waiting -> sending (claim; or sending -> sending when a sender died and its lease expired)
sending -> sent | failed (fenced by the lease token), sending -> waiting (retry later);
failed -> waiting when a person sends it again.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from qexport.domain.audit import AuditEvent
from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode, bounded_detail
from qexport.domain.schedules import Delivery, DeliveryStatus, Outcome
from qexport.ports import ClaimedDelivery
from tests.fakes.audit import InMemoryAuditLog
from tests.fakes.exports import InMemoryMetadataStore

_SETTLED = (Status.SUCCEEDED, Status.FAILED)
_UNSENT = (DeliveryStatus.WAITING, DeliveryStatus.SENDING)


def _claimable(delivery: Delivery, now: datetime) -> bool:
    if delivery.status is DeliveryStatus.WAITING:
        return delivery.next_attempt_at is None or delivery.next_attempt_at <= now
    return (
        delivery.status is DeliveryStatus.SENDING
        and delivery.lease_expires_at is not None
        and delivery.lease_expires_at < now
    )


class InMemoryDeliveryStore:
    """The DeliveryStore contract over the deliveries `exports` recorded (its public
    `deliveries` list, read as it grows)."""

    def __init__(self, exports: InMemoryMetadataStore) -> None:
        self._exports = exports
        self._deliveries: dict[str, Delivery] = {}
        self._seen = 0  # how many of `exports.deliveries` are in `_deliveries`
        self._lock = threading.RLock()
        self.audit_log = InMemoryAuditLog()  # the container's, when it builds one

    def _sync(self) -> None:
        """Take in the deliveries recorded since the last call, waiting, dated like their
        export (as the database writes them with it)."""
        recorded = self._exports.deliveries[self._seen :]
        self._seen += len(recorded)
        for export_id, new in recorded:
            export = self._exports.get_export(export_id)
            if export is None or new.id in self._deliveries:
                raise ValueError("a delivery needs its export and a fresh id")
            self._deliveries[new.id] = Delivery(
                id=new.id,
                export_id=export_id,
                recipient=new.recipient,
                status=DeliveryStatus.WAITING,
                attempt=0,
                created_at=export.created_at,
                schedule_id=new.schedule_id,
                subscriber=new.subscriber,
            )

    def claim_delivery(self, *, now: datetime, lease_seconds: float) -> ClaimedDelivery | None:
        """The oldest claimable delivery of a settled export, leased to the caller."""
        with self._lock:
            self._sync()
            for delivery in sorted(self._deliveries.values(), key=lambda d: (d.created_at, d.id)):
                export = self._exports.get_export(delivery.export_id)
                if export is None or export.status not in _SETTLED:
                    continue
                if not _claimable(delivery, now):
                    continue
                claimed = replace(
                    delivery,
                    status=DeliveryStatus.SENDING,
                    attempt=delivery.attempt + 1,
                    lease_token=str(uuid.uuid4()),
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    next_attempt_at=None,
                )
                self._deliveries[delivery.id] = claimed
                return ClaimedDelivery(claimed, export)
            return None

    def _fenced(self, delivery_id: str, token: str, **changes: Any) -> bool:
        with self._lock:
            self._sync()
            current = self._deliveries.get(delivery_id)
            if (
                current is None
                or current.status is not DeliveryStatus.SENDING
                or current.lease_token != token
            ):
                return False
            self._deliveries[delivery_id] = replace(current, **changes)
            return True

    def _mark_sent_unaudited(
        self, delivery_id: str, token: str, *, now: datetime, outcome: Outcome
    ) -> bool:
        return self._fenced(
            delivery_id,
            token,
            status=DeliveryStatus.SENT,
            sent_at=now,
            outcome=outcome,
            lease_token=None,
            lease_expires_at=None,
        )

    def release_delivery(
        self, delivery_id: str, token: str, *, retry_at: datetime, error: str
    ) -> bool:
        return self._fenced(
            delivery_id,
            token,
            status=DeliveryStatus.WAITING,
            next_attempt_at=retry_at,
            last_error=bounded_detail(error),
            lease_token=None,
            lease_expires_at=None,
        )

    def mark_failed(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        error: str,
        code: FailureCode | None = None,
    ) -> bool:
        return self._fenced(
            delivery_id,
            token,
            status=DeliveryStatus.FAILED,
            last_error=bounded_detail(error) or "failed",
            failure_code=code,
            sent_at=None,
            lease_token=None,
            lease_expires_at=None,
        )

    def send_again(self, export_id: str, delivery_id: str, *, now: datetime, by: str) -> bool:
        with self._lock:
            self._sync()
            current = self._deliveries.get(delivery_id)
            if (
                current is None
                or current.export_id != export_id
                or current.status is not DeliveryStatus.FAILED
            ):
                return False
            self._deliveries[delivery_id] = replace(
                current,
                status=DeliveryStatus.WAITING,
                next_attempt_at=None,
                failure_code=None,
                attempts_spent=current.attempt,
                resent_at=now,
                resent_by=by,
            )
            return True

    def list_deliveries(self, export_id: str) -> list[Delivery]:
        with self._lock:
            self._sync()
            found = [d for d in self._deliveries.values() if d.export_id == export_id]
        return sorted(found, key=lambda d: (d.created_at, d.recipient.channel, d.recipient.target))

    def has_unsent(self) -> bool:
        with self._lock:
            self._sync()
            return any(d.status in _UNSENT for d in self._deliveries.values())

    # the audited writes: each appends its `audit` event when the change is made
    def mark_sent(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        outcome: Outcome,
        audit: AuditEvent | None = None,
    ) -> bool:
        done = self._mark_sent_unaudited(delivery_id, token, now=now, outcome=outcome)
        if done:
            self.audit_log.append(audit)
        return done
