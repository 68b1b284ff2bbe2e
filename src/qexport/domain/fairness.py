"""Fair claiming: whose export a free worker slot takes next.

A slot takes the oldest claimable export of the requester (a user in a workspace) with the
fewest running exports, and never one of a requester who already runs `max_running`. The
store asks in rounds: first excluding everyone who runs anything, then everyone who runs
more than the next smallest count, and so on; the first round that finds an export wins.
So one requester's backlog never holds back another's, and a lone requester still gets up
to `max_running` slots. Both stores (SQL and in memory) plan their rounds here.
"""

from __future__ import annotations

from collections.abc import Mapping

RequesterKey = tuple[str, str]  # (workspace id, user id)


def claim_rounds(
    running: Mapping[RequesterKey, int], max_running: int | None
) -> list[frozenset[RequesterKey]]:
    """The requesters to pass over in each round, in order; `running` counts live leases.
    `max_running` None: no cap, only the order."""
    if not running:
        return [frozenset()]
    cap = max_running if max_running is not None else max(running.values()) + 1
    levels = sorted({0, *(n for n in running.values() if n < cap)})
    return [frozenset(key for key, n in running.items() if n > level) for level in levels]
