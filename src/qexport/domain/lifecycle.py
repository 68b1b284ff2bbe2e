"""The export lifecycle (DESIGN section 1) as a table: guards, transitions, the attempt's
decisions.

Every transition is one guarded write: it changes the record only while its guard holds, and
records one event. The SQL store compiles `Guard` into WHERE clauses
(store/exports/transitions.py); the in-memory fake checks `guard_holds`. A settled record
matches no guard, so it never changes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any

from qexport.domain.exports import UNSETTLED, EventKind, ExportRecord, Status
from qexport.domain.failures import FailureCode, bounded_detail


class Guard(Enum):
    """The condition a transition's write checks, on the record as it is now."""

    QUEUED = "status = queued"
    CLAIMABLE = "queued, or running with its lease expired"
    FENCED = "running, and the lease token is the caller's"
    UNSETTLED = "queued or running"


def guard_holds(record: ExportRecord, guard: Guard, token: str | None, now: datetime) -> bool:
    """Whether `guard` lets a write through to `record` (`token`: the caller's lease)."""
    if guard is Guard.QUEUED:
        return record.status is Status.QUEUED
    if guard is Guard.CLAIMABLE:
        expired = record.lease_expires_at is not None and record.lease_expires_at < now
        return record.status is Status.QUEUED or (record.status is Status.RUNNING and expired)
    if guard is Guard.FENCED:
        return record.status is Status.RUNNING and token is not None and record.lease_token == token
    return record.status in UNSETTLED


class Step(StrEnum):
    CLAIM = "claim"
    REDELIVER = "redeliver"
    HEARTBEAT = "heartbeat"
    PROGRESS = "progress"
    RELEASE = "release"
    SUCCEED = "succeed"
    FAIL = "fail"
    REFUSE = "refuse"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Transition:
    guard: Guard
    status: Status | None  # the status written; None: unchanged
    sets: frozenset[str]  # the other fields written
    event: EventKind | None  # None: no event (a heartbeat)


_CLAIMED = frozenset(
    {"attempt", "lease_token", "lease_expires_at", "worker_id", "started_at", "progress_rows"}
)
_FAILED = frozenset({"failure_code", "failure_detail", "completed_at"})
_STORED = frozenset(
    {"size_bytes", "row_count", "sha256", "progress_rows", "completed_at", "expires_at", "reads"}
)
_BACKOFF = frozenset({"lease_expires_at", "last_error_code", "last_error_detail"})

# started_at is set by the first claim only; claim and redeliver are one write, told apart by
# the attempt it starts (`claim_step`).
TRANSITIONS: Mapping[Step, Transition] = {
    Step.CLAIM: Transition(Guard.CLAIMABLE, Status.RUNNING, _CLAIMED, EventKind.CLAIMED),
    Step.REDELIVER: Transition(Guard.CLAIMABLE, Status.RUNNING, _CLAIMED, EventKind.REDELIVERED),
    Step.HEARTBEAT: Transition(
        Guard.FENCED, None, frozenset({"lease_expires_at", "progress_rows"}), None
    ),
    # Rows written so far, between heartbeats: the lease is left as it is.
    Step.PROGRESS: Transition(Guard.FENCED, None, frozenset({"progress_rows"}), None),
    Step.RELEASE: Transition(Guard.FENCED, None, _BACKOFF, EventKind.RELEASED),
    Step.SUCCEED: Transition(Guard.FENCED, Status.SUCCEEDED, _STORED, EventKind.SUCCEEDED),
    Step.FAIL: Transition(Guard.FENCED, Status.FAILED, _FAILED, EventKind.FAILED),
    Step.REFUSE: Transition(Guard.QUEUED, Status.FAILED, _FAILED, EventKind.REFUSED),
    Step.CANCEL: Transition(Guard.UNSETTLED, Status.FAILED, _FAILED, EventKind.CANCELLED),
}


def claim_step(attempt: int) -> Step:
    """The first attempt is a claim; any later one a redelivery."""
    return Step.CLAIM if attempt == 1 else Step.REDELIVER


# ---------------------------------------------------------------- the attempt's decisions


class Outcome(StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"  # settled succeeded
    FAILED = "failed"  # settled failed
    RELEASED = "released"  # transient failure: redelivered after a backoff
    HANDED_BACK = "handed_back"  # the worker shut down: redelivered at once
    INTERRUPTED = "interrupted"  # the metadata store was unreachable: the lease runs out
    LOST = "lost"  # the lease was lost (cancelled, or redelivered to another worker)


@dataclass(frozen=True)
class Release:
    delay: float  # seconds before the export is redelivered


@dataclass(frozen=True)
class Fail:
    code: FailureCode


def backoff(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff with jitter: base * 2^(attempt-1), capped, +-20%."""
    delay = min(base * 2 ** max(attempt - 1, 0), cap)
    return float(delay * random.uniform(0.8, 1.2))  # noqa: S311 - jitter, not security


def settle_decision(
    code: FailureCode, attempt: int, max_attempts: int, *, base: float, cap: float
) -> Release | Fail:
    """After a failure: retry a retryable code while attempts remain, else fail with it."""
    if code.retryable and attempt < max_attempts:
        return Release(backoff(attempt, base, cap))
    return Fail(code)


def give_up(record: ExportRecord, max_attempts: int) -> Fail | None:
    """An attempt past the cap fails with the last transient code (workers that kept dying
    left none: attempts_exhausted); None: this attempt may run."""
    if record.attempt <= max_attempts:
        return None
    return Fail(record.last_error_code or FailureCode.ATTEMPTS_EXHAUSTED)


def failed_changes(now: datetime, code: FailureCode, detail: str) -> dict[str, Any]:
    """What a step that settles `failed` (FAIL, REFUSE, CANCEL) sets besides the status: the
    code, its detail as people read it (bounded; the code itself when there is none), and
    when it settled."""
    return {
        "failure_code": code,
        "failure_detail": bounded_detail(detail) or code.value,
        "completed_at": now,
    }
