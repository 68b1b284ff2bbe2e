"""Reading, cancelling and downloading exports, with the same visibility rule everywhere.

A requester sees their own exports; with `whole_workspace` (an admin) every export of their
workspace. Anything else looks missing, exactly like an id that was never issued.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import BinaryIO

from qexport.domain.accounts import Principal
from qexport.domain.audit import Action, Actor, AuditEvent
from qexport.domain.commands import CancelExport, ListExports
from qexport.domain.cursors import decode_page_cursor, encode_page_cursor
from qexport.domain.exports import (
    CANCELLED,
    EXPIRED,
    ExportEvent,
    ExportFilter,
    ExportRecord,
    Requester,
    Status,
    effective_status,
)
from qexport.domain.failures import (
    AccessLostError,
    ConflictError,
    FailureCode,
    InvalidRequestError,
    MetadataUnavailableError,
    NotFoundError,
    Problems,
    QExportError,
    readable_detail,
)
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS
from qexport.ports import AuditLog, Catalog, Clock, ExportQueue, ObjectStore, Presigner
from qexport.services.audit import event
from qexport.services.deps import Deps
from qexport.services.reports import may_read_export

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
    return _visible(record, requester, export_id, whole_workspace=whole_workspace)


def _visible(
    record: ExportRecord | None, requester: Requester, export_id: str, *, whole_workspace: bool
) -> ExportRecord:
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
    listing: ExportListing,
    *,
    whole_workspace: bool = False,
    limit: int = 50,
    before: tuple[datetime, str] | None = None,
    after: tuple[datetime, str] | None = None,
) -> list[ExportRecord]:
    """The exports the requester may see that `listing` keeps, newest first, by effective
    status (`expired` too; `succeeded` then means not expired; `cancelled`: the failed ones
    cancelled). Its `requested_by` and `narrow` only ever narrow: a member asking for someone
    else's exports gets none."""
    status, requested_by, narrow = listing.status, listing.requested_by, listing.narrow
    if not whole_workspace:
        if requested_by is not None and requested_by != requester.user_id:
            return []
        requested_by = requester.user_id
    stored: Status | None = None
    expired_at: tuple[bool, datetime] | None = None
    if status == EXPIRED:
        stored, expired_at = Status.SUCCEEDED, (True, clock.now())
    elif status == CANCELLED:  # failed/cancelled; `failed` still lists them, as the API says
        stored = Status.FAILED
        narrow = replace(narrow or ExportFilter(), failure_code=FailureCode.CANCELLED)
    elif status is not None:
        stored = Status(status)
        if stored is Status.SUCCEEDED:
            expired_at = (False, clock.now())
    return store.list_exports(
        workspace_id=requester.workspace_id,
        requested_by=requested_by,
        status=stored,
        limit=limit,
        before=before,
        after=after,
        expired_at=expired_at,
        narrow=narrow,
    )


# ---------------------------------------------------------------- the list, filtered and paged

STATUS_CHOICES = ("queued", "running", "succeeded", "failed", EXPIRED, CANCELLED)
FORMAT_CHOICES = tuple(sorted(set(QUERY_FORMATS) | REPORT_FORMATS))
MIN_ID_PREFIX = 4  # like git's shortest abbreviation: fewer characters match too much
MAX_SEARCH_CHARS = 200
# A UUID starts with 8 hex digits: a prefix's first 4 are hex, which also lets the store find
# it by a range of the primary key (store/exports/reads.py) rather than by reading every id.
_ID_PREFIX = re.compile(r"^[0-9a-f]{4}[0-9a-f-]*$")


@dataclass(frozen=True)
class ExportListing:
    """A list's filters, checked: the status and requester besides the record filter."""

    status: str | None = None
    requested_by: str | None = None
    narrow: ExportFilter = field(default_factory=ExportFilter)

    @property
    def filtered(self) -> bool:
        return self != ExportListing()


@dataclass(frozen=True)
class ExportPage:
    """One page of a list, newest first; `older`/`newer`: where the next pages start, None
    when there is nothing further that way."""

    items: list[ExportRecord]
    older: tuple[datetime, str] | None
    newer: tuple[datetime, str] | None


