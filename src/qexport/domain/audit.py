"""The audit trail: who did what to which thing, with what outcome, as a hash chain.

Each workspace's events form one chain: an event carries the SHA-256 of the event before it
in its workspace (`prev_hash`; the chain's anchor, or 64 zeros, for the first) and the SHA-256
of its own canonical form (every field but `hash`, as sorted-key compact JSON). Rewriting,
removing or inserting an event breaks every hash after it, so `verify_chain` names the first
event that does not match. Events that belong to no workspace (a sign-in with an unknown
email, the operator's prune of the whole installation) go to the installation's chain.

Pure: no I/O. The store writes events (store/audit.py); services build them
(services/audit.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

# The chain of events that belong to no workspace; not a valid workspace name (a slug).
INSTALLATION = "*"
GENESIS = "0" * 64
# Bounds on what an event carries, so that a hostile value cannot bloat the trail.
MAX_DETAIL_CHARS = 12000
MAX_VALUE_CHARS = 200
MAX_SQL_CHARS = 4000  # a statement in a query's change, before and after


class ActorKind(StrEnum):
    USER = "user"  # a person signed into the pages
    # A person through an API token (actor_id: the user; details: the token's public id).
    TOKEN = "token"  # noqa: S105 - a kind of actor, not a secret
    PUBLIC_LINK = "public_link"  # whoever holds a public link (actor_id: the link id)
    SCHEDULER = "scheduler"  # the scheduler or the delivery dispatcher
    OPERATOR = "operator"  # the operator's CLI, reading the database directly
    ANONYMOUS = "anonymous"  # nobody known (a sign-in with an unknown email)


class Outcome(StrEnum):
    OK = "ok"
    REFUSED = "refused"  # the action was not allowed (a wrong password, a policy)
    FAILED = "failed"  # the action was allowed but did not happen


class Action(StrEnum):
    """Every action the trail records (public: added, never renamed)."""

    SIGN_IN = "sign_in"
    TOKEN_CREATED = "token.created"  # noqa: S105 - an action's name, not a secret
    TOKEN_REVOKED = "token.revoked"  # noqa: S105 - an action's name, not a secret
    EXPORT_REQUESTED = "export.requested"
    EXPORT_CANCELLED = "export.cancelled"
    FILE_DOWNLOADED = "file.downloaded"
    FILE_PRESIGNED = "file.presigned"  # a presigned URL handed out (S3): the download itself
    LINK_CREATED = "link.created"
    LINK_REVOKED = "link.revoked"
    # A link's use is a download (file.downloaded or file.presigned) whose actor is the link.
    QUERY_CREATED = "query.created"
    QUERY_CHANGED = "query.changed"
    QUERY_DELETED = "query.deleted"
    # A query's first rows shown (API, pages or CLI): its parameters and how many rows.
    QUERY_PREVIEWED = "query.previewed"
    REPORT_CREATED = "report.created"
    REPORT_CHANGED = "report.changed"
    REPORT_DELETED = "report.deleted"
    SCHEDULE_CREATED = "schedule.created"
    SCHEDULE_CHANGED = "schedule.changed"
    SCHEDULE_DELETED = "schedule.deleted"
    SOURCE_CREATED = "source.created"
    SOURCE_SHARED = "source.shared"
    SOURCE_UNSHARED = "source.unshared"
    MEMBER_ROLE_SET = "member.role_set"
    MEMBER_REMOVED = "member.removed"
    DELIVERY_SENT = "delivery.sent"
    POLICY_CHANGED = "policy.changed"
    APPROVAL_REQUESTED = "approval.requested"  # an export of a sensitive query asked for
    APPROVAL_DECIDED = "approval.decided"
    AUDIT_PRUNED = "audit.pruned"


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    id: str | None = None
    # What the actor acted through beyond who they are (the API token's public id).
    via: str | None = None


SCHEDULER = Actor(ActorKind.SCHEDULER, "scheduler")
OPERATOR = Actor(ActorKind.OPERATOR, "cli")


def operator_for(user_id: str) -> Actor:
    """The operator's command line acting for `user_id` (`--user`), on the local database."""
    return Actor(ActorKind.OPERATOR, user_id)


@dataclass(frozen=True)
class AuditEvent:
    """An event to record; the store gives it its id and its place in the chain (and its
    time, when `at` is None: for a service without a clock, as the catalogue's writes are)."""

    at: datetime | None
    workspace_id: str
    actor_kind: ActorKind
    actor_id: str | None
    action: Action
    target_kind: str | None
    target_id: str | None
    outcome: Outcome = Outcome.OK
    client_address: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


def naming(event: AuditEvent, target_id: str) -> AuditEvent:
    """The event with its target id filled in, when the store makes the id (a new link)."""
    return event if event.target_id is not None else replace(event, target_id=target_id)


@dataclass(frozen=True)
class RecordedEvent:
    """An event as the trail holds it (ids grow in the order events were written)."""

    id: int
    at: datetime
    workspace_id: str
    actor_kind: str
    actor_id: str | None
    action: str
    target_kind: str | None
    target_id: str | None
    outcome: str
    client_address: str | None
    details: str  # the canonical JSON text, exactly as hashed
    prev_hash: str
    hash: str


