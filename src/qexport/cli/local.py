"""The command line's client of the local database: what a server would answer, from the same
services, as the same views, refused the same way.

A client command is written once, against `qexport.cli.client.Client`: `client_of(ctx)` hands
it this client, or the server's (`QExportClient`) when QEXPORT_URL and QEXPORT_TOKEN are set.
This one acts as `qexport.services.accounts.local_principal` says (the member `--user` names,
with their role; the operator's own CLI in a workspace without accounts), answers with the
views the API writes (`qexport.services.views`), and refuses with the status and code the API
would give (`ApiError`, from `qexport.http.statuses`), so that the output, the message and the
exit status of a command are the same code, whichever it talks to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, BinaryIO

from qexport.cli.client import (
    CHUNK_BYTES,
    SUBJECT_LABEL,
    ApiError,
    copy_checked,
    gathered,
    subject_named,
)
from qexport.domain.accounts import Role
from qexport.domain.approvals import Decision
from qexport.domain.commands import (
    CancelExport,
    ChangeSchedule,
    CreateLink,
    CreateSchedule,
    Decide,
    DeleteSchedule,
    ListExports,
    QueryDraft,
    ReportDraft,
    RequestExport,
    RevokeLink,
    RunScheduleNow,
    SaveQuery,
    SaveReport,
    ScheduleDraft,
    SubjectRef,
    Subscribe,
)
from qexport.domain.failures import InvalidRequestError, QExportError
from qexport.http.statuses import status_of
from qexport.services import views

if TYPE_CHECKING:
    from qexport.container import Container
    from qexport.domain.accounts import Principal
    from qexport.domain.exports import ExportRecord
    from qexport.domain.schedules import Schedule


def refused_as_a_server_would(exc: QExportError) -> ApiError:
    """`exc` as the API's problem document reaches the remote client: its status, code and
    detail, and every mistake of a refused request as `field: message`."""
    status, code = status_of(exc) or (500, "internal")
    mistakes: tuple[tuple[str | None, str], ...] = ()
    field = None
    if isinstance(exc, InvalidRequestError):
        field = exc.field
        mistakes = tuple(
            (found.field or "body", " ".join(found.detail.split())) for found in exc.problems
        )
    return ApiError(status, code, " ".join(exc.detail.split()), field=field, mistakes=mistakes)


@contextlib.contextmanager
def _as_a_server() -> Iterator[None]:
    try:
        yield
    except QExportError as exc:
        raise refused_as_a_server_would(exc) from exc


class LocalClient:
    """The local database, acting as `principal`: `QExportClient`'s methods and answers."""

    def __init__(self, deps: Container, principal: Principal, *, member: bool = True) -> None:
        """`member`: `principal` is a member of a workspace with accounts. In a workspace
        without, the operator's command line administers it (schedules, links, approvals),
        but each --user's exports stay their own, as a member's do: none of them is an admin
        who may see another's."""
        self._deps = deps
        self._principal = principal
        self._reader = principal if member else replace(principal, role=Role.EDITOR)

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        """(The local database is closed with the command's state, not here.)"""

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
        from qexport.domain.approvals import ApprovalRequest
        from qexport.services.requests import request

        found = self.subject(kind, ref)
        subject = SubjectRef("report" if kind == "report" else "query", found["id"])
        command = RequestExport(subject, fmt, parameters, neutralize_formulas, tuple(notify or ()))
        with _as_a_server():
            made = request(self._deps, self._principal, command)
        now = self._deps.clock.now()
        if isinstance(made, ApprovalRequest):
            return {"kind": "approval", **views.approval_view(made, now)}
        return views.export_view(made, now)

    def subject(self, kind: str, ref: str) -> dict[str, Any]:
        return subject_named(self.list_subjects(kind), kind, ref)

    def subjects(self, kind: str) -> list[tuple[str, str]]:
        """(id, name) of each query (or report, by title) the principal may read."""
        label = SUBJECT_LABEL[kind]
        return [(item["id"], item[label]) for item in self.list_subjects(kind)]

    def get_export(self, export_id: str) -> dict[str, Any]:
        from qexport.services.exports import get_visible_export

        acting = self._reader
        with _as_a_server():
            record = get_visible_export(
                self._deps.exports,
                acting.requester,
                export_id,
                whole_workspace=acting.sees_workspace,
            )
        return views.export_view(record, self._deps.clock.now())

    def list_exports(
        self,
        *,
        limit: int | None = 50,
        status: str | None = None,
        cursor: str | None = None,
        filters: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        from qexport.services.exports import list_exports

        given = filters or {}

        def page_of(size: int, at: str | None) -> dict[str, Any]:
            query = ListExports(
                status=status,
                format=given.get("format"),
                subject=given.get("subject"),
                requested_by=given.get("requested_by"),
                since=given.get("since"),
                until=given.get("until"),
                search=given.get("q"),
                id_prefix=given.get("id_prefix"),
                limit=size,
                cursor=at,
            )
            with _as_a_server():
                page = list_exports(self._deps, self._reader, query)
            now = self._deps.clock.now()
            return {
                "items": [views.export_view(record, now) for record in page.items],
                "next_cursor": page.next_cursor,
            }

        return gathered(page_of, limit, cursor)

    def exports_starting(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        return list(self.list_exports(limit=limit, filters={"id_prefix": prefix})["items"])

    def cancel_export(self, export_id: str) -> dict[str, Any]:
        from qexport.services.exports import cancel_export

        with _as_a_server():
            record = cancel_export(self._deps, self._reader, CancelExport(export_id))
        return views.export_view(record, self._deps.clock.now())

    def list_deliveries(self, export_id: str) -> dict[str, Any]:
        from qexport.services.schedules.catalog import list_visible_deliveries

        acting = self._reader
        with _as_a_server():
            found = list_visible_deliveries(
                self._deps.exports,
                self._deps.deliveries,
                acting.requester,
                export_id,
                whole_workspace=acting.sees_workspace,
            )
        return {"items": [views.delivery_view(delivery) for delivery in found]}

    def _downloadable(self, export_id: str) -> ExportRecord:
        from qexport.services.exports import downloadable

        deps, acting = self._deps, self._reader
        return downloadable(
            deps.exports,
            deps.catalog,
            deps.clock,
            acting.requester,
            export_id,
            whole_workspace=acting.sees_workspace,
        )

    def file_location(self, export_id: str) -> str | None:
        """A short-lived presigned URL to the file on S3 (its handing out recorded in the
        trail first); None where files are kept on a file system."""
        from qexport.services.audit import actor_of
        from qexport.services.exports import hand_over_link

        deps = self._deps
        with _as_a_server():
            record = self._downloadable(export_id)
            if deps.presigner is None:
                return None
            actor = actor_of(self._principal)
            link, _valid = hand_over_link(deps.presigner, deps.audit, deps.clock, actor, record)
        return link

    def download(self, export_id: str, sink: BinaryIO) -> dict[str, Any]:
        """The file into `sink`, recorded in the trail before its first byte, and checked
        against the export's size and sha256 as a download from a server is."""
        from qexport.services.audit import actor_of
        from qexport.services.exports import hand_over_file

        deps = self._deps
        with _as_a_server():
            record = self._downloadable(export_id)
            actor = actor_of(self._principal)
            stream = hand_over_file(deps.objects, deps.audit, deps.clock, actor, record)
        export = views.export_view(record, deps.clock.now())
        with stream:
            copy_checked(iter(lambda: stream.read(CHUNK_BYTES), b""), sink, export)
        return export

    # ------------------------------------------------------------ queries and reports

    def list_subjects(self, kind: str) -> list[dict[str, Any]]:
        from qexport.services.queries import list_readable_queries
        from qexport.services.reports import list_readable_reports

        catalog, reader = self._deps.catalog, self._reader
        with _as_a_server():
            if kind == "report":
                return [views.report_view(r) for r in list_readable_reports(catalog, reader)]
            return [views.query_view(q) for q in list_readable_queries(catalog, reader)]

    def delete_subject(self, kind: str, ref: str) -> dict[str, Any]:
        from qexport.services.queries import delete_query
        from qexport.services.reports import delete_report

        found = self.subject(kind, ref)
        delete = delete_report if kind == "report" else delete_query
        with _as_a_server():
            delete(self._deps.catalog, self._principal, found["id"])
        return found

    def save_query(self, draft: QueryDraft, query_id: str | None = None) -> dict[str, Any]:
        from qexport.services.queries import save_query

        with self._previews_forked() as deps, _as_a_server():
            query = save_query(deps, self._principal, SaveQuery(draft, query_id))
        return views.query_view(query)

    def save_report(self, draft: ReportDraft, report_id: str | None = None) -> dict[str, Any]:
        from qexport.services.reports import save_report

        with _as_a_server():
            report = save_report(self._deps, self._principal, SaveReport(draft, report_id))
        return views.report_view(report)

    @contextlib.contextmanager
    def _previews_forked(self) -> Iterator[Container]:
        """The container, its previews (and the checks of statements being saved) run in
        processes forked from this one, which has opened no source: a forkserver's imports
        would double the command's time (previews/processes.py)."""
        from qexport import bootstrap

        runner = bootstrap.preview_processes(self._deps.settings, start_method="fork")
        try:
            yield replace(self._deps, previews=runner)
        finally:
            runner.close()

    def preview_query(
        self, ref: str, parameters: dict[str, Any], *, limit: int | None = None
    ) -> dict[str, Any]:
        """The preview a server would run, run here: in a process forked for it, whose memory
        is bounded, on the record and counted against the member's previews a minute."""
        from qexport.services import preview

        query_id = self.subject("query", ref)["id"]
        with self._previews_forked() as deps, _as_a_server():
            found = preview.preview_query(
                deps.preview_desk(),
                self._principal.requester,
                query_ref=query_id,
                parameters=parameters,
                limit=preview.MAX_ROWS if limit is None else limit,
            )
        return preview.preview_json(found)

    # ------------------------------------------------------------ schedules

    def _schedule_view(self, schedule: Schedule) -> dict[str, Any]:
        """A schedule as the server answers it to the principal (recipients, `subscribed`)."""
        from qexport.services.schedules import subscriptions, visibility

        acting = self._principal
        view = views.schedule_view(
            schedule, full_recipients=visibility.sees_recipients(acting, schedule)
        )
        subscribed = schedule.id in subscriptions.subscribed_ids(self._deps.schedules, acting)
        return {**view, "subscribed": subscribed}

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        from qexport.services import scheduling

        deps = self._deps
        draft = ScheduleDraft(
            query_id=body.get("query_id"),
            report_id=body.get("report_id"),
            format=body.get("format", ""),
            parameters=body.get("parameters", {}),
            cron=body.get("cron", ""),
            timezone=body.get("timezone"),
            recipients=body.get("recipients", []),
            missed=body.get("missed", "once"),
            enabled=body.get("enabled", True),
            neutralize_formulas=body.get("options", {}).get("neutralize_formulas", True),
            filename_template=body.get("filename_template"),
        )
        with _as_a_server():
            schedule = scheduling.create_schedule(deps, self._principal, CreateSchedule(draft))
        return self._schedule_view(schedule)

    def list_schedules(self) -> dict[str, Any]:
        from qexport.services.schedules import visibility

        deps, acting = self._deps, self._principal
        with _as_a_server():
            found = visibility.list_visible_schedules(deps.catalog, deps.schedules, acting)
        return {"items": [self._schedule_view(schedule) for schedule in found]}

    def update_schedule(self, schedule_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        from qexport.services import scheduling

        deps = self._deps
        settings = dict(changes)
        if "options" in settings:
            settings["neutralize_formulas"] = settings.pop("options")["neutralize_formulas"]
        with _as_a_server():
            changed = ChangeSchedule(schedule_id, settings)
            schedule = scheduling.change_schedule(deps, self._principal, changed)
        return self._schedule_view(schedule)

    def delete_schedule(self, schedule_id: str) -> None:
        from qexport.services import scheduling

        with _as_a_server():
            scheduling.delete_schedule(self._deps, self._principal, DeleteSchedule(schedule_id))

    def run_schedule(self, schedule_id: str) -> dict[str, Any]:
        from qexport.services.scheduling import run_schedule_now

        with _as_a_server():
            record = run_schedule_now(self._deps, self._principal, RunScheduleNow(schedule_id))
        return views.export_view(record, self._deps.clock.now())

    def signing_key(self) -> dict[str, Any]:
        from qexport.services.schedules import visibility
        from qexport.services.signing import signing_key

        deps, acting = self._deps, self._principal
        with _as_a_server():
            visibility.require_admin(acting)
        key = signing_key(deps.settings, deps.schedules, deps.clock, acting.workspace_id)
        return {"workspace": acting.workspace_id, "key": key}

    def subscribe(self, schedule_id: str) -> dict[str, Any]:
        from qexport.services import scheduling

        with _as_a_server():
            found = scheduling.subscribe(self._deps, self._principal, Subscribe(schedule_id))
        return {"schedule_id": found.schedule_id, "subscribed": True, "email": found.email}

    def unsubscribe(self, schedule_id: str) -> None:
        from qexport.services import scheduling

        command = Subscribe(schedule_id, subscribed=False)
        with _as_a_server():
            scheduling.subscribe(self._deps, self._principal, command)

    # ------------------------------------------------------------ members

    def member_names(self) -> dict[str, str]:
        from qexport.services.accounts import members_seen_by

        with _as_a_server():
            found = members_seen_by(self._deps.accounts, self._principal)
        return {user.id: user.email for user, _membership in found}

    # ------------------------------------------------------------ approvals

    def list_approvals(self, *, pending: bool) -> dict[str, Any]:
        from qexport.services.approvals import listed

        deps, acting = self._deps, self._principal
        now = deps.clock.now()
        with _as_a_server():
            found = listed(
                deps.approvals,
                acting.user_id,
                acting.workspace_id,
                acting.role,
                pending_at=now if pending else None,
            )
        return {"items": [views.approval_view(request, now) for request in found]}

    def decide(self, approval_id: str, decision: str, reason: str | None) -> dict[str, Any]:
        from qexport.services.deciding import decide_request

        command = Decide(approval_id, Decision(decision), reason)
        with _as_a_server():
            decided = decide_request(self._deps, self._principal, command)
        return views.approval_view(decided, self._deps.clock.now())

    # ------------------------------------------------------------ links

    def create_link(self, export_id: str, days: int | None) -> dict[str, Any]:
        from qexport.services.links import create_link

        with _as_a_server():
            if not self._deps.settings.public_base_url:
                # A server makes its links for its own address; the command line knows none,
                # and a link without one is no URL anyone can open: made nowhere, refused.
                raise InvalidRequestError(
                    "set QEXPORT_PUBLIC_BASE_URL (or --public-base-url) to the address people"
                    " reach `qexport serve` at; a public link's URL starts with it"
                )
            created = create_link(self._deps, self._principal, CreateLink(export_id, days))
        return {
            "id": created.link.id,
            "url": created.url,
            "expires_at": views.iso_time(created.expires_at),
        }

    def list_links(self, export_id: str) -> dict[str, Any]:
        from qexport.services.links import list_live_links

        deps = self._deps
        with _as_a_server():
            record, found = list_live_links(
                deps.exports, deps.accounts, deps.clock, self._principal, export_id
            )
        return {"items": [views.link_view(link, record) for link in found]}

    def links_starting(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        from qexport.services.links import links_starting

        deps = self._deps
        with _as_a_server():
            found = links_starting(
                deps.exports, deps.accounts, deps.clock, self._principal, prefix, limit=limit
            )
        return [views.link_view(link, record) for link, record in found]

    def revoke_link(self, link_id: str) -> None:
        from qexport.services.links import revoke_link

        with _as_a_server():
            revoke_link(self._deps, self._principal, RevokeLink(link_id))