def parse_listing(
    *,
    status: str | None = None,
    fmt: str | None = None,
    subject: str | None = None,
    requested_by: str | None = None,
    since: str | None = None,
    until: str | None = None,
    search: str | None = None,
    id_prefix: str | None = None,
) -> ExportListing:
    """Filters as people and programs give them (blank means unset), each checked; every
    mistake is refused at once, named by its API parameter."""
    problems = Problems()
    status, fmt, subject, requested_by, since, until, search, id_prefix = (
        (v.strip() or None) if isinstance(v, str) else None
        for v in (status, fmt, subject, requested_by, since, until, search, id_prefix)
    )
    with problems.check():
        _one_of(status, STATUS_CHOICES, "status")
    with problems.check():
        _one_of(fmt, FORMAT_CHOICES, "format")
    with problems.check():
        if subject is not None and len(subject) > MAX_EXPORT_ID_CHARS:
            raise InvalidRequestError("subject must be a query or report id", field="subject")
    with problems.check():
        if requested_by is not None and len(requested_by) > MAX_USER_CHARS:
            raise InvalidRequestError("requested_by must be a user id", field="requested_by")
    start = end = None
    with problems.check():
        start = parse_instant(since, "since", end_of_day=False)
    with problems.check():
        end = parse_instant(until, "until", end_of_day=True)
        if start is not None and end is not None and end <= start:
            raise InvalidRequestError("until must come after since", field="until")
    with problems.check():
        if search is not None and len(search) > MAX_SEARCH_CHARS:
            raise InvalidRequestError(f"q is at most {MAX_SEARCH_CHARS} characters", field="q")
    with problems.check():
        id_prefix = check_id_prefix(id_prefix) if id_prefix is not None else None
    problems.raise_any()
    return ExportListing(
        status=status,
        requested_by=requested_by,
        narrow=ExportFilter(
            format=fmt,
            subject_id=subject,
            since=start,
            until=end,
            search=search,
            id_prefix=id_prefix,
        ),
    )


MAX_USER_CHARS = 200
MAX_INSTANT_CHARS = 40  # 2026-12-01T10:00:00.123456+05:30 and then some


def _one_of(value: str | None, choices: tuple[str, ...], field: str) -> None:
    if value is not None and value not in choices:
        raise InvalidRequestError(
            f"{field} must be one of {', '.join(choices)}, not {value[:40]!r}", field=field
        )


def parse_instant(text: str | None, field: str, *, end_of_day: bool) -> datetime | None:
    """A date (the whole day, UTC) or an ISO 8601 instant (UTC unless it says otherwise)."""
    if text is None:
        return None
    invalid = InvalidRequestError(
        f"{field} must be a date (2026-12-01) or a time (2026-12-01T10:00:00Z), not {text[:40]!r}",
        field=field,
    )
    if len(text) > MAX_INSTANT_CHARS:
        raise invalid
    try:
        if len(text) == len("2026-01-01"):
            day = date.fromisoformat(text)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return start + timedelta(days=1) if end_of_day else start
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def check_id_prefix(prefix: str, kind: str = "export") -> str:
    """An id or the start of one (at least MIN_ID_PREFIX characters), lower case; `kind`
    names what it is the id of, in the refusal."""
    text = prefix.strip().lower()
    article = "an" if kind[:1] in "aeiou" else "a"
    if len(text) < MIN_ID_PREFIX:
        raise InvalidRequestError(
            f"{article} {kind} id prefix needs at least {MIN_ID_PREFIX} characters, not {prefix!r}",
            field="id_prefix",
        )
    if len(text) > MAX_EXPORT_ID_CHARS or not _ID_PREFIX.match(text):
        raise InvalidRequestError(
            f"{prefix[:40]!r} is not {article} {kind} id or the start of one", field="id_prefix"
        )
    return text


