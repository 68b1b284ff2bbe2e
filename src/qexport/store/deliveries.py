"""Deliveries on SQLAlchemy Core: claimed once their export settles, every write fenced.

waiting -> sending (claim; or sending -> sending when a sender died and its lease expired)
sending -> sent | failed (fenced by the lease token), sending -> waiting (retry later);
failed -> waiting when a person sends it again (guarded by `status = 'failed'`).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from qexport.domain.audit import AuditEvent
from qexport.domain.exports import Status
from qexport.domain.failures import FailureCode, bounded_detail
from qexport.domain.schedules import Channel, Delivery, DeliveryStatus, Outcome, Recipient
from qexport.ports import ClaimedDelivery
from qexport.store.audit.chain import append_if
from qexport.store.engine import OnEngine
from qexport.store.exports.records import to_record
from qexport.store.tables.exports import exports
from qexport.store.tables.schedules import UNSENT, deliveries

_SETTLED_EXPORT = exports.c.status.in_([Status.SUCCEEDED.value, Status.FAILED.value])


def _claimable(now: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        sa.text(f"deliveries.{UNSENT}"),  # as ix_deliveries_unsent states it
        sa.or_(
            sa.and_(
                deliveries.c.status == DeliveryStatus.WAITING.value,
                sa.or_(deliveries.c.next_attempt_at.is_(None), deliveries.c.next_attempt_at <= now),
            ),
            sa.and_(
                deliveries.c.status == DeliveryStatus.SENDING.value,
                deliveries.c.lease_expires_at < now,
            ),
        ),
    )


def _to_delivery(row: sa.Row[Any]) -> Delivery:
    m = row._mapping
    return Delivery(
        id=m["id"],
        export_id=m["export_id"],
        recipient=Recipient(Channel(m["channel"]), m["target"]),
        status=DeliveryStatus(m["status"]),
        attempt=m["attempt"],
        created_at=m["created_at"],
        schedule_id=m["schedule_id"],
        next_attempt_at=m["next_attempt_at"],
        lease_token=m["lease_token"],
        lease_expires_at=m["lease_expires_at"],
        sent_at=m["sent_at"],
        outcome=Outcome(m["outcome"]) if m["outcome"] else None,
        last_error=m["last_error"],
        failure_code=FailureCode(m["failure_code"]) if m["failure_code"] else None,
        attempts_spent=m["attempts_spent"],
        resent_at=m["resent_at"],
        resent_by=m["resent_by"],
        subscriber=m["subscriber_id"],
    )


class SqlDeliveryStore(OnEngine):
    """DeliveryStore over the metadata database's engine."""

    def claim_delivery(self, *, now: datetime, lease_seconds: float) -> ClaimedDelivery | None:
        """The oldest claimable delivery of a settled export, leased to the caller."""
        candidate = (
            sa.select(deliveries.c.id)
            .join(exports, exports.c.id == deliveries.c.export_id)
            .where(_claimable(now), _SETTLED_EXPORT)
            .order_by(deliveries.c.created_at, deliveries.c.id)
            .limit(1)
        )
        with self._tx() as conn:
            if conn.dialect.name == "postgresql":
                candidate = candidate.with_for_update(of=deliveries, skip_locked=True)
            found = conn.execute(candidate).scalar()
            if found is None:
                return None
            claim = (
                deliveries.update()
                .where(deliveries.c.id == found, _claimable(now))
                .values(
                    status=DeliveryStatus.SENDING.value,
                    attempt=deliveries.c.attempt + 1,
                    lease_token=str(uuid.uuid4()),
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    next_attempt_at=None,
                )
                .returning(deliveries)
            )
            row = conn.execute(claim).first()
            if row is None:
                return None
            export = conn.execute(sa.select(exports).where(exports.c.id == row.export_id)).one()
            return ClaimedDelivery(_to_delivery(row), to_record(export))

    def _fenced(
        self, delivery_id: str, token: str, audit: AuditEvent | None = None, **values: Any
    ) -> bool:
        stmt = (
            deliveries.update()
            .where(
                deliveries.c.id == delivery_id,
                deliveries.c.status == DeliveryStatus.SENDING.value,
                deliveries.c.lease_token == token,
            )
            .values(**values)
        )
        with self._tx() as conn:
            if conn.execute(stmt).rowcount != 1:
                return False
            append_if(conn, audit)
            return True

    def mark_sent(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        outcome: Outcome,
        audit: AuditEvent | None = None,
    ) -> bool:
        return self._fenced(
            delivery_id,
            token,
            audit,
            status=DeliveryStatus.SENT.value,
            sent_at=now,
            outcome=outcome.value,
            lease_token=None,
            lease_expires_at=None,
        )

    def release_delivery(
        self, delivery_id: str, token: str, *, retry_at: datetime, error: str
    ) -> bool:
        return self._fenced(
            delivery_id,
            token,
            status=DeliveryStatus.WAITING.value,
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
            status=DeliveryStatus.FAILED.value,
            last_error=bounded_detail(error) or "failed",
            failure_code=code.value if code else None,
            sent_at=None,
            lease_token=None,
            lease_expires_at=None,
        )

    def send_again(self, export_id: str, delivery_id: str, *, now: datetime, by: str) -> bool:
        """failed -> waiting, due now, with a fresh attempt budget; False unless it was failed.

        A failed delivery holds no lease, so no sender can be writing it; from waiting it is
        claimed like any other (one lease, one send per claim) under its same id, so that a
        receiver dropping repeats still sees it once.
        """
        stmt = (
            deliveries.update()
            .where(
                deliveries.c.id == delivery_id,
                deliveries.c.export_id == export_id,
                deliveries.c.status == DeliveryStatus.FAILED.value,
            )
            .values(
                status=DeliveryStatus.WAITING.value,
                next_attempt_at=None,
                failure_code=None,
                attempts_spent=deliveries.c.attempt,
                resent_at=now,
                resent_by=by,
            )
        )
        with self._tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def list_deliveries(self, export_id: str) -> list[Delivery]:
        stmt = (
            sa.select(deliveries)
            .where(deliveries.c.export_id == export_id)
            .order_by(deliveries.c.created_at, deliveries.c.channel, deliveries.c.target)
        )
        with self._read() as conn:
            return [_to_delivery(r) for r in conn.execute(stmt)]

    def has_unsent(self) -> bool:
        stmt = sa.select(deliveries.c.id).where(sa.text(f"deliveries.{UNSENT}")).limit(1)
        with self._read() as conn:
            return conn.execute(stmt).first() is not None
