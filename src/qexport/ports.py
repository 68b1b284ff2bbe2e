"""The ports: what the services need from the outside world, as Protocols.

Concrete adapters live in `store/`, `storage/`, `sources/` and `writers/`; in-memory
fakes for the fast unit layer live in `tests/fakes/`. Only `bootstrap.py` picks adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

    from qexport.domain.accounts import (
        ApiToken,
        Link,
        Member,
        Membership,
        Role,
        Standing,
        TokenHolder,
        User,
    )
    from qexport.domain.approvals import ApprovalRequest, Decision, NewApproval
    from qexport.domain.audit import Anchor, AuditEvent, AuditFilter, RecordedEvent
    from qexport.domain.audit_checkpoints import ChainHead
    from qexport.domain.audit_keys import AuditKeys
    from qexport.domain.exports import (
        ExportEvent,
        ExportFilter,
        ExportRecord,
        Requester,
        Result,
        Status,
    )
    from qexport.domain.failures import FailureCode
    from qexport.domain.policies import WorkspacePolicy
    from qexport.domain.queries import Query, ResultColumn
    from qexport.domain.reports import Report, ReportSubject
    from qexport.domain.rule_check import Catalogue
    from qexport.domain.schedules import Delivery, NewDelivery, Outcome, Schedule
    from qexport.domain.sensitivity import ReadsReporting, Relation
    from qexport.domain.sign_in import FailureCounts
    from qexport.domain.sources import RegisteredSource


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


# ---------------------------------------------------------------- export queue and catalog


@dataclass(frozen=True)
class NewExport:
    """Everything fixed at request time, including the storage key."""

    id: str
    workspace_id: str
    requested_by: str
    subject_type: str
    subject_id: str
    subject_name: str
    format: str
    parameters: dict[str, Any]
    options: dict[str, Any]
    filename: str
    storage_key: str
    created_at: datetime


@dataclass(frozen=True)
class ClaimResult:
    """What `claim_next` did: claimed one export, refused one before it ran, or neither."""

    claimed: ExportRecord | None = None
    refused: ExportRecord | None = None
    # The claimed export's subject, its query (or its report with the sections' queries), as
    # read in the claiming transaction (None: not found).
    subject: Query | ReportSubject | None = None


# Decides whether a queued export may start, from its query (None: missing) and its
# requester's standing in the workspace: None to claim it, or the reason it may not.
Admission = Callable[["ExportRecord", "Query | ReportSubject | None", "Standing"], "str | None"]


class ExportQueue(Protocol):
    """Exports, which are also the queue: requests, reads and the lifecycle's transitions.

    Every transition is one conditional write; a method returns False (or None)
    when its guard matched no row, and never changes a settled record.
    """

    # requests and reads
    def insert_export(
        self,
        new: NewExport,
        deliveries: Sequence[NewDelivery] = (),
        *,
        max_unsettled: int | None = None,
        audit: AuditEvent | None = None,
    ) -> ExportRecord:
        """Record and queue the export, with its deliveries (and its `audit` event), in one
        transaction.

        With `max_unsettled`, a requester who already has that many exports queued or
        running is refused (TooManyRequestsError) in the same transaction: concurrent
        requests cannot overshoot the cap.
        """
        ...

    def get_export(self, export_id: str) -> ExportRecord | None: ...
    def get_export_with_query(self, export_id: str) -> tuple[ExportRecord, Query | None] | None:
        """The export with the query it was made from, as `Catalog.get_query` reads it (None
        for a report's export, or a query that is not there), read together."""
        ...

    def list_exports(
        self,
        *,
        workspace_id: str,
        requested_by: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
        expired_at: tuple[bool, datetime] | None = None,
        after: tuple[datetime, str] | None = None,
        narrow: ExportFilter | None = None,
    ) -> list[ExportRecord]:
        """Newest first; `before` (created_at, id) continues after that export, `after`
        gives the `limit` exports just newer than that one (still newest first).

        `expired_at` (expired, now) keeps only exports whose expiry has (True) or has not
        (False, incl. those without one) passed at `now`; `narrow` keeps those it matches.
        """
        ...

    def has_unsettled(self) -> bool: ...
    def list_events(self, export_id: str) -> list[ExportEvent]:
        """Every transition of the export, oldest first (written with the transition)."""
        ...

    # the queue
    def claim_next(
        self,
        *,
        worker_id: str,
        now: datetime,
        lease_seconds: float,
        admit: Admission,
        max_running_per_user: int | None = None,
    ) -> ClaimResult:
        """Claim the oldest claimable export of the requester with the fewest running ones
        (domain/fairness.py; none of a requester already running `max_running_per_user`), in
        one transaction that locks it.

        A queued export is first shown to `admit` with its query (None if missing) and its
        requester's standing; if
        refused it settles queued -> failed/access_lost instead. Concurrent callers never
        take the same export (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: one writer).
        """
        ...

    def heartbeat(
        self, export_id: str, token: str, *, now: datetime, lease_seconds: float, progress_rows: int
    ) -> bool: ...
    def record_progress(self, export_id: str, token: str, *, rows: int) -> bool:
        """Rows written so far, fenced by the lease token, the lease itself untouched and no
        event written; False when the lease is lost (the same as a heartbeat's)."""
        ...

    def release_with_backoff(
        self,
        export_id: str,
        token: str,
        *,
        now: datetime,
        delay_seconds: float,
        code: FailureCode,
        detail: str,
    ) -> bool: ...
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
        """running -> succeeded under the lease. With `quota_bytes`: LimitExceededError,
        nothing written, when the file would take its workspace's unexpired succeeded
        exports past that many bytes (summed in the settling transaction)."""
        ...

    def fail(
        self, export_id: str, token: str, *, now: datetime, code: FailureCode, detail: str
    ) -> bool: ...
    def cancel(self, export_id: str, *, now: datetime, audit: AuditEvent | None = None) -> bool: ...


class Catalog(Protocol):
    """Saved queries and reports of every workspace."""

    # saved queries
    def add_query(self, query: Query, *, audit: AuditEvent | None = None) -> Query: ...
    def get_query(self, query_id: str) -> Query | None: ...
    def find_query(self, workspace_id: str, name: str) -> Query | None: ...
    def list_queries(self, workspace_id: str) -> list[Query]: ...
    def update_query(self, query: Query, *, audit: AuditEvent | None = None) -> bool: ...
    def record_reads(
        self, query_id: str, *, sql: str, source: str, reads: frozenset[Relation] | None
    ) -> bool:
        """Record what a live query reads as its source's planner reports it now, unless its
        SQL or source changed meanwhile (one guarded write); whether it was written."""
        ...

    def delete_query(self, query_id: str, *, audit: AuditEvent | None = None) -> bool: ...

    # reports (a name is not unique; a deleted report stays readable by id, marked deleted)
    def add_report(self, report: Report, *, audit: AuditEvent | None = None) -> Report: ...
    def get_report(self, report_id: str) -> Report | None: ...
    def list_reports(self, workspace_id: str) -> list[Report]: ...
    def update_report(self, report: Report, *, audit: AuditEvent | None = None) -> bool: ...
    def delete_report(self, report_id: str, *, audit: AuditEvent | None = None) -> bool: ...


class AttemptLease(Protocol):
    """What a producer sees of the attempt's lease: stop when it is lost, report progress."""

    progress_rows: int

    def check(self) -> None:
        """Raise when the lease is lost or the worker is shutting down."""
        ...

    def on_stop(self, hook: Callable[[], None]) -> None:
        """Call `hook` (from any thread) when the attempt must stop."""
        ...


# ---------------------------------------------------------------- schedules and deliveries


class ScheduleStore(Protocol):
    """Schedules, and the one transaction that fires a due time."""

    def add_schedule(
        self,
        schedule: Schedule,
        *,
        max_per_workspace: int | None = None,
        audit: AuditEvent | None = None,
    ) -> Schedule:
        """Save a new schedule; InvalidRequestError, with nothing written, when its workspace
        already has `max_per_workspace` live schedules (counted in the inserting transaction)."""
        ...

    def get_schedule(self, schedule_id: str) -> Schedule | None: ...
    def list_schedules(self, workspace_id: str) -> list[Schedule]: ...
    def update_schedule(self, schedule: Schedule, *, audit: AuditEvent | None = None) -> bool:
        """Replace a live schedule's settings (and its next due time)."""
        ...

    def delete_schedule(
        self, schedule_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool: ...
    def pause_owned(self, workspace_id: str, owner: str) -> int:
        """Pause the enabled live schedules `owner` owns in the workspace; how many."""
        ...

    def due_schedules(self, now: datetime, *, limit: int = 100) -> list[Schedule]:
        """Enabled live schedules whose next due time has come, oldest first."""
        ...

    def advance(self, schedule_id: str, *, expected: datetime, next_due_at: datetime) -> bool:
        """Move the next due time on without firing; False if another scheduler moved it."""
        ...

    def fire(
        self,
        schedule_id: str,
        *,
        due_at: datetime,
        new: NewExport,
        deliveries: Sequence[NewDelivery],
        expected: datetime | None = None,
        next_due_at: datetime | None = None,
        max_unsettled: int | None = None,
        audit: AuditEvent | None = None,
    ) -> ExportRecord | None:
        """In ONE transaction: move the next due time from `expected` to `next_due_at` (when
        given), record the run (schedule, due_at), the export and its deliveries. None, with
        nothing written, when another scheduler already did it for this due time.
        TooManyRequestsError, with nothing written, when the owner already has
        `max_unsettled` exports queued or running."""
        ...

    def instance_secret(self, name: str, generate: Callable[[], str], *, now: datetime) -> str:
        """A secret shared by every process of this installation, generated on first use."""
        ...

    def list_runs(self, schedule_id: str, *, limit: int = 10) -> list[ScheduleRun]:
        """The schedule's latest fired due times (run now included), newest first."""
        ...

    # subscribers: members who asked for each run's export at their own address
    def subscribe(self, schedule_id: str, user_id: str, *, now: datetime) -> bool:
        """Add the user to the schedule's subscribers; False when they already were."""
        ...

    def unsubscribe(self, schedule_id: str, user_id: str) -> bool:
        """Take the user off the schedule's subscribers; False when they were not on it."""
        ...

    def subscribers(self, schedule_id: str) -> list[str]:
        """The user ids subscribed to the schedule, in the order they subscribed."""
        ...

    def subscriptions(self, workspace_id: str, user_id: str) -> frozenset[str]:
        """The ids of the workspace's live schedules the user is subscribed to."""
        ...


@dataclass(frozen=True)
class ScheduleRun:
    """One fired due time of a schedule and the export it made."""

    due_at: datetime
    export: ExportRecord


@dataclass(frozen=True)
class ClaimedDelivery:
    delivery: Delivery
    export: ExportRecord


class DeliveryStore(Protocol):
    """Deliveries: claimed once their export has settled; every write fenced by the lease."""

    def claim_delivery(self, *, now: datetime, lease_seconds: float) -> ClaimedDelivery | None: ...
    def mark_sent(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        outcome: Outcome,
        audit: AuditEvent | None = None,
    ) -> bool: ...
    def release_delivery(
        self, delivery_id: str, token: str, *, retry_at: datetime, error: str
    ) -> bool: ...
    def mark_failed(
        self,
        delivery_id: str,
        token: str,
        *,
        now: datetime,
        error: str,
        code: FailureCode | None = None,
    ) -> bool: ...
    def send_again(self, export_id: str, delivery_id: str, *, now: datetime, by: str) -> bool:
        """A failed delivery of the export back to waiting, due now, with a fresh attempt
        budget (`Delivery.tries` from 0), recording when and by whom; False, with nothing
        written, unless it was failed."""
        ...

    def list_deliveries(self, export_id: str) -> list[Delivery]: ...
    def has_unsent(self) -> bool: ...


# ---------------------------------------------------------------- accounts


class AccountStore(Protocol):
    """Workspaces, users and roles, API tokens, public links and registered sources."""

    def ensure_workspace(self, workspace_id: str, *, now: datetime) -> bool: ...
    def workspace_exists(self, workspace_id: str) -> bool: ...
    def workspace_timezone(self, workspace_id: str) -> str:
        """The workspace's IANA time zone; "UTC" when unset or the workspace is unknown."""
        ...

    def set_workspace_timezone(self, workspace_id: str, zone: str) -> bool:
        """Store an (already validated) IANA name; False when there is no such workspace."""
        ...

    def workspace_webhook_hosts(self, workspace_id: str) -> tuple[str, ...] | None:
        """The host names its admin restricted webhooks to; None when unrestricted."""
        ...

    def set_workspace_webhook_hosts(self, workspace_id: str, hosts: tuple[str, ...] | None) -> bool:
        """Store (already normalised) host names, or None to lift the restriction; False when
        there is no such workspace."""
        ...

    def workspace_policy(self, workspace_id: str) -> WorkspacePolicy:
        """The rules its admins set on what may leave (no rules when none are set)."""
        ...

    def set_workspace_policy(
        self,
        workspace_id: str,
        policy: WorkspacePolicy,
        *,
        audit: AuditEvent | None = None,
        revoke_links: Sequence[tuple[str, AuditEvent]] = (),
        now: datetime | None = None,
    ) -> bool:
        """Store the policy (with its `audit` event) and, in the same transaction, revoke at
        `now` each of `revoke_links` (link id, the event of its revocation) still unrevoked,
        appending its event; False, with nothing written, when there is no such workspace."""
        ...

    def create_user(
        self, email: str, *, password_hash: str | None, now: datetime, user_id: str | None = None
    ) -> User: ...
    def get_user(self, user_id: str) -> User | None: ...
    def find_user(self, email: str) -> User | None: ...
    def set_password(self, user_id: str, password_hash: str | None) -> bool:
        """Replace the user's password hash and end their sessions; False when there is no
        such user."""
        ...

    def end_sessions(self, user_id: str) -> bool:
        """End every session of the user (raise their session epoch)."""
        ...

    def set_disabled(self, user_id: str, *, disabled_at: datetime | None) -> bool:
        """Disable the user, ending their sessions, or enable them with None; False when
        there is no such user or it already was."""
        ...

    def set_role(
        self, workspace_id: str, user_id: str, role: Role, *, audit: AuditEvent | None = None
    ) -> None: ...
    def remove_member(
        self,
        workspace_id: str,
        user_id: str,
        *,
        keep_an_admin: bool = False,
        audit: AuditEvent | None = None,
    ) -> bool:
        """End the membership and the user's sessions; False if there was none. With
        `keep_an_admin`, ConflictError rather than remove the workspace's last admin."""
        ...

    def role_of(self, workspace_id: str, user_id: str) -> Role | None: ...
    def member(self, workspace_id: str, user_id: str) -> Member | None:
        """The user and their role in the workspace, in one read; None when there is no
        such user (a user who is not a member has role None)."""
        ...

    def memberships_of(self, user_id: str) -> list[Membership]: ...
    def members(self, workspace_id: str) -> list[Membership]: ...

    def add_token(
        self,
        *,
        token_id: str,
        user_id: str,
        workspace_id: str,
        secret_hash: str,
        now: datetime,
        audit: AuditEvent | None = None,
    ) -> ApiToken: ...
    def get_token(self, token_id: str) -> ApiToken | None: ...
    def token_holder(self, token_id: str) -> TokenHolder | None:
        """The token with its user and the user's role in the token's workspace, in one
        read (what authenticating a request needs); None when there is no such token."""
        ...

    def list_tokens(self, user_id: str) -> list[ApiToken]: ...
    def touch_token(self, token_id: str, *, now: datetime) -> None: ...
    def revoke_token(
        self, token_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool: ...
    def revoke_tokens(self, user_id: str, *, workspace_id: str, now: datetime) -> int: ...

    def sign_in_failures(self, email: str, address: str, *, since: datetime) -> FailureCounts:
        """Sign-in failures since `since`: for the email from the address, for the email, and
        for the client address."""
        ...

    def record_sign_in_failure(
        self, email: str, address: str, *, now: datetime, forget_before: datetime
    ) -> None: ...
    def clear_sign_in_failures(self, email: str, address: str) -> None:
        """Forget the email's failures from `address` (after a sign-in from it); they still
        count for the address, and the email's failures from elsewhere stay."""
        ...

    def add_link(
        self,
        *,
        export_id: str,
        created_by: str,
        token_hash: str,
        now: datetime,
        max_live: int | None = None,
        expires_at: datetime | None = None,
        audit: AuditEvent | None = None,
    ) -> Link:
        """Save a link (working until `expires_at`, or None: while its file does);
        InvalidRequestError, with nothing written, when the export already has `max_live`
        unrevoked links (counted in the inserting transaction). An `audit` event without a
        target id is given the new link's."""
        ...

    def get_link(self, link_id: str) -> Link | None: ...
    def find_link(self, token_hash: str) -> Link | None: ...
    def revoke_link(
        self, link_id: str, *, now: datetime, audit: AuditEvent | None = None
    ) -> bool: ...
    def list_links(self, export_id: str) -> list[Link]:
        """The export's unrevoked links, oldest first."""
        ...

    def touch_link(self, link_id: str, *, now: datetime, unless_since: datetime) -> bool:
        """Record that the link served its file at `now`, unless it already did at or after
        `unless_since` (one guarded write); whether it was written."""
        ...

    def add_source(self, source: RegisteredSource, *, audit: AuditEvent | None = None) -> None:
        """Register a source (its URL as it is to be stored); a name its workspace already
        registered is refused."""
        ...

    def registered_sources(self) -> list[RegisteredSource]:
        """Every registered source, by name, then workspace."""
        ...

    def share_source(
        self,
        owner: str | None,
        name: str,
        workspace_id: str,
        *,
        shared: bool,
        audit: AuditEvent | None = None,
    ) -> bool:
        """Let a workspace use the source `owner` registered as `name`, or stop it; False when
        nothing changed. NotFoundError for an unknown source."""
        ...


# ---------------------------------------------------------------- the audit trail


class AuditLog(Protocol):
    """The audit trail (domain/audit.py): a keyed hash chain of events per workspace.

    A store method that changes something takes `audit=`: the event it appends in its own
    transaction when the change is made (none when its guard matched nothing), so that
    neither is kept without the other. `record` is for the rest (downloads, sign-ins).
    """

    # Events `record` could not record since this process started (/metrics reports it).
    failures: int

    @property
    def keys(self) -> AuditKeys:
        """The secrets the chains are keyed with (AuditKeyMissingError when there are none)."""
        ...

    def record(self, event: AuditEvent) -> bool:
        """Append `event` in a short transaction of its own; never raises (False, logged and
        counted, when it could not be recorded)."""
        ...

    def record_soon(self, event: AuditEvent) -> Future[bool]:
        """Have `event` appended shortly, with others, without waiting for it: the future
        settles with what `record` would have returned."""
        ...

    def list_events(
        self,
        *,
        workspace_id: str | None,
        narrow: AuditFilter,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[RecordedEvent]:
        """Newest first; `before_id` continues after that event; None: every workspace."""
        ...

    def chains(self) -> list[str]:
        """The workspaces that have a chain (events, or an anchor left by pruning)."""
        ...

    def anchor(self, workspace_id: str) -> Anchor:
        """Where the workspace's chain starts (64 zeros and sequence 0 until it is pruned)."""
        ...

    def chain(self, workspace_id: str) -> Iterator[RecordedEvent]:
        """The workspace's events, oldest first."""
        ...

    def event_at(self, workspace_id: str, seq: int) -> RecordedEvent | None:
        """The workspace's event at sequence `seq`, if the trail holds it."""
        ...

    def heads(self, *, after_id: int = 0) -> list[ChainHead]:
        """The head of each chain with an event whose id is above `after_id`."""
        ...

    def unkeyed_chains(self) -> list[str]:
        """The workspaces whose chain holds events from before keys."""
        ...

    def prune(self, *, before: datetime, event: AuditEvent) -> dict[str, int]:
        """Delete the events written before `before`, keeping each chain verifiable from its
        first kept event (an `audit.pruned` event in each chain names its anchor), and
        record `event` in the same transaction; how many, per chain."""
        ...


# ---------------------------------------------------------------- approvals


class ApprovalStore(Protocol):
    """Export requests of sensitive queries, waiting for an admin (domain/approvals.py)."""

    def add_approval(
        self,
        new: NewApproval,
        *,
        audit: AuditEvent | None = None,
        max_waiting: int | None = None,
    ) -> ApprovalRequest:
        """Record `new` with its event; TooManyRequestsError, and nothing recorded, when its
        requester already has `max_waiting` requests waiting in its workspace (counted with
        the insert, so requests sent at once cannot pass the cap together)."""
        ...

    def get_approval(self, approval_id: str) -> ApprovalRequest | None: ...
    def list_approvals(
        self,
        workspace_id: str,
        *,
        requested_by: str | None = None,
        pending_at: datetime | None = None,
        limit: int = 100,
    ) -> list[ApprovalRequest]:
        """Newest first; `pending_at`: only those still pending (unexpired) at that time."""
        ...

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
        """Decide a request that is pending and unexpired at `now` (None when it is not: the
        guard matched nothing and nothing changed); an approval inserts `export`, queued, in
        the same transaction."""
        ...

    def pending_approvals(self, now: datetime) -> dict[str, int]:
        """How many requests are pending at `now`, per workspace."""
        ...


# ---------------------------------------------------------------- object store


@dataclass(frozen=True)
class StoredObject:
    key: str
    size_bytes: int
    rows: int
    sha256: str


class Upload(Protocol):
    """One multipart upload to a fixed key. Parts are numbered from 1, in order."""

    key: str
    # True once anything may have been stored apart from the final object (a staged part, a
    # multipart upload asked for, even one whose answer was lost): `discard_staging` is due.
    staged: bool

    def upload_part(self, number: int, data: bytes | bytearray | memoryview) -> None:
        """Store part `number`; `data` is only valid during the call (copy to keep it)."""
        ...

    def complete(self, *, rows: int, sha256: str) -> StoredObject:
        """Atomic create-if-absent; raises ObjectExistsError when the key is taken."""
        ...

    def abort(self) -> None: ...


class ObjectStore(Protocol):
    def begin_upload(self, key: str) -> Upload: ...
    def head(self, key: str) -> StoredObject | None: ...
    def open(self, key: str) -> BinaryIO: ...
    def delete(self, key: str) -> None: ...
    def incomplete_uploads(self, key: str) -> Sequence[str]:
        """Ids of uploads to `key` that were begun and neither completed nor aborted."""
        ...

    def discard_staging(self, key: str) -> int:
        """Remove everything any upload staged for `key` and abort every upload to it still
        incomplete; the completed object stays. Returns how many leftovers were found.

        For a settled export only: an upload still being written to `key` is destroyed too.
        """
        ...

    def staged_keys(self) -> Sequence[str]:
        """The keys that something is staged for (incomplete uploads, staged parts)."""
        ...

    def put_new(self, key: str, data: bytes) -> bool:
        """Store the small object `data` at `key` unless an object is there (create-if-absent,
        as a completion is); False, nothing written, when the key is taken. Read it back with
        `open`. For qexport's own records (audit checkpoints), outside `exports/`."""
        ...

    def names_under(self, prefix: str, *, limit: int | None = None) -> list[str]:
        """The names directly under `prefix` (a key ending in "/"), in byte order, at most
        `limit`: an object's name, or a folder's with a "/" after it. Empty when none."""
        ...


class Presigner(Protocol):
    """An object store that can sign a time-limited GET URL (S3); the container says whether
    its store is one (`Container.presigner`)."""

    presign_seconds: int

    def presigned_url(self, key: str, filename: str, *, max_seconds: float | None = None) -> str:
        """A GET URL valid at most `max_seconds`, downloading as `filename`."""
        ...


class LocalFiles(Protocol):
    """An object store whose objects are files on this machine (the filesystem store); the
    container says whether its store is one (`Container.local_files`)."""

    def local_path(self, key: str) -> Path:
        """Where the object for `key` lives on disk."""
        ...


class RetentionRules(Protocol):
    """The object store's retention: files expire retention + 1 day after completion,
    uploads left incomplete are dropped after 1 day."""

    where: str  # the store, as an operator names it (a folder, s3://bucket/prefix)
    swept: bool  # True: no rules are kept, `apply` is a sweep to run from cron

    def apply(self, now: datetime, retention: timedelta) -> str:
        """Write the rules, or sweep; one line saying what was done."""
        ...

    def drift(self, retention: timedelta) -> list[str]:
        """How the rules in place differ from what they should be (empty: in place)."""
        ...


# ---------------------------------------------------------------- sources


class ResultStream(Protocol):
    """A query result being read: its schema and its record batches, read once."""

    schema: pa.Schema

    def __iter__(self) -> Iterator[pa.RecordBatch]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class PreviewRows:
    """The first rows of a result, as a source read them for a preview."""

    columns: tuple[ResultColumn, ...]  # names and the engine's own type names
    table: pa.Table  # at most the rows asked for, in the result's order
    more: bool  # the result goes on past these rows (or reading stopped at the byte bound)


class Source(Protocol):
    name: str
    # How much its planner says of what a statement reads, and how its engine compares names
    # (domain/sensitivity.py).
    reads_reporting: ReadsReporting

    def execute(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> ResultStream:
        """Run `sql` read-only with bound parameters and the requester context.

        `on_interrupt` receives, before the statement starts, a function that stops it from
        any thread. `batch_rows`: at most this many rows a batch, for a reader that keeps
        few rows (a source whose batches are bounded by bytes may ignore it). Raises
        QueryInvalidError, QueryTimeoutError or SourceUnavailableError.
        """
        ...

    def describe(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> list[ResultColumn]:
        """The columns `sql` returns (names, the engine's type names), without running it.

        The same checks and binding as `execute`, with the requester's rights; nothing is read
        but the catalogue. Raises QueryInvalidError (with the position in `sql` when the
        engine gives one), QueryTimeoutError or SourceUnavailableError.
        """
        ...

    def preview(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        max_rows: int,
        max_cell_chars: int,
        max_bytes: int,
    ) -> PreviewRows:
        """The first `max_rows` rows of `sql` and its columns, run as `execute` runs it (the
        same checks and binding, the requester's context, read-only, the timeout), reading
        no more than it shows: the statement is cut after `max_rows` + 1 rows, and reading
        stops once about `max_bytes` of values came (`more` then says so). A text or binary
        value longer than `max_cell_chars` may come cut to `max_cell_chars` + 1 characters
        (bytes): the caller still sees it was longer. Raises as `execute` does.
        """
        ...

    def relations(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """The tables `sql` reads (and the columns, where `reads_reporting` says so), as the
        engine's planner reports them, views, CTEs and subqueries resolved to the tables they
        scan; None when the source cannot say. Planned as `execute` would run it (the same
        checks, binding and rights), nothing run. Raises as `describe` does.
        """
        ...

    def check_role(self) -> list[str]:
        """Judge the login the source connects as, connecting where its kind can (PostgreSQL,
        MySQL): SourceRefusedError for one that could reach more than its grants (a
        superuser, a role it may become...) and is not allowed to; the allowed findings
        otherwise. A kind that has no login to judge returns [] without connecting."""
        ...


@runtime_checkable
class CataloguedSource(Source, Protocol):
    """A source that can say what its catalogue holds, for the policy's sensitive tables
    (domain/rule_check.py): DuckDB, PostgreSQL, MySQL."""

    def catalogue(self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float) -> Catalogue:
        """What the catalogue says of each `(schema, table)` (names as the engine holds
        them), in that order, and the identity of the data the source reaches; read as
        the source's own login, with no member's context (nothing is run but catalogue
        reads and plans). Raises SourceUnavailableError (or the source's errors) when it
        cannot be asked; with no tables, asks only the identity."""
        ...


class SourceCatalog(Protocol):
    """The sources by name, and which workspaces may use each."""

    def source_for(self, name: str, workspace_id: str) -> Source:
        """The source `name` means in the workspace (names are per workspace); AccessLostError
        if it means none there, SourceUnavailableError for a name known nowhere."""
        ...

    def names_for(self, workspace_id: str) -> list[str]:
        """The names of the sources the workspace may use, sorted."""
        ...


@runtime_checkable
class NativeCopySource(Source, Protocol):
    """A source that can write some formats itself, faster than batches + a writer."""

    native_formats: frozenset[str]

    def copy(  # noqa: PLR0913 - the native copy's contract: the statement, its values and options
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        fmt: str,
        neutralize_formulas: bool,
        sink: Sink,
        timeout_seconds: float,
        max_rows: int,
        on_progress: Callable[[int], None] | None = None,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
    ) -> int:
        """Write the result as `fmt` into `sink`, same contract as the writers; return rows.

        `on_interrupt` receives a function that stops the running statement from any thread.
        """
        ...


# ---------------------------------------------------------------- previews

# A value as a preview shows it: JSON-safe and exact (writers/cells.py makes them).
Cell = None | bool | int | float | str


@dataclass(frozen=True)
class PreviewJob:
    """One preview's statement, checked and bound by the service, for a PreviewRunner."""

    source: str  # the source's name, which the workspace was allowed to use
    sql: str
    values: dict[str, Any]  # the parameters, typed and bound as an export binds them
    requester: Requester
    timeout_seconds: float
    max_rows: int
    max_cell_chars: int
    max_bytes: int


@dataclass(frozen=True)
class DescribeJob:
    """A statement to describe (its columns, without running it), for a PreviewRunner."""

    source: str
    sql: str
    values: dict[str, Any]
    requester: Requester
    timeout_seconds: float


@dataclass(frozen=True)
class PlanJob:
    """A statement to plan (the tables and columns it reads, Source.relations, nothing run),
    for a PreviewRunner."""

    source: str
    sql: str
    values: dict[str, Any]
    requester: Requester
    timeout_seconds: float


@dataclass(frozen=True)
class CatalogueJob:
    """The tables sensitive-table rules name, to look up in `source`'s catalogue (and the
    identity of its data), for a PreviewRunner: no member's rights are involved."""

    source: str
    workspace_id: str  # the workspace whose policy names them (which may use the source)
    tables: tuple[tuple[str, str], ...]
    timeout_seconds: float


@dataclass(frozen=True)
class PreviewCells:
    """What a preview shows: the columns, at most `max_rows` rows of cells (texts cut at
    `max_cell_chars`, about `max_bytes` in all), and what was left out."""

    columns: tuple[ResultColumn, ...]
    rows: list[list[Cell]]
    more: bool  # rows were left out: the result goes on, or the byte bound was reached
    cut: int  # texts cut at max_cell_chars


class PreviewRunner(Protocol):
    """Runs previews, and the describes of queries being saved, away from the process that
    asks, where their memory is bounded."""

    def run(self, job: PreviewJob) -> PreviewCells:
        """The job's rows as cells, read by `job.source` with the requester's rights.

        Raises what the source raises (QueryInvalidError, QueryTimeoutError,
        SourceUnavailableError, AccessLostError), and LimitExceededError, naming the limit,
        when the preview needs more memory than a preview may use.
        """
        ...

    def describe(self, job: DescribeJob) -> tuple[ResultColumn, ...]:
        """The columns `job.sql` returns on `job.source` (Source.describe), with the
        requester's rights; raises as `run` does."""
        ...

    def relations(self, job: PlanJob) -> frozenset[Relation] | None:
        """What `job.sql` reads on `job.source` as its planner reports it (Source.relations;
        None: the source cannot say), with the requester's rights; raises as `run` does."""
        ...

    def catalogue(self, job: CatalogueJob) -> Catalogue | None:
        """What `job.source`'s catalogue says of `job.tables` (CataloguedSource.catalogue);
        None for a source that cannot say. Raises as `run` does."""
        ...

    def prepare(self) -> None:
        """Begin starting what runs previews, without waiting for it: a server calls this as
        it starts, so that its first preview does not wait for it."""
        ...

    def close(self) -> None:
        """Stop what runs previews (their processes); the next `run` starts them again."""
        ...


class RateLimits(Protocol):
    """How often something may be done, per key, over every process of the installation."""

    def admit(self, key: str, *, now: datetime, limit: int, window: timedelta) -> timedelta:
        """Record one use of `key` at `now` when fewer than `limit` fall within `window`
        before it, and return zero; otherwise record nothing and return how long until the
        oldest leaves the window. Atomic per key: concurrent callers are admitted exactly
        `limit` times."""
        ...

    def give_back(self, key: str, *, at: datetime) -> None:
        """Forget one use of `key` recorded at `at` (an admission that turned out not to
        count); nothing when there is none."""
        ...


# ---------------------------------------------------------------- writers


class Sink(Protocol):
    """Where a writer's bytes go (the upload, through hashing and limits)."""

    def write(self, data: bytes | bytearray | memoryview, /) -> int: ...


@dataclass(frozen=True)
class WriterOptions:
    neutralize_formulas: bool = True


class Writer(Protocol):
    extension: str
    media_type: str

    def write(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        sink: Sink,
        options: WriterOptions,
    ) -> int:
        """Encode every batch into `sink`, in bounded memory; return the data row count."""
        ...
