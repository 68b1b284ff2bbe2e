"""What `/metrics` reports: the figures of one scrape, read from the metadata database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from qexport.domain.exports import EXPIRED, EventKind, Status

# Attempt durations are read from the newest events only: the events table grows forever,
# and the PRIMARY KEY range keeps the read bounded whatever its size.
ATTEMPT_WINDOW = timedelta(hours=24)
ATTEMPT_EVENTS_LIMIT = 100_000
DURATION_BUCKETS = (0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0)

EFFECTIVE_STATUSES = (*(s.value for s in Status), EXPIRED)
ATTEMPT_STARTS = (EventKind.CLAIMED.value, EventKind.REDELIVERED.value)
ATTEMPT_ENDS = (
    EventKind.SUCCEEDED.value,
    EventKind.FAILED.value,
    EventKind.RELEASED.value,
    EventKind.CANCELLED.value,
)


@dataclass(frozen=True)
class Durations:
    """Finished attempts of one outcome: cumulative counts per upper bound, count, sum."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    sum_seconds: float


@dataclass(frozen=True)
class ExportStats:
    by_status: dict[str, int]  # every effective status, expired included
    failures: dict[str, int]  # failure code -> failed exports
    rows_written: int  # over succeeded exports, expired ones included
    bytes_written: int
    queue_depth: int  # claimable now: queued, or running with an expired lease
    oldest_queued_at: datetime | None
    attempts: dict[str, Durations]  # outcome (how the attempt ended) -> durations