def list_export_page(
    store: ExportQueue,
    clock: Clock,
    requester: Requester,
    listing: ExportListing,
    *,
    whole_workspace: bool = False,
    limit: int = 50,
    before: tuple[datetime, str] | None = None,
    after: tuple[datetime, str] | None = None,
) -> ExportPage:
    """One page of the visible exports that `listing` keeps: the newest, or the page older
    than `before`, or the page newer than `after`."""
    found = list_visible_exports(
        store,
        clock,
        requester,
        listing,
        whole_workspace=whole_workspace,
        limit=limit + 1,
        before=before,
        after=after,
    )
    if after is not None:
        # The page just newer than `after`; one more than a page means more are newer still
        # (that one is the newest, first in the list).
        items = found[-limit:]
        if not items:  # nothing is newer any more: the newest page, then
            return list_export_page(
                store, clock, requester, listing, whole_workspace=whole_workspace, limit=limit
            )
        newer = _key(items[0]) if len(found) > limit else None
        return ExportPage(items, _key(items[-1]), newer)
    items = found[:limit]
    older = _key(items[-1]) if len(found) > limit else None
    newer = _key(items[0]) if before is not None and items else None
    return ExportPage(items, older, newer)


def _key(record: ExportRecord) -> tuple[datetime, str]:
    return record.created_at, record.id


MAX_PAGE = 200  # exports in one page of a list, at most


@dataclass(frozen=True)
class ListedExports:
    """A page of a list, and where the next pages start: `next_cursor` older, `prev_cursor`
    newer (None: nothing further that way); `filtered` when some filter narrowed it."""

    items: list[ExportRecord]
    next_cursor: str | None
    prev_cursor: str | None
    filtered: bool


def list_exports(deps: Deps, principal: Principal, query: ListExports) -> ListedExports:
    """The exports the principal may see (an admin's: the workspace's), newest first, that
    the query's filters keep; every mistake in them is refused at once, named by its API
    parameter."""
    problems = Problems()
    listing, at = ExportListing(), None
    with problems.check():
        listing = parse_listing(
            status=query.status,
            fmt=query.format,
            subject=query.subject,
            requested_by=query.requested_by,
            since=query.since,
            until=query.until,
            search=query.search,
            id_prefix=query.id_prefix,
        )
    with problems.check():
        if not 1 <= query.limit <= MAX_PAGE:
            raise InvalidRequestError(
                f"limit must be 1 to {MAX_PAGE}, not {query.limit}", field="limit"
            )
    with problems.check():
        at = decode_page_cursor(query.cursor) if query.cursor is not None else None
    problems.raise_any()
    page = list_export_page(
        deps.exports,
        deps.clock,
        principal.requester,
        listing,
        whole_workspace=principal.sees_workspace,
        limit=query.limit,
        before=at.at if at is not None and not at.newer else None,
        after=at.at if at is not None and at.newer else None,
    )
    return ListedExports(
        page.items,
        encode_page_cursor(page.older) if page.older else None,
        encode_page_cursor(page.newer, newer=True) if page.newer else None,
        listing.filtered,
    )


FULL_ID_CHARS = 36
MAX_CANDIDATES = 10


def id_prefix_of(ref: str, kind: str = "export") -> str | None:
    """The id prefix `ref` is, lower case; None when it is to be taken as a whole id (as
    long as one, or not the start of any: a lookup then finds none). Fewer than
    MIN_ID_PREFIX characters are refused: they would match too much. Every id qexport
    makes is a UUID, so this holds for exports, schedules, links and approval requests."""
    if len(ref) == FULL_ID_CHARS:
        return None
    try:
        return check_id_prefix(ref, kind)
    except InvalidRequestError:
        if len(ref.strip()) < MIN_ID_PREFIX:
            raise
        return None


def ambiguous_message(ref: str, candidates: list[tuple[str, str]], kind: str = "export") -> str:
    """`export id 'b0e6' is ambiguous; it starts: ...` with up to MAX_CANDIDATES ids."""
    shown = "; ".join(f"{found_id} ({name})" for found_id, name in candidates[:MAX_CANDIDATES])
    more = " and more" if len(candidates) > MAX_CANDIDATES else ""
    return f"{kind} id {ref!r} is ambiguous; it starts {shown}{more}"


