"""Reading the audit trail, checking its chains and pruning it (domain/audit.py).

Admins read their own workspace's trail (the API, the page); the operator reads any and
verifies and prunes them (`qexport audit`), reading the database directly, and the object
store for the chains' checkpoints (services/audit_checkpoints.py).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from qexport.domain.accounts import Principal, Role
from qexport.domain.audit import (
    INSTALLATION,
    OPERATOR,
    Action,
    Anchor,
    AuditFilter,
    ChainCheck,
    RecordedEvent,
    verify_chain,
)
from qexport.domain.audit_checkpoints import (
    UNKEYED_CHAINS,
    Checkpoint,
    UnkeyedChains,
    compared,
    signature_problem,
    unkeyed_problem,
)
from qexport.domain.audit_keys import AuditKeys
from qexport.domain.failures import ForbiddenError, InvalidRequestError, Problems, QExportError
from qexport.ports import AuditLog, Clock, ObjectStore
from qexport.services.audit import event
from qexport.services.audit_checkpoints import (
    Checkpointer,
    CheckpointPass,
    Stored,
    chains_in_storage,
    newest,
    unkeyed_chains,
)
from qexport.services.exports import parse_instant

MAX_PAGE = 200
MAX_FILTER_CHARS = 200
_CURSOR_PREFIX = "a|"


@dataclass(frozen=True)
class AuditPage:
    items: list[RecordedEvent]
    next_cursor: str | None  # continues with older events; None on the last page


def details_line(details: str) -> str:
    """An event's details (its JSON text) on one line, as the audit page and `qexport audit
    list` show them: `name: value` in name order, separated by `; `; a mapping's own as
    `name=value` (a preview's parameters), a list's items by commas."""
    found = json.loads(details)
    if not isinstance(found, dict):
        return _shown(found)
    return "; ".join(f"{name}: {_shown(value)}" for name, value in sorted(found.items()))


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_shown(v)}" for k, v in sorted(value.items())) or "none"
    if isinstance(value, list):
        return ", ".join(_shown(v) for v in value) or "none"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return str(value)


def encode_cursor(event_id: int) -> str:
    raw = f"{_CURSOR_PREFIX}{event_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The event id an opaque cursor continues after; 422 for anything this did not write."""
    invalid = InvalidRequestError(
        "cursor is not one this API returned; pass it unchanged", field="cursor"
    )
    if len(cursor) > 40:
        raise invalid
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        text = raw.decode()
    except ValueError:  # binascii.Error, UnicodeDecodeError, non-ASCII text
        raise invalid from None
    number = text.removeprefix(_CURSOR_PREFIX)
    if not text.startswith(_CURSOR_PREFIX) or not number.isdigit() or len(number) > 18:
        raise invalid
    return int(number)


def parse_filter(
    *,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: str | None = None,
    until: str | None = None,
    problems: Problems | None = None,
) -> AuditFilter:
    """The filters as given (each checked; every bad one named in one InvalidRequestError)."""
    found = problems if problems is not None else Problems()
    for name, value in (("actor", actor), ("action", action), ("target", target)):
        with found.check():
            if value is not None and not 0 < len(value) <= MAX_FILTER_CHARS:
                raise InvalidRequestError(
                    f"{name} must be 1 to {MAX_FILTER_CHARS} characters", field=name
                )
    with found.check():
        if action is not None and not action.endswith(".") and action not in set(Action):
            raise InvalidRequestError(
                f"action must be one of {', '.join(a.value for a in Action)}"
                f" or a prefix ending in '.' (export.), not {action[:40]!r}",
                field="action",
            )
    start = end = None
    with found.check():
        start = parse_instant(since, "since", end_of_day=False)
    with found.check():
        end = parse_instant(until, "until", end_of_day=True)
    with found.check():
        if start is not None and end is not None and end <= start:
            raise InvalidRequestError("until must come after since", field="until")
    if problems is None:
        found.raise_any()
    return AuditFilter(actor=actor, action=action, target=target, since=start, until=end)


def require_admin(principal: Principal) -> None:
    if principal.role is not Role.ADMIN:
        raise ForbiddenError("only a workspace's admins may read its audit trail")


def workspace_page(
    audit: AuditLog,
    principal: Principal,
    narrow: AuditFilter,
    *,
    before_id: int | None = None,
    limit: int = 50,
) -> AuditPage:
    """A page of the caller's workspace's trail, newest first: admins only (403 otherwise)."""
    require_admin(principal)
    return page(audit, principal.workspace_id, narrow, before_id=before_id, limit=limit)


def page(
    audit: AuditLog,
    workspace_id: str | None,
    narrow: AuditFilter,
    *,
    before_id: int | None = None,
    limit: int = 50,
) -> AuditPage:
    """A page of one workspace's trail (None: every workspace's), newest first."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequestError(f"limit must be 1 to {MAX_PAGE}, not {limit}", field="limit")
    found = audit.list_events(
        workspace_id=workspace_id, narrow=narrow, before_id=before_id, limit=limit + 1
    )
    more = len(found) > limit
    items = found[:limit]
    return AuditPage(items, encode_cursor(items[-1].id) if more and items else None)


@dataclass(frozen=True)
class ChainReport:
    """What verify found in one chain: its walk, the newest checkpoint it was compared with,
    what is wrong beyond a broken event (its anchor, its checkpoint), and a note."""

    check: ChainCheck
    anchor: Anchor
    checkpoint: Stored | None
    finding: str | None = None
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.check.broken is None and self.finding is None


def verify(
    audit: AuditLog,
    objects: ObjectStore,
    workspace_id: str | None = None,
    *,
    checkpoint_every: timedelta,
) -> list[ChainReport]:
    """Walk each chain (or the one named) from its anchor with the trail's keys, and compare
    it with its newest checkpoint in storage: every chain the database or the storage knows,
    so that a chain removed from the database is found by its checkpoints."""
    if workspace_id is not None:
        names = [workspace_id]
    else:
        names = sorted(set(audit.chains()) | set(chains_in_storage(objects)))
    keys = audit.keys
    listed = unkeyed_chains(objects)
    if isinstance(listed, str):
        raise QExportError(f"{UNKEYED_CHAINS} in the object store is unreadable: {listed}")
    return [_verify_one(audit, objects, keys, listed, name, checkpoint_every) for name in names]


def _verify_one(
    audit: AuditLog,
    objects: ObjectStore,
    keys: AuditKeys,
    listed: UnkeyedChains | None,
    workspace_id: str,
    every: timedelta,
) -> ChainReport:
    stored = newest(objects, workspace_id)
    checkpoint = stored.checkpoint if stored is not None else None
    anchor = audit.anchor(workspace_id)
    check = verify_chain(
        workspace_id,
        anchor,
        audit.chain(workspace_id),
        keys,
        watch_seq=checkpoint.seq if checkpoint is not None else None,
    )
    finding = check.problem or unkeyed_problem(check, listed, keys)
    if stored is None:
        return ChainReport(check, anchor, None, finding, "no checkpoint in storage yet")
    if checkpoint is None:
        finding = f"its newest checkpoint {stored.key} is unreadable: {stored.unreadable}"
        return ChainReport(check, anchor, stored, finding)
    distrust = signature_problem(checkpoint, keys)
    if distrust is not None:
        finding = f"its newest checkpoint {stored.key} cannot be believed: {distrust}"
        return ChainReport(check, anchor, stored, finding)
    if finding is None and check.broken is None:
        finding = compared(check, anchor, checkpoint, stored.key)
    return ChainReport(check, anchor, stored, finding, _staleness(check, checkpoint, every))


def _staleness(check: ChainCheck, checkpoint: Checkpoint, every: timedelta) -> str | None:
    """A note when the newest checkpoint is much older than the chain's last event."""
    head = check.head
    if head is None or head.at - checkpoint.written_at <= 2 * every:
        return None
    return (
        f"its newest checkpoint is of {checkpoint.written_at.isoformat(timespec='seconds')},"
        " more than twice QEXPORT_AUDIT_CHECKPOINT_EVERY before its last event: is a worker"
        " running? (a deletion of the events since would go unseen)"
    )


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted per chain, and the checkpoints written after it."""

    deleted: dict[str, int]
    checkpoints: CheckpointPass


def prune(
    audit: AuditLog,
    objects: ObjectStore,
    clock: Clock,
    *,
    retention_days: int,
    checkpoint_every: timedelta,
) -> Pruned:
    """Delete the events older than `retention_days`, keeping every chain verifiable from
    its first kept event; recorded as an event of the operator's in each pruned chain and
    on the installation's, in the same transaction. Then each pruned chain's new start and
    head are checkpointed."""
    now = clock.now()
    before = now - timedelta(days=retention_days)
    pruned = event(
        clock,
        OPERATOR,
        Action.AUDIT_PRUNED,
        workspace_id=INSTALLATION,
        details={"before": before.isoformat(), "retention_days": retention_days},
    )
    deleted = audit.prune(before=before, event=pruned)
    checkpointer = Checkpointer(audit, objects, clock, checkpoint_every)
    written = checkpointer.run_once(force=True, only={*deleted, INSTALLATION})
    return Pruned(deleted, written)
