"""Approval requests on SQLAlchemy Core: a decision is one guarded UPDATE (pending and not
expired), and an approval inserts its export in the same transaction, so that no request is
approved without its export nor an export made of a request twice.

The cap on a requester's waiting requests is counted inside the transaction that inserts the
request, after the insert, as the unsettled-exports cap is (store/exports/requests.py): SQLite's
writers take turns (BEGIN IMMEDIATE), and on PostgreSQL the workspace's audit chain lock,
held until the commit, orders concurrent requests of one workspace, so each counts the
others' committed rows and a request past the cap rolls back with its event. Counted by a read
before the transaction, as it was, 40 requests sent at once over 40 connections with a cap
of 5 were 33 to 38 accepted on PostgreSQL and all 40 on SQLite (3 runs each)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from qexport.domain.approvals import ApprovalRequest, ApprovalStatus, Decision, NewApproval
from qexport.domain.audit import AuditEvent
from qexport.domain.failures import waiting_cap_reached
from qexport.domain.schedules import NewDelivery
from qexport.ports import NewExport
from qexport.store.audit.chain import append_if, lock_chain
from qexport.store.engine import read_transaction, transaction
from qexport.store.exports.requests import insert_export_in
from qexport.store.tables.approvals import approval_requests

_PENDING = ApprovalStatus.PENDING.value


def _to_request(row: sa.Row[Any]) -> ApprovalRequest:
    m = row._mapping
    return ApprovalRequest(
        id=m["id"],
        workspace_id=m["workspace_id"],
        requested_by=m["requested_by"],
        subject_type=m["subject_type"],
        subject_id=m["subject_id"],
        subject_name=m["subject_name"],
        format=m["format"],
        parameters=dict(m["parameters"]),
        options=dict(m["options"]),
        notify=list(m["notify"]),
        fingerprint=m["fingerprint"],
        created_at=m["created_at"],
        expires_at=m["expires_at"],
        status=ApprovalStatus(m["status"]),
        decided_by=m["decided_by"],
        decided_at=m["decided_at"],
        reason=m["reason"],
        export_id=m["export_id"],
    )


def _check_waiting_cap(
    conn: sa.Connection, new: NewApproval, cap: int, *, serialised: bool
) -> None:
    """Refuse `new`, already inserted in this transaction, if it took its requester past `cap`
    requests waiting (pending and unexpired when it was made): TooManyRequestsError, and the
    transaction rolls back. On PostgreSQL the workspace's chain lock orders it after every
    other request of the workspace, taken here unless the request's event took it already."""
    if conn.dialect.name == "postgresql" and not serialised:
        lock_chain(conn, new.workspace_id)
    c = approval_requests.c
    stmt = sa.select(sa.func.count()).where(
        c.status == _PENDING,
        c.expires_at > new.created_at,
        c.workspace_id == new.workspace_id,
        c.requested_by == new.requested_by,
    )
    before = int(conn.execute(stmt).scalar_one()) - 1  # the new request is one of them
    if before >= cap:
        raise waiting_cap_reached(before, cap)


class _NotPendingError(Exception):
    """The decided request was not pending (or had expired): undo the transaction."""


class SqlApprovalStore:
    """ApprovalStore over any SQLAlchemy engine."""

    def __init__(self, engine: sa.Engine, *, notify: bool = True) -> None:
        self._engine = engine
        self._notify = notify and engine.dialect.name == "postgresql"

    def add_approval(
        self,
        new: NewApproval,
        *,
        audit: AuditEvent | None = None,
        max_waiting: int | None = None,
    ) -> ApprovalRequest:
        values = {
            "id": new.id,
            "workspace_id": new.workspace_id,
            "requested_by": new.requested_by,
            "subject_type": new.subject_type,
            "subject_id": new.subject_id,
            "subject_name": new.subject_name,
            "format": new.format,
            "parameters": new.parameters,
            "options": new.options,
            "notify": new.notify,
            "fingerprint": new.fingerprint,
            "status": _PENDING,
            "created_at": new.created_at,
            "expires_at": new.expires_at,
        }
        with transaction(self._engine) as conn:
            row = conn.execute(approval_requests.insert().returning(approval_requests), values)
            request = _to_request(row.one())
            append_if(conn, audit)
            if max_waiting is not None:
                covered = audit is not None and audit.workspace_id == new.workspace_id
                _check_waiting_cap(conn, new, max_waiting, serialised=covered)
        return request

    def get_approval(self, approval_id: str) -> ApprovalRequest | None:
        stmt = sa.select(approval_requests).where(approval_requests.c.id == approval_id)
        with read_transaction(self._engine) as conn:
            row = conn.execute(stmt).first()
        return _to_request(row) if row is not None else None

    def list_approvals(
        self,
        workspace_id: str,
        *,
        requested_by: str | None = None,
        pending_at: datetime | None = None,
        limit: int = 100,
    ) -> list[ApprovalRequest]:
        c = approval_requests.c
        stmt = sa.select(approval_requests).where(c.workspace_id == workspace_id)
        if requested_by is not None:
            stmt = stmt.where(c.requested_by == requested_by)
        if pending_at is not None:
            stmt = stmt.where(c.status == _PENDING, c.expires_at > pending_at)
        stmt = stmt.order_by(c.created_at.desc(), c.id.desc()).limit(limit)
        with read_transaction(self._engine) as conn:
            return [_to_request(r) for r in conn.execute(stmt)]

    def decide_approval(
        self,
        approval_id: str,
        decision: Decision,
        *,
        by: str,
        now: datetime,
        reason: str | None,
        export: tuple[NewExport, Sequence[NewDelivery]] | None = None,
        audit: AuditEvent | None = None,
    ) -> ApprovalRequest | None:
        assert (export is not None) == (decision is Decision.APPROVE), "an approval makes one"
        try:
            with transaction(self._engine) as conn:
                row = self._decide(conn, approval_id, decision, by, now, reason, export, audit)
        except _NotPendingError:
            return None
        return _to_request(row)

    def _decide(
        self,
        conn: sa.Connection,
        approval_id: str,
        decision: Decision,
        by: str,
        now: datetime,
        reason: str | None,
        export: tuple[NewExport, Sequence[NewDelivery]] | None,
        audit: AuditEvent | None,
    ) -> sa.Row[Any]:
        c = approval_requests.c
        if export is not None:
            new, deliveries = export
            insert_export_in(conn, new, deliveries, notify=self._notify)
        row = conn.execute(
            approval_requests.update()
            .where(c.id == approval_id, c.status == _PENDING, c.expires_at > now)
            .values(
                status=decision.status.value,
                decided_by=by,
                decided_at=now,
                reason=reason,
                export_id=export[0].id if export is not None else None,
            )
            .returning(approval_requests)
        ).first()
        if row is None:
            raise _NotPendingError  # the export inserted above is rolled back with the rest
        append_if(conn, audit)
        return row

    def pending_approvals(self, now: datetime) -> dict[str, int]:
        c = approval_requests.c
        stmt = (
            sa.select(c.workspace_id, sa.func.count())
            .where(c.status == _PENDING, c.expires_at > now)
            .group_by(c.workspace_id)
        )
        with read_transaction(self._engine) as conn:
            return {str(workspace): int(count) for workspace, count in conn.execute(stmt)}
