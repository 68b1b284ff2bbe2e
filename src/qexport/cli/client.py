"""The command line's client interface: what a client command asks of a qexport, the
server's (`qexport.cli.remote`, over HTTP) or the local database's (`qexport.cli.local`),
answered alike, so that each command is written once.

Every failure is an ApiError carrying the problem document's status and `code`, so the CLI
prints one line whatever went wrong: a refused request, a dead server, a corrupted download.
(No HTTP library here: a local command does not load one.)
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

if TYPE_CHECKING:
    from qexport.domain.commands import QueryDraft, ReportDraft

CHUNK_BYTES = 1024 * 1024
# The most exports the server gives in one page.
PAGE_LIMIT = 200


class ApiError(Exception):
    """A problem document from the server, or a failure to talk to it, as one line."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        field: str | None = None,
        mistakes: tuple[tuple[str | None, str], ...] = (),
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        # Every mistake of a refused request (422 `errors`) as (field, message), in order.
        self.mistakes = mistakes

    @property
    def problems(self) -> tuple[str, ...]:
        """Every mistake as `field: message`."""
        return tuple(f"{f}: {message}" if f else message for f, message in self.mistakes)

    def __str__(self) -> str:
        return f"{self.detail} ({self.code})"


class Client(Protocol):
    """What a client command asks of a qexport, the server's or the local database's: the
    API's answers as JSON-shaped dicts, and its refusals as ApiError. Use as a context
    manager."""

    def __enter__(self) -> Client: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    # ------------------------------------------------------------ exports

    def request_export(
        self,
        kind: str,
        ref: str,
        fmt: str,
        parameters: dict[str, Any],
        *,
        neutralize_formulas: bool = True,
        notify: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """Request an export of the query (`kind` "query") or report ("report") that `ref`
        names (`subject`): the export, or the approval request it waits on (its `kind`
        "approval")."""
        ...

    def subject(self, kind: str, ref: str) -> dict[str, Any]:
        """The query (`kind` "query") or report the caller can read that `ref` names: by its
        name (title), its id, or the start of its id (`one_named`); ApiError not_found with
        the nearest names otherwise."""
        ...

    def subjects(self, kind: str) -> list[tuple[str, str]]:
        """(id, name) of each query (`kind` "query") or report (by title) the caller can
        read."""
        ...

    def get_export(self, export_id: str) -> dict[str, Any]: ...

    def list_exports(
        self,
        *,
        limit: int | None = 50,
        status: str | None = None,
        cursor: str | None = None,
        filters: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Up to `limit` exports (None: all of them), newest first, over as many pages as that
        takes, starting at `cursor`; `filters` are the list's query parameters (format,
        subject, since, until, q, id_prefix...). The `next_cursor` continues after the last."""
        ...

    def exports_starting(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        """The caller's visible exports whose id starts with `prefix` (at most `limit`)."""
        ...

    def cancel_export(self, export_id: str) -> dict[str, Any]: ...

    def list_deliveries(self, export_id: str) -> dict[str, Any]:
        """Who hears about the export, and how far each delivery got (`{"items": [...]}`)."""
        ...

    def file_location(self, export_id: str) -> str | None:
        """Where downloads of the file are sent (a short-lived presigned URL on S3); None
        where the file is served, or read, as it is."""
        ...

    def download(self, export_id: str, sink: BinaryIO) -> dict[str, Any]:
        """Stream the file into `sink` and check it against the export's size and sha256;
        returns the export. A file that does not match raises ApiError `checksum_mismatch`."""
        ...

    # ------------------------------------------------------------ queries and reports

    def list_subjects(self, kind: str) -> list[dict[str, Any]]:
        """Every query (`kind` "query") or report the caller can read, as the API shows
        them (services.views.query_view, report_view)."""
        ...

    def delete_subject(self, kind: str, ref: str) -> dict[str, Any]:
        """Delete the query (`kind` "query") or report that `ref` names (`subject`); returns
        it as it was. An editor's or an admin's."""
        ...

    def save_query(self, draft: QueryDraft, query_id: str | None = None) -> dict[str, Any]:
        """Save a new query (no `query_id`) or replace one whole, checked by its source first
        (services.queries.save_query); returns it as the API shows it."""
        ...

    def save_report(self, draft: ReportDraft, report_id: str | None = None) -> dict[str, Any]:
        """Save a new report (no `report_id`) or replace one whole
        (services.reports.save_report); returns it as the API shows it."""
        ...

    def preview_query(
        self, ref: str, parameters: dict[str, Any], *, limit: int | None = None
    ) -> dict[str, Any]:
        """The first rows (at most `limit`) of the query that `ref` names (`subject`), run
        with the caller's rights, as the API's preview answers them; on the record and
        rationed as every preview is (`qexport.services.preview`). Reports have no preview."""
        ...

    # ------------------------------------------------------------ schedules

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        """Save a schedule (the POST /schedules body); returns it."""
        ...

    def list_schedules(self) -> dict[str, Any]: ...

    def update_schedule(self, schedule_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change the given settings of a schedule (the PATCH body: `{"enabled": False}`
        pauses it)."""
        ...

    def delete_schedule(self, schedule_id: str) -> None: ...

    def run_schedule(self, schedule_id: str) -> dict[str, Any]:
        """Fire a schedule now; returns the export."""
        ...

    def signing_key(self) -> dict[str, Any]:
        """The workspace's webhook signing key (workspace admins)."""
        ...

    def subscribe(self, schedule_id: str) -> dict[str, Any]:
        """Mail each run of the schedule to the caller's own address too."""
        ...

    def unsubscribe(self, schedule_id: str) -> None: ...

    # ------------------------------------------------------------ members

    def member_names(self) -> dict[str, str]:
        """The email of each member the caller may see, by user id: every member of the
        workspace for an admin, the caller alone otherwise; none without accounts. Lists
        name people by them."""
        ...

    # ------------------------------------------------------------ approvals

    def list_approvals(self, *, pending: bool) -> dict[str, Any]: ...

    def decide(self, approval_id: str, decision: str, reason: str | None) -> dict[str, Any]:
        """Approve or deny (`decision`) a request waiting for an admin."""
        ...

    # ------------------------------------------------------------ links

    def create_link(self, export_id: str, days: int | None) -> dict[str, Any]:
        """A public link to the export's file; its URL is in the answer only."""
        ...

    def list_links(self, export_id: str) -> dict[str, Any]: ...

    def links_starting(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        """The live links the caller may revoke whose id starts with `prefix` (at most
        `limit`), whichever export they share."""
        ...

    def revoke_link(self, link_id: str) -> None: ...


# What names each kind of subject in its view: a query's name, a report's title.
SUBJECT_LABEL = {"query": "name", "report": "title"}


def subject_named(items: Iterable[dict[str, Any]], kind: str, ref: str) -> dict[str, Any]:
    """The view among `items` (queries, `kind` "query", or reports) that `ref` names
    (`one_named`: its name or title, its id, or the start of it); ApiError as a server's
    otherwise."""
    label = SUBJECT_LABEL[kind]
    views: dict[str, dict[str, Any]] = {}

    def pairs() -> Iterator[tuple[str, str]]:
        for item in items:
            if "id" in item and isinstance(item.get(label), str):
                views[str(item["id"])] = item
                yield str(item["id"]), item[label]

    return views[one_named(pairs(), kind, ref)]


def one_named(
    pairs: Iterable[tuple[str, str]], what: str, ref: str, where: str = "that you can read"
) -> str:
    """The id among (id, name) `pairs` of the one whose name or id is `ref`, else of the one
    whose id starts with it (4 characters or more). Otherwise an ApiError, as a server's: 404
    not_found (`no query 'x' that you can read`, or `where` else) with the nearest names
    (`did_you_mean`), or, when several ids start so, 422 invalid_request naming them. `pairs`
    is read only until the name or id is met."""
    seen: list[tuple[str, str]] = []
    for pair in pairs:
        if ref in pair:
            return pair[0]
        seen.append(pair)
    start = _id_start(ref)
    started = [pair for pair in seen if start is not None and pair[0].startswith(start)]
    if len(started) == 1:
        return started[0][0]
    if started:
        from qexport.services.exports import ambiguous_message

        raise ApiError(422, "invalid_request", ambiguous_message(ref, started, kind=what))
    hint = did_you_mean(ref, [name for _id, name in seen])
    raise ApiError(404, "not_found", f"no {what} {ref!r} {where}{hint}")


def _id_start(ref: str) -> str | None:
    """`ref` as the start of an id, lower case, when it can be one (4 hex digits or more)."""
    from qexport.domain.failures import InvalidRequestError
    from qexport.services.exports import MIN_ID_PREFIX, check_id_prefix

    if len(ref.strip()) < MIN_ID_PREFIX:
        return None
    try:
        return check_id_prefix(ref)
    except InvalidRequestError:
        return None


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`; did you mean 'orders'?` when a known name is close to `word` (else ``), to end an
    error about an unknown name: every command that takes a name says it so."""
    close = difflib.get_close_matches(word, sorted(set(names)), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(name) for name in close) + "?"


def gathered(
    page_of: Callable[[int, str | None], dict[str, Any]], limit: int | None, cursor: str | None
) -> dict[str, Any]:
    """Up to `limit` exports (None: all of them) from as many pages (`page_of(size, cursor)`)
    as that takes, starting at `cursor`; its `next_cursor` continues after the last."""
    items: list[Any] = []
    while True:
        page = page_of(PAGE_LIMIT if limit is None else min(PAGE_LIMIT, limit - len(items)), cursor)
        items.extend(page.get("items", []))
        cursor = page.get("next_cursor") or None
        if cursor is None or (limit is not None and len(items) >= limit):
            return {"items": items if limit is None else items[:limit], "next_cursor": cursor}


def copy_checked(chunks: Iterable[bytes], sink: BinaryIO, export: dict[str, Any]) -> None:
    """Write `chunks` into `sink`, then check them against the export's size and sha256
    (ApiError `checksum_mismatch` when they differ)."""
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        sink.write(chunk)
    expected = export.get("sha256")
    if digest.hexdigest() != expected or size != export.get("size_bytes"):
        raise ApiError(
            0,
            "checksum_mismatch",
            f"the downloaded file ({size} bytes, sha256 {digest.hexdigest()}) does not match"
            f" export {export.get('id')} ({export.get('size_bytes')} bytes, sha256 {expected})",
        )
