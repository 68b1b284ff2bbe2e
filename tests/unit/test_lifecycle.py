"""The lifecycle table (domain/lifecycle.py): its guards, its steps and the attempt's decisions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from qexport.domain.exports import SETTLED, EventKind, ExportRecord, Status
from qexport.domain.failures import FailureCode
from qexport.domain.lifecycle import (
    TRANSITIONS,
    Fail,
    Guard,
    Release,
    Step,
    backoff,
    claim_step,
    give_up,
    guard_holds,
    settle_decision,
)

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
HELD = "lease-of-attempt-1"


def _record(status: Status, *, lease_in: float | None = None, attempt: int = 1) -> ExportRecord:
    return ExportRecord(
        id="e1",
        workspace_id="ws",
        requested_by="u1",
        subject_type="query",
        subject_id="q1",
        subject_name="q",
        format="csv",
        parameters={},
        options={},
        filename="q.csv",
        storage_key="exports/ws/e1/q.csv",
        status=status,
        attempt=0 if status is Status.QUEUED else attempt,
        created_at=NOW - timedelta(hours=1),
        lease_token=None if status is Status.QUEUED else HELD,
        lease_expires_at=None if lease_in is None else NOW + timedelta(seconds=lease_in),
    )


@pytest.mark.parametrize("status", sorted(SETTLED))
@pytest.mark.parametrize("step", list(Step))
def test_a_settled_export_never_changes(status: Status, step: Step) -> None:
    """No step's guard lets a write through to a succeeded or failed export, whoever asks."""
    record = _record(status, lease_in=-60)
    assert not guard_holds(record, TRANSITIONS[step].guard, HELD, NOW)


@pytest.mark.parametrize("step", [Step.HEARTBEAT, Step.RELEASE, Step.SUCCEED, Step.FAIL])
def test_a_stale_token_cannot_touch_the_running_export(step: Step) -> None:
    """A worker whose lease was handed to another (new token) cannot extend, release or
    settle the export; the holder of the current token can."""
    running = _record(Status.RUNNING, lease_in=30)
    guard = TRANSITIONS[step].guard
    assert not guard_holds(running, guard, "token-of-an-earlier-attempt", NOW)
    assert not guard_holds(running, guard, None, NOW)
    assert guard_holds(running, guard, HELD, NOW)


def test_claimable_means_queued_or_running_with_its_lease_run_out() -> None:
    """A worker may take a queued export, or a running one whose lease has expired; never one
    whose lease still runs (even at the very instant it ends) and never a settled one."""
    assert guard_holds(_record(Status.QUEUED), Guard.CLAIMABLE, None, NOW)
    assert guard_holds(_record(Status.RUNNING, lease_in=-1), Guard.CLAIMABLE, None, NOW)
    assert not guard_holds(_record(Status.RUNNING, lease_in=0), Guard.CLAIMABLE, None, NOW)
    assert not guard_holds(_record(Status.RUNNING, lease_in=30), Guard.CLAIMABLE, None, NOW)
    assert not guard_holds(_record(Status.SUCCEEDED, lease_in=-1), Guard.CLAIMABLE, None, NOW)


def test_only_a_queued_export_can_be_refused_and_any_unsettled_one_cancelled() -> None:
    """The pre-run check refuses queued exports only; the requester may cancel a queued or a
    running export, without holding its lease."""
    queued, running = _record(Status.QUEUED), _record(Status.RUNNING, lease_in=30)
    refuse, cancel = TRANSITIONS[Step.REFUSE].guard, TRANSITIONS[Step.CANCEL].guard
    assert guard_holds(queued, refuse, None, NOW)
    assert not guard_holds(running, refuse, None, NOW)
    assert guard_holds(queued, cancel, None, NOW)
    assert guard_holds(running, cancel, None, NOW)


def test_each_step_writes_what_the_design_table_says() -> None:
    """Settling steps end in the status a user sees; releases and heartbeats keep the export
    running; every step but the heartbeat leaves an event in the export's history."""
    assert TRANSITIONS[Step.SUCCEED].status is Status.SUCCEEDED
    for step in (Step.FAIL, Step.REFUSE, Step.CANCEL):
        assert TRANSITIONS[step].status is Status.FAILED
        assert "failure_code" in TRANSITIONS[step].sets
    assert TRANSITIONS[Step.RELEASE].status is None
    assert TRANSITIONS[Step.HEARTBEAT].event is None
    assert {t.event for t in TRANSITIONS.values()} - {None} == set(EventKind) - {
        EventKind.REQUESTED
    }
    assert claim_step(1) is Step.CLAIM
    assert claim_step(2) is Step.REDELIVER


def test_a_retryable_failure_is_retried_until_the_last_attempt_then_fails_with_its_code() -> None:
    """A source outage releases the export with a backoff while attempts remain; on the last
    allowed attempt it fails with source_unavailable, not with a generic code."""
    for attempt in (1, 2):
        decision = settle_decision(FailureCode.SOURCE_UNAVAILABLE, attempt, 3, base=1.0, cap=60.0)
        assert isinstance(decision, Release)
        assert decision.delay > 0
    last = settle_decision(FailureCode.SOURCE_UNAVAILABLE, 3, 3, base=1.0, cap=60.0)
    assert last == Fail(FailureCode.SOURCE_UNAVAILABLE)


@pytest.mark.parametrize(
    "code", [c for c in FailureCode if not c.retryable and c is not FailureCode.ATTEMPTS_EXHAUSTED]
)
def test_a_permanent_failure_fails_at_once(code: FailureCode) -> None:
    """An invalid query or a refusal is not retried, even on the first attempt."""
    assert settle_decision(code, 1, 5, base=1.0, cap=60.0) == Fail(code)


def test_an_attempt_past_the_cap_gives_up_with_the_last_transient_code() -> None:
    """Once attempts are used up the export fails with the last transient code it met, or
    attempts_exhausted when workers kept dying without leaving one."""
    running = _record(Status.RUNNING, lease_in=-1, attempt=4)
    assert give_up(replace(running, attempt=3), 3) is None
    assert give_up(running, 3) == Fail(FailureCode.ATTEMPTS_EXHAUSTED)
    released = replace(running, last_error_code=FailureCode.STORAGE_UNAVAILABLE)
    assert give_up(released, 3) == Fail(FailureCode.STORAGE_UNAVAILABLE)


def test_backoff_grows_with_the_attempt_within_its_jitter_and_stops_at_the_cap() -> None:
    """Retries wait base * 2^(attempt-1), +-20%, and never much longer than the cap, however
    many attempts came before."""
    for attempt, expected in ((1, 2.0), (2, 4.0), (3, 8.0)):
        for _ in range(50):
            assert expected * 0.8 <= backoff(attempt, 2.0, 300.0) <= expected * 1.2
    for _ in range(50):
        assert 300.0 * 0.8 <= backoff(40, 2.0, 300.0) <= 300.0 * 1.2
