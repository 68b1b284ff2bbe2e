"""In-memory fakes at the ports, and a clock that tests move by hand.

They follow the same contract as the real adapters (the contract suites run on both),
so the fast unit layer exercises the services without a database, disk or network.
"""

from __future__ import annotations

import io
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

from qexport.domain.accounts import (
    ApiToken,
    Link,
    Membership,
    Role,
    Standing,
    User,
    link_cap_reached,
)
from qexport.domain.exports import (
    UNSETTLED,
    EventKind,
    ExportEvent,
    ExportRecord,
    Result,
    Status,
)
from qexport.domain.failures import (
    AccessLostError,
    ConflictError,
    FailureCode,
    InvalidRequestError,
    NotFoundError,
    ObjectExistsError,
    SourceUnavailableError,
    bounded_detail,
    unsettled_cap_reached,
)
from qexport.domain.fairness import RequesterKey, RequesterQueue, claim_order
from qexport.domain.queries import Query
from qexport.domain.quotas import check_workspace_quota
from qexport.domain.reports import SUBJECT_REPORT, Report, ReportSubject
from qexport.domain.schedules import NewDelivery
from qexport.domain.sign_in import Failures
from qexport.domain.sources import EVERY_WORKSPACE, RegisteredSource, may_use
from qexport.ports import Admission, ClaimResult, NewExport, Source, StoredObject
from qexport.store.accounts import LAST_USED_RESOLUTION


class FrozenClock:
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


def _expired(record: ExportRecord, now: datetime) -> bool:
    return record.expires_at is not None and record.expires_at <= now


