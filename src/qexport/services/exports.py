"""Reading, cancelling and downloading exports, with the same visibility rule everywhere.

A requester sees their own exports; with `whole_workspace` (an admin) every export of their
workspace. Anything else looks missing, exactly like an id that was never issued.
"""

from __future__ import annotations

from datetime import datetime
from typing import BinaryIO

from qexport.domain.exports import (
    EXPIRED,
    ExportEvent,
    ExportRecord,
    Requester,
    Status,
    effective_status,
)
from qexport.domain.failures import (
    AccessLostError,
    ConflictError,
    NotFoundError,
    QExportError,
    readable_detail,
)
from qexport.ports import Catalog, Clock, ExportQueue, ObjectStore
from qexport.services.reports import may_read_subject

# Export ids are UUIDs (36 characters); anything much longer is not worth a lookup.
MAX_EXPORT_ID_CHARS = 64


class NotReadyError(ConflictError):
    """The export is still queued or running: ask again later."""


class ExportFailedError(ConflictError):
    """The export failed: there is no file."""


class ExpiredError(QExportError):
    """The file was available but has expired."""


def get_visible_export(
    store: ExportQueue, requester: Requester, export_id: str, *, whole_workspace: bool = False
) -> ExportRecord:
    """The export if the requester may see it; someone else's export looks missing."""
    record = store.get_export(export_id) if len(export_id) <= MAX_EXPORT_ID_CHARS else None
    if (
        record is None
        or record.workspace_id != requester.workspace_id
        or (record.requested_by != requester.user_id and not whole_workspace)
    ):
        raise NotFoundError(f"no export {export_id!r}")
    return record


def list_visible_exports(
    store: ExportQueue,
    clock: Clock,
    requester: Requester,
    *,
    whole_workspace: bool = False,
    status: str | None = None,
    limit: int = 50,
    before: tuple[datetime, str] | None = None,
) -> list[ExportRecord]:
    """The exports the requester may see, newest first, by effective status (`expired` too;
    `succeeded` then means not expired)."""
    stored: Status | None = None
    expired_at: tuple[bool, datetime] | None = None
    if status == EXPIRED:
        stored, expired_at = Status.SUCCEEDED, (True, clock.now())
    elif status is not None:
        stored = Status(status)
        if stored is Status.SUCCEEDED:
            expired_at = (False, clock.now())
    return store.list_exports(
        workspace_id=requester.workspace_id,
        requested_by=None if whole_workspace else requester.user_id,
        status=stored,
        limit=limit,
        before=before,
        expired_at=expired_at,
    )


def list_visible_events(
    store: ExportQueue, requester: Requester, export_id: str, *, whole_workspace: bool = False
) -> list[ExportEvent]:
    """Every transition of an export the requester may see, oldest first."""
    record = get_visible_export(store, requester, export_id, whole_workspace=whole_workspace)
    return store.list_events(record.id)


def cancel_export(
    store: ExportQueue,
    clock: Clock,
    requester: Requester,
    export_id: str,
    *,
    whole_workspace: bool = False,
) -> ExportRecord:
    """Settle an unsettled export as failed/cancelled; a settled one is a conflict."""
    record = get_visible_export(store, requester, export_id, whole_workspace=whole_workspace)
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
    exports: ExportQueue,
    catalog: Catalog,
    clock: Clock,
    requester: Requester,
    export_id: str,
    *,
    whole_workspace: bool = False,
) -> ExportRecord:
    """The record of a succeeded, unexpired export that the requester may still read."""
    record = get_visible_export(exports, requester, export_id, whole_workspace=whole_workspace)
    status = effective_status(record, clock.now())
    if status in (Status.QUEUED, Status.RUNNING):
        raise NotReadyError(f"export {export_id} is {status}; the file is not ready yet")
    if status == Status.FAILED:
        code = record.failure_code.value if record.failure_code else "failed"
        raise ExportFailedError(
            f"export {export_id} failed ({code}): {readable_detail(record.failure_detail)}"
        )
    if status == EXPIRED:
        assert record.expires_at is not None
        raise ExpiredError(f"export {export_id} expired at {record.expires_at:%Y-%m-%d %H:%M} UTC")
    if not may_read_subject(catalog, requester, record):
        raise AccessLostError("you may no longer read what this export was made from")
    return record


def open_download(
    exports: ExportQueue,
    catalog: Catalog,
    objects: ObjectStore,
    clock: Clock,
    requester: Requester,
    export_id: str,
) -> tuple[ExportRecord, BinaryIO]:
    """The file of a succeeded, unexpired export that the requester may still read."""
    record = downloadable(exports, catalog, clock, requester, export_id)
    return record, objects.open(record.storage_key)
