"""What `/metrics` reports: the figures of one scrape, read from the metadata database."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from qexport.domain.audit import Action, ActorKind, Outcome
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


# The audit actions that are a file's download: a presigned URL handed out is the download
# itself (the bytes then go from the object store, unseen by qexport).
DOWNLOAD_ACTIONS = (Action.FILE_DOWNLOADED.value, Action.FILE_PRESIGNED.value)
_NOT_MODIFIED = 304


@dataclass(frozen=True)
class DownloadTally:
    """Downloads, bytes sent and public-link uses: one audit event's share, or a sum."""

    downloads: int = 0
    bytes_sent: int = 0
    public_link_uses: int = 0

    def __add__(self, other: DownloadTally) -> DownloadTally:
        return DownloadTally(
            self.downloads + other.downloads,
            self.bytes_sent + other.bytes_sent,
            self.public_link_uses + other.public_link_uses,
        )

    def __neg__(self) -> DownloadTally:
        return DownloadTally(-self.downloads, -self.bytes_sent, -self.public_link_uses)


def download_tally(
    action: str, actor_kind: str, outcome: str, details: str
) -> DownloadTally | None:
    """What one audit event (`details` as stored: JSON text) adds to the download figures.

    A download is a file sent (200, or 206 for a range: each request counts) or a presigned
    URL handed out, with outcome ok. A refusal (410, 416) and a 304 (the client's copy is
    current: nothing is sent) are not. Bytes are the response's Content-Length, as recorded
    when its first chunk went out; a presigned URL adds none.
    """
    if action not in DOWNLOAD_ACTIONS or outcome != Outcome.OK.value:
        return None
    found = json.loads(details)
    if found.get("status") == _NOT_MODIFIED:
        return None
    sent = int(found.get("bytes", 0)) if action == Action.FILE_DOWNLOADED.value else 0
    return DownloadTally(1, sent, int(actor_kind == ActorKind.PUBLIC_LINK.value))


@dataclass(frozen=True)
class PreviewTally:
    """A workspace's previews that showed rows (audit events `query.previewed`, outcome ok)
    and the rows they showed."""

    previews: int = 0
    rows: int = 0


@dataclass(frozen=True)
class ExportStats:
    by_status: dict[str, int]  # every effective status, expired included
    failures: dict[str, int]  # failure code -> failed exports
    rows_written: int  # over succeeded exports, expired ones included
    bytes_written: int
    queue_depth: int  # claimable now: queued, or running with an expired lease
    oldest_queued_at: datetime | None
    attempts: dict[str, Durations]  # outcome (how the attempt ended) -> durations
    # workspace -> its downloads over the audit trail's retention (every known workspace)
    downloads: dict[str, DownloadTally]
    # workspace -> export requests of sensitive queries pending (unexpired) now
    approvals_pending: dict[str, int] = field(default_factory=dict)
    # workspace -> its previews over the audit trail's retention (every known workspace)
    previews: dict[str, PreviewTally] = field(default_factory=dict)
