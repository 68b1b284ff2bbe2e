"""Fair claiming: whose export a free worker slot takes next.

A slot takes the oldest claimable export of the requester (a user in a workspace) with the
fewest running exports and, among equals, the one served least recently (never, first), and
never one of a requester who already runs `max_running`. So one requester's backlog never
holds back another's, even with a single slot (the requesters take turns), and a lone
requester still gets up to `max_running` slots. Both stores (SQL and in memory) order the
requesters here and then take the oldest claimable export of the first one that still has
one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

RequesterKey = tuple[str, str]  # (workspace id, user id)


@dataclass(frozen=True)
class RequesterQueue:
    """One requester's unsettled exports: how many run under a live lease, when the oldest
    claimable one was requested (None: none is claimable), and when any export of theirs last
    started (None: never)."""

    key: RequesterKey
    running: int
    oldest: datetime | None
    last_started: datetime | None = None


def claim_order(queues: Iterable[RequesterQueue], max_running: int | None) -> list[RequesterKey]:
    """The requesters to try, in order: fewest running first, then the least recently served
    (never served first), then the oldest waiting export; those with nothing claimable or at
    `max_running` (None: no cap) left out."""
    eligible = [
        q
        for q in queues
        if q.oldest is not None and (max_running is None or q.running < max_running)
    ]
    eligible.sort(
        key=lambda q: (q.running, q.last_started is not None, q.last_started, q.oldest, q.key)
    )
    return [q.key for q in eligible]
