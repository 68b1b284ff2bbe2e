"""The rounds of a fair claim: whom each round passes over."""

from __future__ import annotations

from qexport.domain.fairness import claim_rounds

A, B, C = ("w", "a"), ("w", "b"), ("w", "c")


def test_with_nothing_running_one_round_passes_over_nobody() -> None:
    """An idle installation claims the oldest export, whoever asked."""
    assert claim_rounds({}, 2) == [frozenset()]


def test_rounds_go_from_the_fewest_running_up_to_the_cap() -> None:
    """First everyone running anything is passed over, then those above the next count;
    a requester at the cap is passed over in every round."""
    assert claim_rounds({A: 2, B: 1, C: 3}, 3) == [
        frozenset({A, B, C}),
        frozenset({A, C}),
        frozenset({C}),
    ]


def test_without_a_cap_the_last_round_passes_over_nobody() -> None:
    """No cap: the order still favours the fewest running, and anyone may be claimed."""
    assert claim_rounds({A: 2, B: 1}, None) == [frozenset({A, B}), frozenset({A}), frozenset()]
