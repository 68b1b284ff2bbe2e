"""The audit trail: who did what to which thing, with what outcome, as a keyed hash chain.

Each workspace's events form one chain: an event carries its place in the chain (`seq`: 1, 2,
3... from the chain's start, an anchor's sequence + 1 after a prune), the hash of the event
before it in its workspace (`prev_hash`; the chain's anchor, or 64 zeros, for the first) and
the HMAC-SHA256 of its own canonical form (every field but the id and `hash`, as sorted-key
compact JSON) under its workspace's event key, whose secret `key_id` names
(domain/audit_keys.py). Rewriting, removing or inserting an event breaks every hash after it,
and without the secret nobody can recompute them, so `verify_chain` names the first event
that does not match. Events that belong to no workspace (a sign-in with an unknown email, the
operator's prune of the whole installation) go to the installation's chain.

Events written before keys (`key_id` NULL) were hashed with plain SHA-256 and still verify;
their sequences were numbered by the upgrade (migration 0020). Once a chain has a keyed event,
an unkeyed one after it is refused (it can only be a rewrite), and the first keyed event's
MAC covers the last unkeyed hash and its sequence: the unkeyed stretch can no longer be
shortened, edited or renumbered unseen. A chain pruned since keys starts from an anchor that
a signed `audit.pruned` event of the chain must name (`pruned_details`).

Pure: no I/O. The store writes events (store/audit/); services build them
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

from qexport.domain.audit_keys import AuditKeys, ChainKey

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
    seq: int = 0  # its place in its chain
    key_id: str | None = None  # the secret it is keyed with; None: plain SHA-256, before keys


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


def canonical(  # noqa: PLR0913 - keyword-only: one per field of the canonical form
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
    seq: int | None = None,
    key_id: str | None = None,
) -> bytes:
    """The form an event's hash is taken of: every field but the id and the hash itself
    (`seq` and `key_id` for a keyed event only: unkeyed events were hashed without them).

    The id is left out so that a chain verifies whatever ids the database handed out; the
    order is still fixed, since each event names the hash of the one before.
    """
    fields: dict[str, Any] = {
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
    if key_id is not None:
        fields["seq"] = seq
        fields["key_id"] = key_id
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def expected_hash(event: RecordedEvent, key: ChainKey | None) -> str:
    """The hash `event` should carry, from its own fields: HMAC under `key` (the key its
    key_id names) for a keyed event, SHA-256 for one from before keys."""
    text = canonical(
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
        seq=event.seq,
        key_id=event.key_id,
    )
    if event.key_id is None:
        return hashlib.sha256(text).hexdigest()
    assert key is not None, "a keyed event is checked with its key"
    assert key.key_id == event.key_id, "the key the event names"
    return key.mac(event.workspace_id, text)


def unchained(event: AuditEvent, now: datetime) -> dict[str, Any]:
    """The row to write for `event`, but for `prev_hash`, `seq`, `key_id` and `hash` (at
    `now` unless the event has its own time)."""
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


def linked(row: Mapping[str, Any], prev_hash: str, seq: int, key: ChainKey) -> dict[str, Any]:
    """An unchained row put at `seq`, after an event whose hash is `prev_hash`, keyed."""
    done = {**row, "prev_hash": prev_hash, "seq": seq, "key_id": key.key_id}
    done["hash"] = key.mac(row["workspace_id"], canonical(**done))
    return done


def chained(
    event: AuditEvent, prev_hash: str, seq: int, now: datetime, key: ChainKey
) -> dict[str, Any]:
    """The row to write for `event` at `seq`, after an event whose hash is `prev_hash`."""
    return linked(unchained(event, now), prev_hash, seq, key)


def unkeyed(event: AuditEvent, prev_hash: str, now: datetime) -> dict[str, Any]:
    """The row `event` was written as before keys (plain SHA-256, no seq or key_id): what an
    upgraded database holds from before, and what someone without the secret could forge."""
    done = {**unchained(event, now), "prev_hash": prev_hash}
    done["hash"] = hashlib.sha256(canonical(**done)).hexdigest()
    return done


@dataclass(frozen=True)
class Anchor:
    """Where a chain starts: the hash and sequence of the last event pruned from it (GENESIS
    and 0 until it is pruned), and the time the prune cut at."""

    hash: str = GENESIS
    seq: int = 0
    pruned_before: datetime | None = None


START = Anchor()


def pruned_details(anchor: Anchor) -> dict[str, Any]:
    """What the `audit.pruned` event a prune writes into a chain says about the chain's new
    anchor, and what verify finds the anchor by."""
    before = anchor.pruned_before.isoformat() if anchor.pruned_before is not None else None
    return {"anchor_hash": anchor.hash, "anchor_seq": anchor.seq, "before": before}


def prune_events(
    event: AuditEvent, pruned: Mapping[str, int], anchors: Mapping[str, Anchor]
) -> list[AuditEvent]:
    """The events a prune writes, given `event` (the operator's, on the installation's chain)
    and, per pruned chain, how many events went and its new anchor: one in each pruned
    workspace's chain naming its anchor (what verify finds the anchor by), then `event` with
    the counts (and the installation chain's own anchor, when it was pruned too)."""
    found = [
        replace(
            event,
            workspace_id=workspace_id,
            details={**event.details, **pruned_details(anchor), "deleted": pruned[workspace_id]},
        )
        for workspace_id, anchor in anchors.items()
        if workspace_id != INSTALLATION
    ]
    summary = {**event.details, "deleted": sum(pruned.values()), "chains": len(pruned)}
    own = anchors.get(INSTALLATION)
    if own is not None:
        summary.update(pruned_details(own))
    found.append(replace(event, workspace_id=INSTALLATION, details=summary))
    return found


@dataclass(frozen=True)
class Stretch:
    """Events of one chain hashed the same way, one after another."""

    key_id: str | None  # None: plain SHA-256, from before keys
    first_seq: int
    last_seq: int


@dataclass(frozen=True)
class ChainCheck:
    """What walking one workspace's chain found."""

    workspace_id: str
    verified: int  # events that matched, up to the first that did not
    broken: RecordedEvent | None = None  # the first event that does not match
    reason: str | None = None
    stretches: tuple[Stretch, ...] = ()
    head: RecordedEvent | None = None  # the last event that matched
    # What is wrong with the chain as a whole (its anchor), when no event is.
    problem: str | None = None
    # The event at the sequence the walk was asked to watch for (a checkpoint's), if seen.
    watched: RecordedEvent | None = None


def verify_chain(
    workspace_id: str,
    anchor: Anchor,
    events: Iterable[RecordedEvent],
    keys: AuditKeys,
    *,
    watch_seq: int | None = None,
) -> ChainCheck:
    """Walk one workspace's events in id order from its anchor; stop at the first mismatch.

    An event matches when it follows the one before (its prev_hash and its sequence), is not
    unkeyed after a keyed one, is keyed with a secret given here, and its hash is that of
    its fields. An anchor from a prune since keys must be the one the chain's last
    `audit.pruned` event names (an anchor with sequence 0 is the chain's start, or a prune
    from before keys)."""
    walk = _Walk(anchor, keys, watch_seq)
    for event in events:
        reason = walk.mismatch(event)
        if reason is not None:
            return walk.result(workspace_id, event, reason)
        walk.take(event)
    return walk.result(workspace_id, None, None)


class _Walk:
    """The state of `verify_chain` between two events."""

    def __init__(self, anchor: Anchor, keys: AuditKeys, watch_seq: int | None) -> None:
        self.anchor, self.keys, self.watch_seq = anchor, keys, watch_seq
        self.prev, self.seq, self.verified = anchor.hash, anchor.seq + 1, 0
        self.keyed = False
        # [key id, first sequence, last sequence] of each stretch, the last one in `stretch`.
        self.stretches: list[list[Any]] = []
        self.stretch: list[Any] | None = None
        self.head: RecordedEvent | None = None
        self.last_pruned: RecordedEvent | None = None
        self.watched: RecordedEvent | None = None

    def mismatch(self, event: RecordedEvent) -> str | None:
        if event.seq > self.seq:
            return f"{span(self.seq, event.seq - 1)} missing before it"
        if event.prev_hash != self.prev:
            return (
                "its prev_hash is not the hash of the event before it (one was removed,"
                " replaced or reordered)"
            )
        if event.seq != self.seq:
            return f"its sequence is {event.seq}, not {self.seq}"
        return self.unkeyable(event) or self.wrong_hash(event)

    def unkeyable(self, event: RecordedEvent) -> str | None:
        """Why the event's hash cannot be checked as it claims to be made."""
        if event.key_id is None and self.keyed:
            return (
                "it is hashed without a key (plain SHA-256) after keyed events: the chain"
                " was rewritten from here by someone without the secret"
            )
        if event.key_id is not None and self.keys.find(event.key_id) is None:
            return (
                f"it is keyed with key {event.key_id}, which is neither QEXPORT_SECRET_KEY's"
                f" ({self.keys.current.key_id}) nor one of QEXPORT_SECRET_KEY_PREVIOUS's:"
                " give the secret it was written with there, or it was forged"
            )
        return None

    def wrong_hash(self, event: RecordedEvent) -> str | None:
        key = self.keys.find(event.key_id) if event.key_id is not None else None
        if expected_hash(event, key) == event.hash:
            return None
        kind = f"under key {event.key_id}" if key is not None else "(plain SHA-256)"
        return f"its hash does not match its fields {kind}"

    def take(self, event: RecordedEvent) -> None:
        stretch = self.stretch
        if stretch is not None and stretch[0] == event.key_id:
            stretch[2] = event.seq
        else:
            self.stretch = [event.key_id, event.seq, event.seq]
            self.stretches.append(self.stretch)
        self.keyed = self.keyed or event.key_id is not None
        if event.action == Action.AUDIT_PRUNED and event.key_id is not None:
            self.last_pruned = event
        if event.seq == self.watch_seq:
            self.watched = event
        self.prev, self.seq, self.head = event.hash, event.seq + 1, event
        self.verified += 1

    def result(
        self, workspace_id: str, broken: RecordedEvent | None, reason: str | None
    ) -> ChainCheck:
        return ChainCheck(
            workspace_id,
            self.verified,
            broken,
            reason,
            tuple(Stretch(*stretch) for stretch in self.stretches),
            self.head,
            problem=None if broken is not None else self.anchor_problem(),
            watched=self.watched,
        )

    def anchor_problem(self) -> str | None:
        anchor = self.anchor
        if anchor.seq == 0:
            return None
        where = f"its anchor (the hash of sequence {anchor.seq}, the last event pruned)"
        pruned = self.last_pruned
        if pruned is None:
            return (
                f"{where} is named by no signed audit.pruned event: events up to sequence"
                f" {anchor.seq} were removed outside a prune"
            )
        recorded = json.loads(pruned.details)
        named = {k: recorded.get(k) for k in ("anchor_hash", "anchor_seq", "before")}
        if named != pruned_details(anchor):
            return (
                f"{where} is not the one the last audit.pruned event (id {pruned.id}, sequence"
                f" {pruned.seq}) names: sequence {named['anchor_seq']}, hash"
                f" {str(named['anchor_hash'])[:12]}..., before {named['before']}"
            )
        return None


def span(first: int, last: int) -> str:
    """`sequence 7 is` or `sequences 7-9 are` (what is missing)."""
    return f"sequence {first} is" if first == last else f"sequences {first}-{last} are"


@dataclass(frozen=True)
class AuditFilter:
    """What `list` narrows the trail to; every field optional."""

    actor: str | None = None  # an actor id (a user id, a link id, "scheduler", "cli")
    action: str | None = None  # an action, or a prefix ending in "." ("export.")
    target: str | None = None  # a target id
    since: datetime | None = None
    until: datetime | None = None
