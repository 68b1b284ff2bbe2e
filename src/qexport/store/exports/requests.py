"""Requesting an export: the insert (with its event and deliveries) and the requester's cap of
unsettled exports, in the caller's transaction (the queue, schedules and approvals share it)."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from qexport.domain.audit import AuditEvent
from qexport.domain.exports import EventKind, ExportRecord, Status
from qexport.domain.failures import unsettled_cap_reached
from qexport.domain.schedules import DeliveryStatus, NewDelivery
from qexport.ports import NewExport
from qexport.store.audit.chain import append_if, lock_chain
from qexport.store.exports.records import to_record
from qexport.store.exports.transitions import UNSETTLED_CLAUSE, record_event
from qexport.store.notify import notify_claimable
from qexport.store.tables.exports import exports
from qexport.store.tables.schedules import deliveries

_INSERT = exports.insert().returning(exports)


def check_unsettled_cap(
    conn: sa.Connection, new: NewExport, cap: int, *, serialised: bool = False
) -> None:
    """Refuse `new`, already inserted in this transaction, if it took its requester past `cap`
    unsettled exports (the transaction then rolls back with it).

    Concurrent requests of one requester must count one after the other, each seeing the
    others' exports: SQLite's writers take turns already (BEGIN IMMEDIATE); on PostgreSQL the
    workspace's audit chain lock, held until the commit, orders them, taken here unless the
    caller holds it already (`serialised`: it appended the request's event). One lock for
    every request of a workspace, audited or not, so that none counts beside another. Counted
    after the insert and as late as the transaction allows, since everything after the lock
    holds the workspace's other requests up: a lock taken first was held across ten round
    trips and 40 clients' creates queued behind each other (p50 610 ms, bench/api_load.py).
    """
    if conn.dialect.name == "postgresql" and not serialised:
        lock_chain(conn, new.workspace_id)
    stmt = sa.select(sa.func.count()).where(
        UNSETTLED_CLAUSE,
        exports.c.workspace_id == new.workspace_id,
        exports.c.requested_by == new.requested_by,
    )
    before = int(conn.execute(stmt).scalar_one()) - 1  # the new export is one of them
    if before >= cap:
        raise unsettled_cap_reached(before, cap)


def finish_request_in(
    conn: sa.Connection, new: NewExport, *, max_unsettled: int | None, audit: AuditEvent | None
) -> None:
    """The end of the transaction that inserted `new`: its audit event, then the requester's
    cap. The event's chain lock (per workspace, held until the commit on PostgreSQL) already
    orders the request after every other of its workspace, the requester's included, so the
    count takes no lock of its own then: one queue and one round trip fewer for a request."""
    append_if(conn, audit)
    if max_unsettled is not None:
        covered = audit is not None and audit.workspace_id == new.workspace_id
        check_unsettled_cap(conn, new, max_unsettled, serialised=covered)


def insert_export_in(
    conn: sa.Connection, new: NewExport, new_deliveries: Sequence[NewDelivery], *, notify: bool
) -> ExportRecord:
    """Insert a queued export, its `requested` event and its waiting deliveries."""
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
        "filename": new.filename,
        "storage_key": new.storage_key,
        "status": Status.QUEUED.value,
        "attempt": 0,
        "progress_rows": 0,
        "created_at": new.created_at,
    }
    row = conn.execute(_INSERT, values).one()
    record_event(conn, row, EventKind.REQUESTED, new.created_at)
    if new_deliveries:
        conn.execute(
            deliveries.insert(),
            [
                {
                    "id": d.id,
                    "export_id": new.id,
                    "schedule_id": d.schedule_id,
                    "subscriber_id": d.subscriber,
                    "channel": d.recipient.channel.value,
                    "target": d.recipient.target,
                    "status": DeliveryStatus.WAITING.value,
                    "attempt": 0,
                    "created_at": new.created_at,
                }
                for d in new_deliveries
            ],
        )
    if notify:
        notify_claimable(conn, new.id)
    return to_record(row)
