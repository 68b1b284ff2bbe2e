"""Reading, cancelling and downloading exports, with the same visibility rule everywhere."""

from __future__ import annotations

from typing import BinaryIO

from qexport.domain.exports import EXPIRED, ExportRecord, Requester, Status, effective_status
from qexport.domain.failures import (
    AccessLostError,
    ConflictError,
    NotFoundError,
    QExportError,
)
from qexport.domain.queries import can_read
from qexport.ports import Clock, MetadataStore, ObjectStore


class NotReadyError(ConflictError):
    """The export is still queued or running: ask again later."""


class ExportFailedError(ConflictError):
    """The export failed: there is no file."""


class ExpiredError(QExportError):
    """The file was available but has expired."""


def get_visible_export(store: MetadataStore, requester: Requester, export_id: str) -> ExportRecord:
    """The export if the requester may see it; someone else's export looks missing."""
    record = store.get_export(export_id)
    if (
        record is None
        or record.workspace_id != requester.workspace_id
        or record.requested_by != requester.user_id
    ):
        raise NotFoundError(f"no export {export_id!r}")
    return record


def cancel_export(
    store: MetadataStore, clock: Clock, requester: Requester, export_id: str
) -> ExportRecord:
    """Settle an unsettled export as failed/cancelled; a settled one is a conflict."""
    record = get_visible_export(store, requester, export_id)
    if not store.cancel(record.id, now=clock.now()):
        current = store.get_export(record.id)
        status = effective_status(current, clock.now()) if current else "missing"
        raise ConflictError(
            f"export {export_id} is already {status};"
            " only queued or running exports can be cancelled"
        )
    cancelled = store.get_export(record.id)
    assert cancelled is not None  # records are never deleted
    return cancelled


def downloadable(
    store: MetadataStore, clock: Clock, requester: Requester, export_id: str
) -> ExportRecord:
    """The record of a succeeded, unexpired export that the requester may still read."""
    record = get_visible_export(store, requester, export_id)
    status = effective_status(record, clock.now())
    if status in (Status.QUEUED, Status.RUNNING):
        raise NotReadyError(f"export {export_id} is {status}; the file is not ready yet")
    if status == Status.FAILED:
        code = record.failure_code.value if record.failure_code else "failed"
        raise ExportFailedError(f"export {export_id} failed ({code}): {record.failure_detail}")
    if status == EXPIRED:
        assert record.expires_at is not None
        raise ExpiredError(f"export {export_id} expired at {record.expires_at:%Y-%m-%d %H:%M} UTC")
    if not can_read(requester, store.get_query(record.subject_id)):
        raise AccessLostError("you may no longer read the query this export was made from")
    return record


def open_download(
    store: MetadataStore, objects: ObjectStore, clock: Clock, requester: Requester, export_id: str
) -> tuple[ExportRecord, BinaryIO]:
    """The file of a succeeded, unexpired export that the requester may still read."""
    record = downloadable(store, clock, requester, export_id)
    return record, objects.open(record.storage_key)
