"""A member's looks at their sources, rationed: at most QEXPORT_PREVIEW_PER_MINUTE in any
minute, over every door and process (RateLimits, in the metadata database).

A look is a preview (services/preview.py), or a statement checked as its query is saved that
its source does not accept (services/describe.py): MySQL and MariaDB evaluate constant
subqueries while they describe and plan a statement, so whether a save is refused can be
made of the data, one bit a save. Both take from the same minute, under one key per member.
A check is admitted before its source is asked and given back once the source accepts it,
so a statement the source accepts costs nothing, and concurrent checks never pass the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from qexport.domain.failures import TooManyRequestsError

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.ports import Clock, RateLimits

RATE_WINDOW = timedelta(minutes=1)


@dataclass(frozen=True)
class Looks:
    """Where a member's looks are counted, and how many a minute they get."""

    rates: RateLimits
    clock: Clock
    per_minute: int  # QEXPORT_PREVIEW_PER_MINUTE


def _key(requester: Requester) -> str:
    return f"preview:{requester.workspace_id}:{requester.user_id}"


def admit_look(looks: Looks, requester: Requester, *, refused: str) -> datetime:
    """One of the member's looks this minute, and when it was taken (to give it back); or
    TooManyRequestsError with the seconds to wait, its message `refused` followed by them."""
    now = looks.clock.now()
    wait = looks.rates.admit(_key(requester), now=now, limit=looks.per_minute, window=RATE_WINDOW)
    if wait > timedelta(0):
        seconds = max(1, math.ceil(wait.total_seconds()))
        raise TooManyRequestsError(refused.format(seconds=seconds), retry_after=seconds)
    return now


def give_back_look(looks: Looks, requester: Requester, at: datetime) -> None:
    """Forget the look admitted at `at`: it turned out not to be one."""
    looks.rates.give_back(_key(requester), at=at)