class InMemoryMetadataStore:
    """The MetadataStore contract on a dict, guarded by one lock."""

    def __init__(self, standing: Callable[[str, str], Standing] | None = None) -> None:
        self._exports: dict[str, ExportRecord] = {}
        self._queries: dict[str, Query] = {}
        self._reports: dict[str, Report] = {}
        self._events: list[ExportEvent] = []
        # (export id, delivery) as recorded with each export
        self.deliveries: list[tuple[str, NewDelivery]] = []
        # (workspace id, user id) -> the requester's standing; default: no accounts.
        self._standing = standing or (lambda _workspace, _user: Standing())
        self._lock = threading.RLock()  # claim_next claims while holding it

    def _event(self, record: ExportRecord, kind: EventKind, now: datetime) -> None:
        released = kind is EventKind.RELEASED
        self._events.append(
            ExportEvent(
                export_id=record.id,
                at=now,
                kind=kind,
                status=record.status,
                attempt=record.attempt,
                worker_id=record.worker_id,
                code=record.last_error_code if released else record.failure_code,
                detail=record.last_error_detail if released else record.failure_detail,
            )
        )

    def list_events(self, export_id: str) -> list[ExportEvent]:
        with self._lock:
            return [e for e in self._events if e.export_id == export_id]

    def insert_export(
        self,
        new: NewExport,
        deliveries: Sequence[NewDelivery] = (),
        *,
        max_unsettled: int | None = None,
    ) -> ExportRecord:
        with self._lock:
            if max_unsettled is not None:
                unsettled = sum(
                    1
                    for r in self._exports.values()
                    if r.status in UNSETTLED
                    and r.workspace_id == new.workspace_id
                    and r.requested_by == new.requested_by
                )
                if unsettled >= max_unsettled:
                    raise unsettled_cap_reached(unsettled, max_unsettled)
            if new.id in self._exports or any(
                r.storage_key == new.storage_key for r in self._exports.values()
            ):
                raise ValueError("duplicate export id or storage key")
            record = ExportRecord(
                id=new.id,
                workspace_id=new.workspace_id,
                requested_by=new.requested_by,
                subject_type=new.subject_type,
                subject_id=new.subject_id,
                subject_name=new.subject_name,
                format=new.format,
                parameters=dict(new.parameters),
                options=dict(new.options),
                filename=new.filename,
                storage_key=new.storage_key,
                status=Status.QUEUED,
                attempt=0,
                created_at=new.created_at,
            )
            self._exports[new.id] = record
            self._event(record, EventKind.REQUESTED, new.created_at)
            self.deliveries.extend((new.id, d) for d in deliveries)
            return record

    def get_export(self, export_id: str) -> ExportRecord | None:
        with self._lock:
            return self._exports.get(export_id)

    def list_exports(
        self,
        *,
        workspace_id: str,
        requested_by: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
        expired_at: tuple[bool, datetime] | None = None,
    ) -> list[ExportRecord]:
        with self._lock:
            rows = [
                r
                for r in self._exports.values()
                if r.workspace_id == workspace_id
                and (requested_by is None or r.requested_by == requested_by)
                and (status is None or r.status is status)
                and (before is None or (r.created_at, r.id) < before)
                and (expired_at is None or _expired(r, expired_at[1]) is expired_at[0])
            ]
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        return rows[:limit]

    def has_unsettled(self) -> bool:
        with self._lock:
            return any(r.status in UNSETTLED for r in self._exports.values())

    @staticmethod
    def _is_claimable(record: ExportRecord, now: datetime) -> bool:
        if record.status is Status.QUEUED:
            return True
        return (
            record.status is Status.RUNNING
            and record.lease_expires_at is not None
            and record.lease_expires_at < now
        )

    def claim_next(
        self,
        *,
        worker_id: str,
        now: datetime,
        lease_seconds: float,
        admit: Admission,
        max_running_per_user: int | None = None,
    ) -> ClaimResult:
        with self._lock:
            candidate = self._fair_candidate(now, max_running_per_user)
            if candidate is None:
                return ClaimResult()
            if candidate.status is Status.QUEUED:
                standing = self._standing(candidate.workspace_id, candidate.requested_by)
                refusal = admit(candidate, self._subject(candidate), standing)
                if refusal is not None:
                    refused = replace(
                        candidate,
                        status=Status.FAILED,
                        failure_code=FailureCode.ACCESS_LOST,
                        failure_detail=bounded_detail(refusal) or "access_lost",
                        completed_at=now,
                    )
                    self._exports[candidate.id] = refused
                    self._event(refused, EventKind.REFUSED, now)
                    return ClaimResult(refused=refused)
            return ClaimResult(
                claimed=self.claim(
                    candidate.id, worker_id=worker_id, now=now, lease_seconds=lease_seconds
                ),
                query=self._subject(candidate),
            )

    def _fair_candidate(self, now: datetime, max_running: int | None) -> ExportRecord | None:
        running: Counter[RequesterKey] = Counter()
        waiting: dict[RequesterKey, list[ExportRecord]] = {}
        last_started: dict[RequesterKey, datetime] = {}
        for r in self._exports.values():
            key = (r.workspace_id, r.requested_by)
            if r.started_at is not None and (
                key not in last_started or r.started_at > last_started[key]
            ):
                last_started[key] = r.started_at
            if self._is_claimable(r, now):
                waiting.setdefault(key, []).append(r)
            elif r.status is Status.RUNNING:
                running[key] += 1
        queues = [
            RequesterQueue(
                key, running[key], min(r.created_at for r in found), last_started.get(key)
            )
            for key, found in waiting.items()
        ]
        order = claim_order(queues, max_running)
        return min(waiting[order[0]], key=lambda r: (r.created_at, r.id)) if order else None

    def _subject(self, record: ExportRecord) -> Query | ReportSubject | None:
        if record.subject_type != SUBJECT_REPORT:
            return self._queries.get(record.subject_id)
        report = self._reports.get(record.subject_id)
        if report is None:
            return ReportSubject(None)
        ids = {s.query_id for s in report.sections}
        return ReportSubject(report, {query_id: self._queries.get(query_id) for query_id in ids})

    def next_claimable(self, now: datetime) -> ExportRecord | None:
        with self._lock:
            candidates = [r for r in self._exports.values() if self._is_claimable(r, now)]
        return min(candidates, key=lambda r: (r.created_at, r.id), default=None)

    def _write(
        self,
        export_id: str,
        guard: Callable[[ExportRecord], bool],
        event: tuple[EventKind, datetime] | None = None,
        **changes: Any,
    ) -> ExportRecord | None:
        with self._lock:
            record = self._exports.get(export_id)
            if record is None or not guard(record):
                return None
            updated = replace(record, **changes)
            self._exports[export_id] = updated
            if event is not None:
                self._event(updated, *event)
            return updated

    def claim(
        self, export_id: str, *, worker_id: str, now: datetime, lease_seconds: float
    ) -> ExportRecord | None:
        with self._lock:
            record = self._exports.get(export_id)
            if record is None or not self._is_claimable(record, now):
                return None
            updated = replace(
                record,
                status=Status.RUNNING,
                attempt=record.attempt + 1,
                lease_token=str(uuid.uuid4()),
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                worker_id=worker_id,
                started_at=record.started_at or now,
                progress_rows=0,
            )
            self._exports[export_id] = updated
            kind = EventKind.CLAIMED if updated.attempt == 1 else EventKind.REDELIVERED
            self._event(updated, kind, now)
            return updated

    @staticmethod
    def _fence(token: str) -> Callable[[ExportRecord], bool]:
        return lambda r: r.status is Status.RUNNING and r.lease_token == token

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool:
        return (
            self._write(
                export_id,
                self._fence(token),
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                progress_rows=progress_rows,
            )
            is not None
        )

    def release_with_backoff(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        delay_seconds: float,
        code: FailureCode,
        detail: str,
    ) -> bool:
        return (
            self._write(
                export_id,
                self._fence(token),
                (EventKind.RELEASED, now),
                lease_expires_at=now + timedelta(seconds=delay_seconds),
                last_error_code=code,
                last_error_detail=bounded_detail(detail),
            )
            is not None
        )

    def succeed(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        result: Result,
        expires_at: datetime,
        quota_bytes: int | None = None,
    ) -> bool:
        with self._lock:
            record = self._exports.get(export_id)
            if quota_bytes and record is not None:
                used = sum(
                    r.size_bytes or 0
                    for r in self._exports.values()
                    if r.workspace_id == record.workspace_id
                    and r.status is Status.SUCCEEDED
                    and r.expires_at is not None
                    and r.expires_at > now
                )
                check_workspace_quota(used, result.size_bytes, quota_bytes)
            return self._succeed(export_id, token, now=now, result=result, expires_at=expires_at)

    def _succeed(
        self, export_id: str, token: str, *, now: datetime, result: Result, expires_at: datetime
    ) -> bool:
        return (
            self._write(
                export_id,
                self._fence(token),
                (EventKind.SUCCEEDED, now),
                status=Status.SUCCEEDED,
                size_bytes=result.size_bytes,
                row_count=result.row_count,
                sha256=result.sha256,
                progress_rows=result.row_count,
                completed_at=now,
                expires_at=expires_at,
            )
            is not None
        )

    def _settle_failed(
        self,
        export_id: str,
        guard: Callable[[ExportRecord], bool],
        now: datetime,
        code: FailureCode,
        detail: str,
        kind: EventKind = EventKind.FAILED,
    ) -> bool:
        return (
            self._write(
                export_id,
                guard,
                (kind, now),
                status=Status.FAILED,
                failure_code=code,
                failure_detail=bounded_detail(detail) or code.value,
                completed_at=now,
            )
            is not None
        )

    def fail(
        self, export_id: str, token: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool:
        return self._settle_failed(export_id, self._fence(token), now, code, detail)

    def fail_before_run(
        self, export_id: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool:
        return self._settle_failed(
            export_id, lambda r: r.status is Status.QUEUED, now, code, detail, EventKind.REFUSED
        )

    def cancel(self, export_id: str, *, now: datetime) -> bool:
        return self._settle_failed(
            export_id,
            lambda r: r.status in UNSETTLED,
            now,
            FailureCode.CANCELLED,
            "cancelled by the requester",
            EventKind.CANCELLED,
        )

    # saved queries
    def add_query(self, query: Query) -> Query:
        with self._lock:
            if self._live_query(query.workspace_id, query.name) is not None:
                raise InvalidRequestError(
                    f"a query named {query.name!r} already exists", field="name"
                )
            self._queries[query.id] = query
        return query

    def _live_query(self, workspace_id: str, name: str) -> Query | None:
        for query in self._queries.values():
            if query.workspace_id == workspace_id and query.name == name and not query.deleted:
                return query
        return None

    def get_query(self, query_id: str) -> Query | None:
        with self._lock:
            return self._queries.get(query_id)

    def find_query(self, workspace_id: str, name: str) -> Query | None:
        with self._lock:
            return self._live_query(workspace_id, name)

    def list_queries(self, workspace_id: str) -> list[Query]:
        with self._lock:
            live = [
                q
                for q in self._queries.values()
                if q.workspace_id == workspace_id and not q.deleted
            ]
        return sorted(live, key=lambda q: q.name)

    def update_query(self, query: Query) -> bool:
        with self._lock:
            current = self._queries.get(query.id)
            if current is None or current.deleted:
                return False
            self._queries[query.id] = replace(query, workspace_id=current.workspace_id)
            return True

    def delete_query(self, query_id: str) -> bool:
        with self._lock:
            current = self._queries.get(query_id)
            if current is None or current.deleted:
                return False
            self._queries[query_id] = replace(current, deleted=True)
            return True

    # reports
    def add_report(self, report: Report) -> Report:
        with self._lock:
            if report.id in self._reports:
                raise ValueError("duplicate report id")
            self._reports[report.id] = report
        return report

    def get_report(self, report_id: str) -> Report | None:
        with self._lock:
            return self._reports.get(report_id)

    def list_reports(self, workspace_id: str) -> list[Report]:
        with self._lock:
            live = [
                r
                for r in self._reports.values()
                if r.workspace_id == workspace_id and not r.deleted
            ]
        return sorted(live, key=lambda r: (r.title, r.id))

    def update_report(self, report: Report) -> bool:
        with self._lock:
            current = self._reports.get(report.id)
            if current is None or current.deleted:
                return False
            self._reports[report.id] = replace(report, workspace_id=current.workspace_id)
            return True

    def delete_report(self, report_id: str) -> bool:
        with self._lock:
            current = self._reports.get(report_id)
            if current is None or current.deleted:
                return False
            self._reports[report_id] = replace(current, deleted=True)
            return True


class _InMemoryUpload:
    def __init__(self, store: InMemoryObjectStore, key: str, upload_id: str) -> None:
        self.key = key
        self.upload_id = upload_id
        self.staged = True  # parts are kept apart from the object until completion
        self._store = store
        self.parts: dict[int, bytes] = {}

    def upload_part(self, number: int, data: bytes | bytearray | memoryview) -> None:
        self.parts[number] = bytes(data)

    def complete(self, *, rows: int, sha256: str) -> StoredObject:
        data = b"".join(self.parts[n] for n in sorted(self.parts))
        with self._store.lock:
            self._store.uploads.pop(self.upload_id, None)
            if self.key in self._store.objects:
                raise ObjectExistsError(f"an object is already stored at {self.key}")
            stored = StoredObject(self.key, len(data), rows, sha256)
            self._store.objects[self.key] = (data, stored)
        return stored

    def abort(self) -> None:
        with self._store.lock:
            self._store.uploads.pop(self.upload_id, None)


class InMemoryObjectStore:
    """The ObjectStore contract in memory: create-if-absent completion, abort."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[bytes, StoredObject]] = {}
        self.uploads: dict[str, _InMemoryUpload] = {}

    def begin_upload(self, key: str) -> _InMemoryUpload:
        upload = _InMemoryUpload(self, key, uuid.uuid4().hex)
        with self.lock:
            self.uploads[upload.upload_id] = upload
        return upload

    def head(self, key: str) -> StoredObject | None:
        with self.lock:
            entry = self.objects.get(key)
        return entry[1] if entry else None

    def open(self, key: str) -> BinaryIO:
        with self.lock:
            entry = self.objects.get(key)
        if entry is None:
            raise NotFoundError(f"no object at {key}")
        return io.BytesIO(entry[0])

    def delete(self, key: str) -> None:
        with self.lock:
            self.objects.pop(key, None)

    def incomplete_uploads(self, key: str) -> Sequence[str]:
        with self.lock:
            return [u.upload_id for u in self.uploads.values() if u.key == key]

    def discard_staging(self, key: str) -> int:
        with self.lock:
            found = [u.upload_id for u in self.uploads.values() if u.key == key]
            for upload_id in found:
                del self.uploads[upload_id]
        return len(found)

    def staged_keys(self) -> Sequence[str]:
        with self.lock:
            return sorted({u.key for u in self.uploads.values()})


class InMemoryAccountStore:
    """The AccountStore contract on dicts, guarded by one lock.

    `standing` plugs it into an InMemoryMetadataStore, whose pre-run check then sees the
    same members: `InMemoryMetadataStore(standing=accounts.standing)`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workspaces: dict[str, datetime] = {}
        self._timezones: dict[str, str] = {}  # set ones only; the rest are UTC
        self._webhook_hosts: dict[str, tuple[str, ...]] = {}  # restricted workspaces only
        self._users: dict[str, User] = {}
        self._roles: dict[tuple[str, str], Role] = {}  # (workspace id, user id) -> role
        self._tokens: dict[str, ApiToken] = {}
        self._links: dict[str, tuple[Link, str]] = {}  # id -> (link, token hash)
        self._sources: dict[str, RegisteredSource] = {}
        self._failures: list[tuple[str | None, str, datetime]] = []  # (email, address, at)

    def standing(self, workspace_id: str, user_id: str) -> Standing:
        with self._lock:
            registered = workspace_id in self._workspaces
            user = self._users.get(user_id)
            disabled = user is not None and user.disabled_at is not None
            return Standing(registered, self._roles.get((workspace_id, user_id)), disabled)

    # workspaces and users
    def ensure_workspace(self, workspace_id: str, *, now: datetime) -> bool:
        with self._lock:
            if workspace_id in self._workspaces:
                return False
            self._workspaces[workspace_id] = now
            return True

    def workspace_exists(self, workspace_id: str) -> bool:
        with self._lock:
            return workspace_id in self._workspaces

    def workspace_timezone(self, workspace_id: str) -> str:
        with self._lock:
            return self._timezones.get(workspace_id, "UTC")

    def set_workspace_timezone(self, workspace_id: str, zone: str) -> bool:
        with self._lock:
            if workspace_id not in self._workspaces:
                return False
            self._timezones[workspace_id] = zone
            return True

    def workspace_webhook_hosts(self, workspace_id: str) -> tuple[str, ...] | None:
        with self._lock:
            return self._webhook_hosts.get(workspace_id)

    def set_workspace_webhook_hosts(self, workspace_id: str, hosts: tuple[str, ...] | None) -> bool:
        with self._lock:
            if workspace_id not in self._workspaces:
                return False
            if hosts is None:
                self._webhook_hosts.pop(workspace_id, None)
            else:
                self._webhook_hosts[workspace_id] = hosts
            return True

    def create_user(
        self, email: str, *, password_hash: str | None, now: datetime, user_id: str | None = None
    ) -> User:
        user = User(user_id or str(uuid.uuid4()), email, now, password_hash)
        with self._lock:
            if user.id in self._users or any(u.email == email for u in self._users.values()):
                raise InvalidRequestError(f"a user {email!r} already exists", field="email")
            self._users[user.id] = user
        return user

    def get_user(self, user_id: str) -> User | None:
        with self._lock:
            return self._users.get(user_id)

    def find_user(self, email: str) -> User | None:
        with self._lock:
            return next((u for u in self._users.values() if u.email == email), None)

    def set_password(self, user_id: str, password_hash: str | None) -> bool:
        with self._lock:
            user = self._users.get(user_id)
            if user is None:
                return False
            self._users[user_id] = replace(
                user, password_hash=password_hash, session_epoch=user.session_epoch + 1
            )
            return True

    def end_sessions(self, user_id: str) -> bool:
        with self._lock:
            return self._next_epoch(user_id)

    def _next_epoch(self, user_id: str) -> bool:
        user = self._users.get(user_id)
        if user is not None:
            self._users[user_id] = replace(user, session_epoch=user.session_epoch + 1)
        return user is not None

    def set_disabled(self, user_id: str, *, disabled_at: datetime | None) -> bool:
        with self._lock:
            user = self._users.get(user_id)
            if user is None or (disabled_at is None) == (user.disabled_at is None):
                return False
            self._users[user_id] = replace(user, disabled_at=disabled_at)
            if disabled_at is not None:
                self._next_epoch(user_id)
            return True

    def set_role(self, workspace_id: str, user_id: str, role: Role) -> None:
        with self._lock:
            self._roles[workspace_id, user_id] = role

    def remove_member(
        self, workspace_id: str, user_id: str, *, keep_an_admin: bool = False
    ) -> bool:
        with self._lock:
            admins = {
                u for (w, u), r in self._roles.items() if w == workspace_id and r is Role.ADMIN
            }
            if keep_an_admin and admins == {user_id}:
                raise ConflictError(f"it would leave workspace {workspace_id!r} without an admin")
            if self._roles.pop((workspace_id, user_id), None) is None:
                return False
            self._next_epoch(user_id)
            return True

    def role_of(self, workspace_id: str, user_id: str) -> Role | None:
        with self._lock:
            return self._roles.get((workspace_id, user_id))

    def memberships_of(self, user_id: str) -> list[Membership]:
        with self._lock:
            found = [Membership(w, u, r) for (w, u), r in self._roles.items() if u == user_id]
        return sorted(found, key=lambda m: m.workspace_id)

    def members(self, workspace_id: str) -> list[Membership]:
        with self._lock:
            found = [Membership(w, u, r) for (w, u), r in self._roles.items() if w == workspace_id]
        return sorted(found, key=lambda m: m.user_id)

    # API tokens
    def add_token(
        self, *, token_id: str, user_id: str, workspace_id: str, secret_hash: str, now: datetime
    ) -> ApiToken:
        token = ApiToken(token_id, user_id, workspace_id, now, secret_hash=secret_hash)
        with self._lock:
            if token_id in self._tokens:
                raise ValueError(f"duplicate token id {token_id!r}")
            self._tokens[token_id] = token
        return token

    def get_token(self, token_id: str) -> ApiToken | None:
        with self._lock:
            return self._tokens.get(token_id)

    def list_tokens(self, user_id: str) -> list[ApiToken]:
        with self._lock:
            found = [t for t in self._tokens.values() if t.user_id == user_id]
        return sorted(found, key=lambda t: t.created_at)

    def touch_token(self, token_id: str, *, now: datetime) -> None:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None:
                return
            if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
                self._tokens[token_id] = replace(token, last_used_at=now)

    def revoke_token(self, token_id: str, *, now: datetime) -> bool:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None or token.revoked_at is not None:
                return False
            self._tokens[token_id] = replace(token, revoked_at=now)
            return True

    def revoke_tokens(self, user_id: str, *, workspace_id: str, now: datetime) -> int:
        with self._lock:
            live = [
                t
                for t in self._tokens.values()
                if t.user_id == user_id and t.workspace_id == workspace_id and t.revoked_at is None
            ]
            for token in live:
                self._tokens[token.id] = replace(token, revoked_at=now)
            return len(live)

    # sign-in failures
    def sign_in_failures(
        self, email: str, address: str, *, since: datetime
    ) -> tuple[Failures, Failures]:
        with self._lock:
            recent = [f for f in self._failures if f[2] > since]
        by_email = [at for e, _, at in recent if e == email]
        by_address = [at for _, a, at in recent if a == address]
        return (
            Failures(len(by_email), max(by_email, default=None)),
            Failures(len(by_address), max(by_address, default=None)),
        )

    def record_sign_in_failure(
        self, email: str, address: str, *, now: datetime, forget_before: datetime
    ) -> None:
        with self._lock:
            self._failures = [f for f in self._failures if f[2] >= forget_before]
            self._failures.append((email, address, now))

    def clear_sign_in_failures(self, email: str) -> None:
        with self._lock:
            self._failures = [(None if e == email else e, a, at) for e, a, at in self._failures]

    # public links
    def add_link(
        self,
        *,
        export_id: str,
        created_by: str,
        token_hash: str,
        now: datetime,
        max_live: int | None = None,
    ) -> Link:
        link = Link(str(uuid.uuid4()), export_id, created_by, now)
        with self._lock:
            live = sum(
                1
                for other, _ in self._links.values()
                if other.export_id == export_id and other.revoked_at is None
            )
            if max_live is not None and live >= max_live:
                raise link_cap_reached(live, max_live)
            if any(h == token_hash for _, h in self._links.values()):
                raise ValueError("duplicate link token")
            self._links[link.id] = (link, token_hash)
        return link

    def get_link(self, link_id: str) -> Link | None:
        with self._lock:
            entry = self._links.get(link_id)
        return entry[0] if entry else None

    def find_link(self, token_hash: str) -> Link | None:
        with self._lock:
            return next((link for link, h in self._links.values() if h == token_hash), None)

    def revoke_link(self, link_id: str, *, now: datetime) -> bool:
        with self._lock:
            entry = self._links.get(link_id)
            if entry is None or entry[0].revoked_at is not None:
                return False
            self._links[link_id] = (replace(entry[0], revoked_at=now), entry[1])
            return True

    # registered sources
    def add_source(self, source: RegisteredSource) -> None:
        with self._lock:
            if source.name in self._sources:
                raise InvalidRequestError(
                    f"a source named {source.name!r} already exists", field="name"
                )
            self._sources[source.name] = source

    def registered_sources(self) -> dict[str, RegisteredSource]:
        with self._lock:
            return dict(sorted(self._sources.items()))

    def share_source(self, name: str, workspace_id: str, *, shared: bool) -> bool:
        with self._lock:
            source = self._sources.get(name)
            if source is None:
                raise NotFoundError(f"no registered source {name!r}")
            if (workspace_id in source.shared_with) == shared:
                return False
            listed = (
                source.shared_with | {workspace_id}
                if shared
                else source.shared_with - {workspace_id}
            )
            self._sources[name] = replace(source, shared_with=frozenset(listed))
            return True


class FixedSources:
    """A SourceCatalog over sources given up front that the listed workspaces (by default
    every one) may use: for tests whose subject is not who may use a source."""

    def __init__(
        self, sources: Mapping[str, Source], workspaces: Collection[str] = (EVERY_WORKSPACE,)
    ) -> None:
        self._sources = dict(sources)
        self._workspaces = frozenset(workspaces)

    def source_for(self, name: str, workspace_id: str) -> Source:
        found = self._sources.get(name)
        if found is None:
            raise SourceUnavailableError(f"no data source named {name!r} is configured")
        if not may_use(self._workspaces, workspace_id):
            raise AccessLostError(f"workspace {workspace_id!r} may not use source {name!r}")
        return found

    def names_for(self, workspace_id: str) -> list[str]:
        return sorted(self._sources) if may_use(self._workspaces, workspace_id) else []
