"""The command line's client of a qexport server: the /api/v1 endpoints (DESIGN section 5),
as `qexport.cli.client.Client` says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote

import httpx2

from qexport import __version__
from qexport.cli.client import (
    CHUNK_BYTES,
    ApiError,
    copy_checked,
    gathered,
    subject_named,
)

if TYPE_CHECKING:
    from qexport.domain.commands import QueryDraft, ReportDraft

API_PREFIX = "/api/v1"
# Requests are small and answered at once; a download may wait on a slow disk or network.
TIMEOUT = httpx2.Timeout(30.0, read=300.0)
# A query or report named by a command is looked for in at most this many pages of its list.
MAX_QUERY_PAGES = 20


def _mistakes(errors: Any) -> tuple[tuple[str | None, str], ...]:
    """A 422's `errors` (`[{"field", "message"}...]`) as (field, message) pairs."""
    if not isinstance(errors, list):
        return ()
    found: list[tuple[str | None, str]] = []
    for entry in errors:
        if isinstance(entry, dict) and isinstance(entry.get("message"), str):
            field = entry.get("field")
            found.append(
                (field if isinstance(field, str) else None, " ".join(entry["message"].split()))
            )
    return tuple(found)


def _problem(response: httpx2.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        detail = str(body.get("detail") or body.get("title") or response.reason_phrase)
        field = body.get("field")
        return ApiError(
            response.status_code,
            body["code"],
            " ".join(detail.split()),
            field=field if isinstance(field, str) else None,
            mistakes=_mistakes(body.get("errors")),
        )
    return ApiError(
        response.status_code,
        f"http_{response.status_code}",
        f"the server answered {response.status_code} {response.reason_phrase}",
    )


def _path_segment(value: str) -> str:
    """An id as one path segment: `../x` or `a/b` cannot reach another route."""
    return quote(value, safe="")


# Where a kind of subject is listed, and what it is called by.
_LISTS = {"query": ("/queries", "name"), "report": ("/reports", "title")}


class QExportClient:
    """One server, one token. Use as a context manager (or call `close`)."""

    def __init__(
        self, url: str, token: str, *, transport: httpx2.BaseTransport | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx2.Client(
            base_url=self.url + API_PREFIX,
            headers={"Authorization": f"Bearer {token}", "User-Agent": f"qexport/{__version__}"},
            timeout=TIMEOUT,
            transport=transport,
        )

    def __enter__(self) -> QExportClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx2.HTTPError as exc:
            raise ApiError(0, "unreachable", f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise _problem(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        body = self._request(method, path, **kwargs).json()
        if not isinstance(body, dict):
            raise ApiError(0, "bad_response", f"unexpected answer from {self.url}{path}")
        return body

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
        names: the export, or the approval request it waits on."""
        return self.create_export(
            self.subject(kind, ref)["id"],
            fmt,
            parameters,
            neutralize_formulas=neutralize_formulas,
            subject=kind,
            notify=notify,
        )

    def subject(self, kind: str, ref: str) -> dict[str, Any]:
        """The query (`kind` "query") or report the caller can read that `ref` names, by name
        (title), id or the start of an id; the list's pages are read only until it is met by
        name or id."""
        return subject_named(self._items(_LISTS[kind][0]), kind, ref)

    def subjects(self, kind: str) -> list[tuple[str, str]]:
        """(id, name) of each query (`kind` "query") or report (by title) the caller can
        read."""
        return list(self._labelled(*_LISTS[kind]))

    def _labelled(self, path: str, label: str) -> Iterator[tuple[str, str]]:
        """(id, label) of each item of `path` the caller can read, page after page; none from
        a server without that API."""
        for item in self._items(path):
            if "id" in item and isinstance(item.get(label), str):
                yield str(item["id"]), item[label]

    def _items(self, path: str) -> Iterator[dict[str, Any]]:
        """Each item of the list at `path` the caller can read, page after page; none from a
        server without that API."""
        params: dict[str, str] = {}
        for _ in range(MAX_QUERY_PAGES):
            try:
                page = self._json("GET", path, params=params)
            except ApiError as exc:
                if exc.status in (404, 405):  # a server without that API
                    return
                raise
            yield from (item for item in page.get("items", []) if isinstance(item, dict))
            cursor = page.get("next_cursor")
            if not cursor:
                break
            params = {"cursor": str(cursor)}

    def create_export(
        self,
        subject_id: str,
        fmt: str,
        parameters: dict[str, Any],
        *,
        neutralize_formulas: bool = True,
        subject: str = "query",
        notify: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """Request an export of a query (`subject` "query") or a report ("report"); each
        `notify` recipient (`{"email": A}` or `{"webhook": URL}`) hears once it settles."""
        body: dict[str, Any] = {
            f"{subject}_id": subject_id,
            "format": fmt,
            "parameters": parameters,
        }
        if not neutralize_formulas:
            body["options"] = {"neutralize_formulas": False}
        if notify:
            body["notify"] = notify
        return self._json("POST", "/exports", json=body)

    def get_export(self, export_id: str) -> dict[str, Any]:
        return self._json("GET", f"/exports/{_path_segment(export_id)}")

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

        def page_of(size: int, at: str | None) -> dict[str, Any]:
            params: dict[str, str | int] = {"limit": size, **(filters or {})}
            if status:
                params["status"] = status
            if at:
                params["cursor"] = at
            return self._json("GET", "/exports", params=params)

        return gathered(page_of, limit, cursor)

    def exports_starting(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        """The caller's visible exports whose id starts with `prefix` (at most `limit`)."""
        page = self._json("GET", "/exports", params={"id_prefix": prefix, "limit": limit})
        items = page.get("items", [])
        return [i for i in items if isinstance(i, dict)]

    def cancel_export(self, export_id: str) -> dict[str, Any]:
        return self._json("POST", f"/exports/{_path_segment(export_id)}/cancel")

    def list_deliveries(self, export_id: str) -> dict[str, Any]:
        """Who hears about the export, and how far each delivery got (`{"items": [...]}`)."""
        return self._json("GET", f"/exports/{_path_segment(export_id)}/deliveries")

    def file_location(self, export_id: str) -> str | None:
        """Where the server sends downloads of the file (a presigned URL on S3); None when
        it serves the bytes itself."""
        path = f"/exports/{_path_segment(export_id)}/file"
        try:
            with self._http.stream("GET", path, follow_redirects=False) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _problem(response)
                if response.is_redirect:
                    return response.headers.get("Location")
                return None
        except httpx2.HTTPError as exc:
            raise ApiError(0, "unreachable", f"cannot reach {self.url}: {exc}") from exc

    def download(self, export_id: str, sink: BinaryIO) -> dict[str, Any]:
        """Stream the file into `sink` and check it against the export's sha256; returns the
        export. A file that does not match raises ApiError `checksum_mismatch`."""
        export = self.get_export(export_id)
        path = f"/exports/{_path_segment(export_id)}/file"
        try:
            # A redirect to S3 is followed; httpx drops the token when it leaves this origin.
            with self._http.stream("GET", path, follow_redirects=True) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _problem(response)
                copy_checked(response.iter_bytes(CHUNK_BYTES), sink, export)
        except httpx2.HTTPError as exc:
            raise ApiError(0, "unreachable", f"download from {self.url} broke off: {exc}") from exc
        return export

    # ------------------------------------------------------------ queries and reports

    def list_subjects(self, kind: str) -> list[dict[str, Any]]:
        return list(self._items(_LISTS[kind][0]))

    def delete_subject(self, kind: str, ref: str) -> dict[str, Any]:
        found = self.subject(kind, ref)
        self._request("DELETE", f"{_LISTS[kind][0]}/{_path_segment(str(found['id']))}")
        return found

    def save_query(self, draft: QueryDraft, query_id: str | None = None) -> dict[str, Any]:
        if query_id is None:
            return self._json("POST", "/queries", json=draft.to_json())
        return self._json("PUT", f"/queries/{_path_segment(query_id)}", json=draft.to_json())

    def save_report(self, draft: ReportDraft, report_id: str | None = None) -> dict[str, Any]:
        if report_id is None:
            return self._json("POST", "/reports", json=draft.to_json())
        return self._json("PUT", f"/reports/{_path_segment(report_id)}", json=draft.to_json())

    # ------------------------------------------------------------ schedules

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        """Save a schedule (the POST /schedules body); returns it."""
        return self._json("POST", "/schedules", json=body)

    def list_schedules(self) -> dict[str, Any]:
        return self._json("GET", "/schedules")

    def update_schedule(self, schedule_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change the given settings of a schedule (`{"enabled": False}` pauses it)."""
        return self._json("PATCH", f"/schedules/{_path_segment(schedule_id)}", json=changes)

    def member_names(self) -> dict[str, str]:
        """The email of each member the token's user may see, by user id (none from a
        server without GET /members)."""
        return {
            str(item["id"]): str(item["email"])
            for item in self._items("/members")
            if "id" in item and "email" in item
        }

    def list_approvals(self, *, pending: bool) -> dict[str, Any]:
        params = {"pending": "true"} if pending else {}
        return self._json("GET", "/approvals", params=params)

    def decide(self, approval_id: str, decision: str, reason: str | None) -> dict[str, Any]:
        """Approve or deny (`decision`) a request waiting for an admin."""
        body = {} if reason is None else {"reason": reason}
        return self._json("POST", f"/approvals/{_path_segment(approval_id)}/{decision}", json=body)

    def create_link(self, export_id: str, days: int | None) -> dict[str, Any]:
        """A public link to the export's file; its URL is in the answer only."""
        body = {} if days is None else {"expires_in_days": days}
        return self._json("POST", f"/exports/{_path_segment(export_id)}/links", json=body)

    def list_links(self, export_id: str) -> dict[str, Any]:
        return self._json("GET", f"/exports/{_path_segment(export_id)}/links")

    def links_starting(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        """The live links the caller may revoke whose id starts with `prefix`."""
        page = self._json("GET", "/links", params={"id_prefix": prefix, "limit": limit})
        return [i for i in page.get("items", []) if isinstance(i, dict)]

    def revoke_link(self, link_id: str) -> None:
        self._request("DELETE", f"/links/{_path_segment(link_id)}")

    def delete_schedule(self, schedule_id: str) -> None:
        self._request("DELETE", f"/schedules/{_path_segment(schedule_id)}")

    def run_schedule(self, schedule_id: str) -> dict[str, Any]:
        """Fire a schedule now; returns the export."""
        return self._json("POST", f"/schedules/{_path_segment(schedule_id)}/run")

    def signing_key(self) -> dict[str, Any]:
        """The workspace's webhook signing key (workspace admins)."""
        return self._json("GET", "/schedules/signing-key")

    # ------------------------------------------------------------ preview

    def preview_query(
        self, ref: str, parameters: dict[str, Any], *, limit: int | None = None
    ) -> dict[str, Any]:
        """The first rows of the query `ref` names (POST /queries/{id}/preview), run with the
        token's rights."""
        body: dict[str, Any] = {"parameters": parameters}
        if limit is not None:
            body["limit"] = limit
        query_id = self.subject("query", ref)["id"]
        return self._json("POST", f"/queries/{_path_segment(query_id)}/preview", json=body)

    # ------------------------------------------------------------ subscribing oneself

    def subscribe(self, schedule_id: str) -> dict[str, Any]:
        """Mail each run of the schedule to the token's own address too."""
        return self._json("POST", f"/schedules/{_path_segment(schedule_id)}/subscription")

    def unsubscribe(self, schedule_id: str) -> None:
        self._request("DELETE", f"/schedules/{_path_segment(schedule_id)}/subscription")