def list_visible_events(
    store: ExportQueue, requester: Requester, export_id: str, *, whole_workspace: bool = False
) -> list[ExportEvent]:
    """Every transition of an export the requester may see, oldest first."""
    record = get_visible_export(store, requester, export_id, whole_workspace=whole_workspace)
    return store.list_events(record.id)


def cancel_export(deps: Deps, principal: Principal, command: CancelExport) -> ExportRecord:
    """Settle an unsettled export the principal may see as failed/cancelled; a settled one is
    a conflict."""
    store, clock = deps.exports, deps.clock
    record = get_visible_export(
        store, principal.requester, command.export_id, whole_workspace=principal.sees_workspace
    )
    cancelled_event = event(
        clock,
        principal,
        Action.EXPORT_CANCELLED,
        workspace_id=record.workspace_id,
        target=("export", record.id),
    )
    if not store.cancel(record.id, now=clock.now(), audit=cancelled_event):
        current = store.get_export(record.id)
        status = effective_status(current, clock.now()) if current else "missing"
        raise ConflictError(
            f"export {command.export_id} is already {status};"
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
    found = (
        exports.get_export_with_query(export_id) if len(export_id) <= MAX_EXPORT_ID_CHARS else None
    )
    record, query = found if found is not None else (None, None)
    record = _visible(record, requester, export_id, whole_workspace=whole_workspace)
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
    if not may_read_export(catalog, requester, record, query):
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


# ---------------------------------------------------------------- the local command line's files
#
# The API's downloads are recorded once their first chunk has gone out, never failing the
# response (http/download.py: an event written first cost the first byte 2.0 ms). A local
# download has no such budget and nothing waiting on it, so its event is written before the
# first byte is handed over, and a download whose event cannot be written is refused: the
# operator's own command line is no way around the trail.


def _record_or_refuse(audit: AuditLog, happened: AuditEvent) -> None:
    if not audit.record(happened):
        raise MetadataUnavailableError(
            "the download could not be recorded in the audit trail, so nothing was handed"
            " over; try again once the metadata database answers"
        )


def hand_over_file(
    objects: ObjectStore, audit: AuditLog, clock: Clock, actor: Actor, record: ExportRecord
) -> BinaryIO:
    """The file of a `downloadable` record, its `file.downloaded` event (its whole size, as
    a download cut short counts on the API) written first."""
    stream = objects.open(record.storage_key)
    try:
        _record_or_refuse(audit, _file_event(clock, actor, record, Action.FILE_DOWNLOADED))
    except BaseException:
        stream.close()
        raise
    return stream


def hand_over_link(
    objects: Presigner, audit: AuditLog, clock: Clock, actor: Actor, record: ExportRecord
) -> tuple[str, int]:
    """A presigned URL to a `downloadable` record's file and how many seconds it is valid
    (never past the export's expiry), its `file.presigned` event written first."""
    valid = _link_seconds(objects, record, clock.now())
    _record_or_refuse(audit, _file_event(clock, actor, record, Action.FILE_PRESIGNED, valid))
    return objects.presigned_url(record.storage_key, record.filename, max_seconds=valid), valid


def presigned_link(presigner: Presigner, record: ExportRecord, now: datetime) -> tuple[str, int]:
    """A presigned URL to a `downloadable` record's file and how many seconds it is valid:
    the store's presign lifetime, never past the export's expiry."""
    valid = _link_seconds(presigner, record, now)
    return presigner.presigned_url(record.storage_key, record.filename, max_seconds=valid), valid


def _link_seconds(presigner: Presigner, record: ExportRecord, now: datetime) -> int:
    assert record.expires_at is not None  # only succeeded records are handed over
    left = (record.expires_at - now).total_seconds()
    return max(1, min(presigner.presign_seconds, int(left)))


def _file_event(
    clock: Clock, actor: Actor, record: ExportRecord, action: Action, valid: int | None = None
) -> AuditEvent:
    details: dict[str, object] = {"filename": record.filename}
    if action is Action.FILE_DOWNLOADED:
        details["bytes"] = record.size_bytes or 0
    else:
        details["valid_seconds"] = valid
    return event(
        clock,
        actor,
        action,
        workspace_id=record.workspace_id,
        target=("export", record.id),
        details=details,
    )