def details_text(details: Mapping[str, Any]) -> str:
    """The details as stored and hashed: sorted-key compact JSON, bounded in size."""
    text = json.dumps(dict(details), sort_keys=True, separators=(",", ":"), default=str)
    if len(text) > MAX_DETAIL_CHARS:
        text = json.dumps({"truncated": True}, separators=(",", ":"))
    return text


def bounded(value: str | None, chars: int = MAX_VALUE_CHARS) -> str | None:
    return None if value is None else value[:chars]


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What changed between two views of a thing: the names of the fields that differ, and
    a statement's text before and after (cut to MAX_SQL_CHARS, with its full SHA-256)."""
    changed = sorted(k for k in after if before.get(k) != after[k])
    found: dict[str, Any] = {"changed": changed}
    if "sql" in changed:
        for side, values in (("before", before), ("after", after)):
            text = str(values["sql"])
            found[f"sql_{side}"] = text[:MAX_SQL_CHARS]
            found[f"sql_{side}_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    return found


def canonical(
    *,
    at: datetime,
    workspace_id: str,
    actor_kind: str,
    actor_id: str | None,
    action: str,
    target_kind: str | None,
    target_id: str | None,
    outcome: str,
    client_address: str | None,
    details: str,
    prev_hash: str,
) -> bytes:
    """The form an event's hash is taken of: every field but the id and the hash itself.

    The id is left out so that a chain verifies whatever ids the database handed out; the
    order is still fixed, since each event names the hash of the one before.
    """
    fields = {
        "at": at.isoformat(timespec="microseconds"),
        "workspace_id": workspace_id,
        "actor_kind": actor_kind,
        "actor_id": actor_id,
        "action": action,
        "target_kind": target_kind,
        "target_id": target_id,
        "outcome": outcome,
        "client_address": client_address,
        "details": details,
        "prev_hash": prev_hash,
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def hash_of(event: RecordedEvent) -> str:
    """The hash `event` should carry, from its own fields."""
    return hashlib.sha256(
        canonical(
            at=event.at,
            workspace_id=event.workspace_id,
            actor_kind=event.actor_kind,
            actor_id=event.actor_id,
            action=event.action,
            target_kind=event.target_kind,
            target_id=event.target_id,
            outcome=event.outcome,
            client_address=event.client_address,
            details=event.details,
            prev_hash=event.prev_hash,
        )
    ).hexdigest()


def unchained(event: AuditEvent, now: datetime) -> dict[str, Any]:
    """The row to write for `event`, but for `prev_hash` and `hash` (at `now` unless the
    event has its own time)."""
    return {
        "at": (event.at or now).astimezone(UTC),
        "workspace_id": event.workspace_id,
        "actor_kind": event.actor_kind.value,
        "actor_id": bounded(event.actor_id),
        "action": event.action.value,
        "target_kind": bounded(event.target_kind, 40),
        "target_id": bounded(event.target_id),
        "outcome": event.outcome.value,
        "client_address": bounded(event.client_address, 64),
        "details": details_text(event.details),
    }


def linked(row: Mapping[str, Any], prev_hash: str) -> dict[str, Any]:
    """An unchained row put after an event whose hash is `prev_hash`, with its own hash."""
    done = {**row, "prev_hash": prev_hash}
    done["hash"] = hashlib.sha256(canonical(**done)).hexdigest()
    return done


def chained(event: AuditEvent, prev_hash: str, now: datetime) -> dict[str, Any]:
    """The row to write for `event` after an event whose hash is `prev_hash`."""
    return linked(unchained(event, now), prev_hash)


def around_prev(row: Mapping[str, Any]) -> tuple[str, str]:
    """The canonical form of an unchained `row` as the text before and after its prev_hash:
    `before + prev + after` is canonical(**row, prev_hash=prev) for any hash `prev`, so a
    writer that learns `prev` only under its chain's lock (the database, on PostgreSQL) can
    hash the event without this module. ASCII (json.dumps escapes the rest), and the key
    `"prev_hash":"` cannot occur inside a value, whose quotes are escaped."""
    key = '"prev_hash":"'
    text = canonical(**row, prev_hash=GENESIS).decode("ascii")
    assert text.count(key) == 1, "the key occurs once: quotes inside values are escaped"
    before, _, after = text.partition(key + GENESIS)
    return before + key, after


@dataclass(frozen=True)
class ChainCheck:
    """What walking one workspace's chain found."""

    workspace_id: str
    verified: int  # events that matched, up to the first that did not
    broken: RecordedEvent | None = None  # the first event that does not match
    reason: str | None = None


def verify_chain(workspace_id: str, anchor: str, events: Iterable[RecordedEvent]) -> ChainCheck:
    """Walk one workspace's events in id order from its anchor; stop at the first mismatch."""
    expected_prev, verified = anchor, 0
    for event in events:
        if event.prev_hash != expected_prev:
            return ChainCheck(workspace_id, verified, event, "its prev_hash is not the hash before")
        if hash_of(event) != event.hash:
            return ChainCheck(workspace_id, verified, event, "its hash does not match its fields")
        expected_prev, verified = event.hash, verified + 1
    return ChainCheck(workspace_id, verified)


@dataclass(frozen=True)
class AuditFilter:
    """What `list` narrows the trail to; every field optional."""

    actor: str | None = None  # an actor id (a user id, a link id, "scheduler", "cli")
    action: str | None = None  # an action, or a prefix ending in "." ("export.")
    target: str | None = None  # a target id
    since: datetime | None = None
    until: datetime | None = None
