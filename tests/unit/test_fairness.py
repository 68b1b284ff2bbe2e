"""The order of a fair claim: which requester's oldest export a free slot takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from qexport.domain.fairness import RequesterQueue, claim_order

A, B, C = ("w", "a"), ("w", "b"), ("w", "c")
T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_fewest_running_first_then_the_oldest_waiting() -> None:
    """A requester running less goes first however new their export; among equals, the
    oldest waiting export."""
    queues = [
        RequesterQueue(A, running=1, oldest=_at(0)),
        RequesterQueue(B, running=0, oldest=_at(9)),
        RequesterQueue(C, running=1, oldest=_at(-5)),
    ]
    assert claim_order(queues, 3) == [B, C, A]


def test_a_requester_at_the_cap_or_with_nothing_waiting_is_left_out() -> None:
    """At max_running a requester's exports wait; without a claimable export they are not
    tried; without a cap nobody is left out for running."""
    queues = [
        RequesterQueue(A, running=2, oldest=_at(0)),
        RequesterQueue(B, running=0, oldest=None),
        RequesterQueue(C, running=1, oldest=_at(1)),
    ]
    assert claim_order(queues, 2) == [C]
    assert claim_order(queues, None) == [C, A]
