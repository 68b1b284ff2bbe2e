"""The MetadataStore contract: every transition of DESIGN section 1, on every backend.

The `store` fixture is parametrised over the backends (in memory, SQLite, and PostgreSQL
where configured); these tests must hold unchanged on each.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from qexport.domain.accounts import Standing
from qexport.domain.audit import Action, ActorKind, AuditEvent
from qexport.domain.exports import EXPIRED, ExportRecord, Result, Status, effective_status
from qexport.domain.failures import FailureCode, LimitExceededError, TooManyRequestsError
from qexport.domain.queries import Parameter, ParamType, Query, Visibility
from tests.fakes import FrozenClock
from tests.support import queue_helpers
from tests.support.factories import new_export
from tests.support.stores import MetadataStore

LEASE = 30.0
RESULT = Result(size_bytes=123, row_count=7, sha256="ab" * 32)


def request(store: MetadataStore, clock: FrozenClock, workspace: str = "w1") -> ExportRecord:
    return store.insert_export(new_export(clock.now(), workspace))


def claim(
    store: MetadataStore, clock: FrozenClock, record: ExportRecord, worker: str = "w-a"
) -> ExportRecord:
    claimed = queue_helpers.claim(
        store, record.id, worker_id=worker, now=clock.now(), lease_seconds=LEASE
    )
    assert claimed is not None
    return claimed


def token(record: ExportRecord) -> str:
    assert record.lease_token is not None
    return record.lease_token


def test_request_records_a_queued_export_with_a_fixed_key(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """A request is recorded as queued, attempt 0, with its storage key and parameters."""
    record = request(store, clock)
    assert record.status is Status.QUEUED
    assert record.attempt == 0
    assert record.lease_token is None
    stored = store.get_export(record.id)
    assert stored == record
    assert stored.parameters == {"since": "2024-01-01"}
    assert stored.storage_key.endswith("/orders.csv")
    assert store.has_unsettled()


def test_claim_moves_queued_to_running_once(store: MetadataStore, clock: FrozenClock) -> None:
    """A claim sets attempt 1, a lease and started_at; a second claim finds nothing to take."""
    record = request(store, clock)
    assert queue_helpers.next_claimable(store, clock.now()) == record
    claimed = claim(store, clock, record)
    assert claimed.status is Status.RUNNING
    assert claimed.attempt == 1
    assert claimed.worker_id == "w-a"
    assert claimed.started_at == clock.now()
    assert claimed.lease_expires_at == clock.now() + timedelta(seconds=LEASE)
    assert (
        queue_helpers.claim(store, record.id, worker_id="w-b", now=clock.now(), lease_seconds=LEASE)
        is None
    )
    assert queue_helpers.next_claimable(store, clock.now()) is None


def test_expired_lease_is_redelivered_to_the_same_key(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """running -> running after the lease expires: attempt+1, new token, same key and start."""
    first = claim(store, clock, request(store, clock))
    clock.advance(LEASE - 1)
    assert queue_helpers.next_claimable(store, clock.now()) is None
    clock.advance(2)
    assert queue_helpers.next_claimable(store, clock.now()) is not None
    second = claim(store, clock, first, worker="w-b")
    assert second.attempt == 2
    assert second.lease_token != first.lease_token
    assert second.storage_key == first.storage_key
    assert second.started_at == first.started_at
    assert second.worker_id == "w-b"


def test_heartbeat_extends_the_lease_and_records_progress(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """A heartbeat with the current token extends the lease; a stale token is refused."""
    running = claim(store, clock, request(store, clock))
    clock.advance(20)
    assert store.heartbeat(
        running.id, token(running), now=clock.now(), lease_seconds=LEASE, progress_rows=500
    )
    current = store.get_export(running.id)
    assert current is not None
    assert current.progress_rows == 500
    assert current.lease_expires_at == clock.now() + timedelta(seconds=LEASE)
    clock.advance(20)
    assert queue_helpers.next_claimable(store, clock.now()) is None  # the heartbeat kept it
    assert not store.heartbeat(
        running.id, "not-the-token", now=clock.now(), lease_seconds=LEASE, progress_rows=1
    )


def test_a_redelivered_export_fences_out_the_old_attempt(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """After redelivery the old token can neither heartbeat, succeed, fail nor release."""
    old = claim(store, clock, request(store, clock))
    clock.advance(LEASE + 1)
    new = claim(store, clock, old, worker="w-b")
    now = clock.now()
    assert not store.heartbeat(old.id, token(old), now=now, lease_seconds=LEASE, progress_rows=1)
    assert not store.succeed(old.id, token(old), now=now, result=RESULT, expires_at=now)
    assert not store.fail(old.id, token(old), now=now, code=FailureCode.INTERNAL, detail="x")
    assert not store.release_with_backoff(
        old.id,
        token(old),
        now=now,
        delay_seconds=1,
        code=FailureCode.SOURCE_UNAVAILABLE,
        detail="x",
    )
    assert store.get_export(old.id) == new


def test_release_with_backoff_keeps_it_running_until_the_delay(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """A transient failure stays running, remembers the code and is redelivered after the delay."""
    running = claim(store, clock, request(store, clock))
    assert store.release_with_backoff(
        running.id,
        token(running),
        now=clock.now(),
        delay_seconds=10,
        code=FailureCode.SOURCE_UNAVAILABLE,
        detail="connection refused",
    )
    released = store.get_export(running.id)
    assert released is not None
    assert released.status is Status.RUNNING
    assert released.last_error_code is FailureCode.SOURCE_UNAVAILABLE
    assert released.last_error_detail == "connection refused"
    clock.advance(9)
    assert queue_helpers.next_claimable(store, clock.now()) is None
    clock.advance(2)
    assert claim(store, clock, released).attempt == 2


def test_succeed_settles_with_the_result_and_expiry(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """running -> succeeded records size, rows, sha256, completion and expiry."""
    running = claim(store, clock, request(store, clock))
    expires = clock.now() + timedelta(days=7)
    assert store.succeed(
        running.id, token(running), now=clock.now(), result=RESULT, expires_at=expires
    )
    done = store.get_export(running.id)
    assert done is not None
    assert (done.status, done.size_bytes, done.row_count, done.sha256) == (
        Status.SUCCEEDED,
        123,
        7,
        "ab" * 32,
    )
    assert done.completed_at == clock.now()
    assert done.expires_at == expires
    assert not store.has_unsettled()


def test_succeed_refuses_a_file_past_the_workspace_quota(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """With 123 bytes stored, a second file of 123 bytes passes a quota of 246 but not 245:
    limit_exceeded naming the quota, and the export stays running; another workspace's
    bytes and expired files do not count."""
    quota = 2 * RESULT.size_bytes
    first = claim(store, clock, request(store, clock))
    later = clock.now() + timedelta(days=1)
    assert store.succeed(
        first.id, token(first), now=clock.now(), result=RESULT, expires_at=later, quota_bytes=quota
    )
    other = claim(store, clock, request(store, clock, "w2"))
    assert store.succeed(other.id, token(other), now=clock.now(), result=RESULT, expires_at=later)
    second = claim(store, clock, request(store, clock))
    with pytest.raises(LimitExceededError, match="QEXPORT_WORKSPACE_QUOTA"):
        store.succeed(
            second.id,
            token(second),
            now=clock.now(),
            result=RESULT,
            expires_at=later,
            quota_bytes=quota - 1,
        )
    assert store.get_export(second.id) == second
    assert store.succeed(
        second.id,
        token(second),
        now=clock.now(),
        result=RESULT,
        expires_at=later,
        quota_bytes=quota,
    )
    clock.advance(2 * 86400)  # both files of w1 expired: the quota is free again
    third = claim(store, clock, request(store, clock))
    assert store.succeed(
        third.id,
        token(third),
        now=clock.now(),
        result=RESULT,
        expires_at=clock.now() + timedelta(days=1),
        quota_bytes=RESULT.size_bytes,
    )


def test_expired_is_computed_at_read_time(store: MetadataStore, clock: FrozenClock) -> None:
    """`expired` is never stored: the record stays succeeded, readers derive expired."""
    running = claim(store, clock, request(store, clock))
    expires = clock.now() + timedelta(hours=1)
    store.succeed(running.id, token(running), now=clock.now(), result=RESULT, expires_at=expires)
    record = store.get_export(running.id)
    assert record is not None
    assert effective_status(record, clock.now()) == "succeeded"
    clock.advance(3600)
    assert effective_status(record, clock.now()) == EXPIRED
    assert store.get_export(running.id).status is Status.SUCCEEDED  # type: ignore[union-attr]


def test_fail_settles_with_code_and_bounded_detail(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """running -> failed stores the code and a detail cut to 500 characters."""
    running = claim(store, clock, request(store, clock))
    assert store.fail(
        running.id,
        token(running),
        now=clock.now(),
        code=FailureCode.QUERY_INVALID,
        detail="x" * 900,
    )
    failed = store.get_export(running.id)
    assert failed is not None
    assert failed.status is Status.FAILED
    assert failed.failure_code is FailureCode.QUERY_INVALID
    assert failed.failure_detail is not None
    assert len(failed.failure_detail) == 500


def test_pre_run_failure_only_from_queued(store: MetadataStore, clock: FrozenClock) -> None:
    """queued -> failed access_lost; a running export cannot take that path."""
    queued = request(store, clock)
    assert queue_helpers.fail_before_run(
        store, queued.id, now=clock.now(), code=FailureCode.ACCESS_LOST, detail="gone"
    )
    assert store.get_export(queued.id).failure_code is FailureCode.ACCESS_LOST  # type: ignore[union-attr]
    running = claim(store, clock, request(store, clock))
    assert not queue_helpers.fail_before_run(
        store, running.id, now=clock.now(), code=FailureCode.ACCESS_LOST, detail="gone"
    )
    assert store.get_export(running.id) == running


@pytest.mark.parametrize("started", [False, True])
def test_cancel_settles_any_unsettled_export(
    store: MetadataStore, clock: FrozenClock, started: bool
) -> None:
    """Cancel moves queued or running to failed/cancelled; the old lease is then dead."""
    record = request(store, clock)
    if started:
        record = claim(store, clock, record)
    assert store.cancel(record.id, now=clock.now())
    cancelled = store.get_export(record.id)
    assert cancelled is not None
    assert (cancelled.status, cancelled.failure_code) == (Status.FAILED, FailureCode.CANCELLED)
    if started:
        assert not store.heartbeat(
            record.id, token(record), now=clock.now(), lease_seconds=LEASE, progress_rows=1
        )


@pytest.mark.parametrize("outcome", ["succeeded", "failed", "cancelled", "refused"])
def test_a_settled_record_never_changes_again(
    store: MetadataStore, clock: FrozenClock, outcome: str
) -> None:
    """No transition applies to a settled record: no claim (succeeded -> running), no requeue,
    no heartbeat, no release, no second settlement, no cancel."""
    record = request(store, clock)
    running = claim(store, clock, record)
    now = clock.now()
    if outcome == "succeeded":
        assert store.succeed(
            running.id, token(running), now=now, result=RESULT, expires_at=now + timedelta(days=1)
        )
    elif outcome == "failed":
        assert store.fail(
            running.id, token(running), now=now, code=FailureCode.QUERY_TIMEOUT, detail="t"
        )
    elif outcome == "cancelled":
        assert store.cancel(running.id, now=now)
    else:
        other = request(store, clock)
        assert queue_helpers.fail_before_run(
            store, other.id, now=now, code=FailureCode.ACCESS_LOST, detail="gone"
        )
        running = other
    settled = store.get_export(running.id)
    assert settled is not None
    clock.advance(10 * 86400)
    now = clock.now()
    tok = running.lease_token or "none"
    assert (
        queue_helpers.claim(store, running.id, worker_id="w-z", now=now, lease_seconds=LEASE)
        is None
    )
    assert not store.heartbeat(running.id, tok, now=now, lease_seconds=LEASE, progress_rows=9)
    assert not store.release_with_backoff(
        running.id, tok, now=now, delay_seconds=0, code=FailureCode.STORAGE_UNAVAILABLE, detail="x"
    )
    assert not store.succeed(running.id, tok, now=now, result=RESULT, expires_at=now)
    assert not store.fail(running.id, tok, now=now, code=FailureCode.INTERNAL, detail="x")
    assert not queue_helpers.fail_before_run(
        store, running.id, now=now, code=FailureCode.ACCESS_LOST, detail="x"
    )
    assert not store.cancel(running.id, now=now)
    assert store.get_export(running.id) == settled
    assert (
        queue_helpers.next_claimable(store, now) is None
        or queue_helpers.next_claimable(store, now).id != running.id
    )  # type: ignore[union-attr]


def test_claim_order_is_oldest_first(store: MetadataStore, clock: FrozenClock) -> None:
    """The queue is first in, first out."""
    first = request(store, clock)
    clock.advance(1)
    request(store, clock)
    assert queue_helpers.next_claimable(store, clock.now()).id == first.id  # type: ignore[union-attr]


def test_list_exports_filters_by_requester_and_status(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """Listing is per workspace, newest first, and filters by requester and status."""
    a = request(store, clock)
    clock.advance(1)
    b = claim(store, clock, request(store, clock))
    request(store, clock, workspace="other")
    listed = store.list_exports(workspace_id="w1")
    assert [r.id for r in listed] == [b.id, a.id]
    assert [r.id for r in store.list_exports(workspace_id="w1", status=Status.QUEUED)] == [a.id]
    assert store.list_exports(workspace_id="w1", requested_by="bob") == []
    assert len(store.list_exports(workspace_id="w1", limit=1)) == 1


def make_query(name: str = "orders", workspace: str = "w1") -> Query:
    return Query(
        id=str(uuid.uuid4()),
        workspace_id=workspace,
        name=name,
        sql="select 1",
        source="demo",
        parameters=(Parameter("since", ParamType.DATE, required=False, default="2024-01-01"),),
        visibility=Visibility.MEMBERS,
        members=frozenset({"alice"}),
        owner="alice",
    )


def test_queries_round_trip_and_soft_delete(store: MetadataStore) -> None:
    """A saved query reads back whole; a deleted one reads as deleted and frees its name."""
    query = make_query()
    store.add_query(query)
    assert store.get_query(query.id) == query
    assert store.find_query("w1", "orders") == query
    assert store.find_query("w2", "orders") is None
    assert [q.id for q in store.list_queries("w1")] == [query.id]
    assert store.delete_query(query.id)
    assert not store.delete_query(query.id)
    deleted = store.get_query(query.id)
    assert deleted is not None
    assert deleted.deleted
    assert store.find_query("w1", "orders") is None
    assert store.list_queries("w1") == []
    store.add_query(make_query())  # the name is free again


def test_an_export_reads_with_its_query(store: MetadataStore, clock: FrozenClock) -> None:
    """`get_export_with_query`: the export with its query as `get_query` reads it (deleted
    ones included), none when the query is not there or the export is a report's."""
    query = replace(make_query(), id="q1")
    store.add_query(query)
    record = request(store, clock)
    assert store.get_export_with_query(record.id) == (record, query)
    store.delete_query("q1")
    assert store.get_export_with_query(record.id) == (record, store.get_query("q1"))
    assert store.get_export_with_query(record.id)[1].deleted  # type: ignore[index,union-attr]
    orphan = store.insert_export(replace(new_export(clock.now()), subject_id="q-gone"))
    assert store.get_export_with_query(orphan.id) == (orphan, None)
    report = store.insert_export(
        replace(new_export(clock.now()), subject_type="report", subject_id="q1", format="pdf")
    )
    assert store.get_export_with_query(report.id) == (report, None)
    assert store.get_export_with_query("no-such-export") is None


def test_query_names_are_unique_per_workspace(store: MetadataStore) -> None:
    """Two live queries cannot share a name in one workspace."""
    store.add_query(make_query())
    store.add_query(make_query(workspace="w2"))
    with pytest.raises(Exception, match=r"(?i)unique|exists"):
        store.add_query(make_query())


def test_update_query_changes_visibility(store: MetadataStore) -> None:
    """Updating a query changes what it says, not where it lives."""
    query = make_query()
    store.add_query(query)
    changed = Query(**{**query.__dict__, "members": frozenset({"bob"}), "sql": "select 2"})
    assert store.update_query(changed)
    assert store.get_query(query.id) == changed


def _admit_all(_export: ExportRecord, _query: Query | None, _standing: Standing) -> str | None:
    return None


def test_claim_next_takes_the_oldest_and_then_nothing(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """claim_next claims in request order and returns nothing once all are taken."""
    first = request(store, clock)
    clock.advance(1)
    second = request(store, clock)
    now = clock.now()
    got = [
        store.claim_next(worker_id="w", now=now, lease_seconds=LEASE, admit=_admit_all).claimed
        for _ in range(3)
    ]
    assert [r.id if r else None for r in got] == [first.id, second.id, None]
    assert all(r.status is Status.RUNNING and r.attempt == 1 for r in got if r)


def _claim_fair(store: MetadataStore, clock: FrozenClock, cap: int | None) -> ExportRecord | None:
    return store.claim_next(
        worker_id="w",
        now=clock.now(),
        lease_seconds=LEASE,
        admit=_admit_all,
        max_running_per_user=cap,
    ).claimed


def test_claim_next_takes_another_requesters_export_before_a_backlog(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """With 50 of alice's exports queued first, bob's is claimed at the next free slot."""
    for _ in range(50):
        request(store, clock)
        clock.advance(1)
    bobs = store.insert_export(replace(new_export(clock.now()), requested_by="bob"))
    first = _claim_fair(store, clock, cap=5)
    second = _claim_fair(store, clock, cap=5)
    assert first is not None
    assert first.requested_by == "alice"
    assert second is not None
    assert second.id == bobs.id


def test_requesters_take_turns_at_a_single_slot(store: MetadataStore, clock: FrozenClock) -> None:
    """With one slot (nothing running at each claim) and 50 of alice's exports queued before
    bob's, bob's is the next claimed once alice's first has settled; then alice's again."""
    for _ in range(50):
        request(store, clock)
        clock.advance(1)
    bobs = store.insert_export(replace(new_export(clock.now()), requested_by="bob"))
    first = _claim_fair(store, clock, cap=1)
    assert first is not None
    assert first.requested_by == "alice"
    clock.advance(1)
    assert store.succeed(
        first.id, token(first), now=clock.now(), result=RESULT, expires_at=clock.now()
    )
    clock.advance(1)
    second = _claim_fair(store, clock, cap=1)
    assert second is not None
    assert second.id == bobs.id
    clock.advance(1)
    third = _claim_fair(store, clock, cap=2)
    assert third is not None
    assert third.requested_by == "alice"


def test_claim_next_prefers_the_requester_with_fewer_running(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """Two running for alice and one for bob: the next slot takes bob's, then alice's."""
    for who in ("alice", "alice", "bob", "alice", "bob"):
        store.insert_export(replace(new_export(clock.now()), requested_by=who))
        clock.advance(1)
    claimed = [_claim_fair(store, clock, cap=None) for _ in range(5)]
    assert [r.requested_by if r else None for r in claimed] == [
        "alice",
        "bob",
        "alice",
        "bob",
        "alice",
    ]


def test_claim_next_leaves_a_requester_at_the_running_cap_waiting(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """At max_running_per_user the requester's next export waits until one of theirs ends."""
    queued = []
    for _ in range(3):
        queued.append(request(store, clock))
        clock.advance(1)
    running = [_claim_fair(store, clock, cap=2) for _ in range(2)]
    assert [r.id if r else None for r in running] == [queued[0].id, queued[1].id]
    assert _claim_fair(store, clock, cap=2) is None
    assert running[0] is not None
    assert store.succeed(
        running[0].id,
        token(running[0]),
        now=clock.now(),
        result=RESULT,
        expires_at=clock.now() + timedelta(days=1),
    )
    third = _claim_fair(store, clock, cap=2)
    assert third is not None
    assert third.id == queued[2].id


def test_claim_next_counts_the_requester_per_workspace(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """The same user name in another workspace is another requester for the running cap."""
    request(store, clock, "w1")
    clock.advance(1)
    request(store, clock, "w1")
    clock.advance(1)
    other = request(store, clock, "w2")
    first = _claim_fair(store, clock, cap=1)
    second = _claim_fair(store, clock, cap=1)
    assert first is not None
    assert first.workspace_id == "w1"
    assert second is not None
    assert second.id == other.id
    assert _claim_fair(store, clock, cap=1) is None


def test_claim_next_refuses_a_queued_export_its_check_rejects(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """A refused export goes queued -> failed/access_lost, with the query handed to the check."""
    query = make_query()
    store.add_query(query)
    record = store.insert_export(replace(new_export(clock.now()), subject_id=query.id))
    seen: list[Query | None] = []

    def refuse(_export: ExportRecord, q: Query | None, _standing: Standing) -> str | None:
        seen.append(q)
        return "the requester may no longer read this query"

    result = store.claim_next(worker_id="w", now=clock.now(), lease_seconds=LEASE, admit=refuse)
    assert result.claimed is None
    assert result.refused is not None
    assert result.refused.id == record.id
    failed = store.get_export(record.id)
    assert failed is not None
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.ACCESS_LOST,
        0,
    )
    assert seen == [query]


def test_claim_next_redelivers_without_the_pre_run_check(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """An expired lease is redelivered; the admission check is only for queued exports."""
    running = claim(store, clock, request(store, clock))
    clock.advance(LEASE + 1)

    def refuse(_export: ExportRecord, _query: Query | None, _standing: Standing) -> str | None:
        raise AssertionError("a redelivery is not a pre-run check")

    result = store.claim_next(worker_id="w2", now=clock.now(), lease_seconds=LEASE, admit=refuse)
    assert result.claimed is not None
    assert (result.claimed.id, result.claimed.attempt) == (running.id, 2)


def test_the_unsettled_cap_refuses_the_request_past_it(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """At the cap a request is refused and nothing is recorded; other requesters are not
    held back, and a settled export makes room again."""
    first = store.insert_export(new_export(clock.now()), max_unsettled=2)
    store.insert_export(new_export(clock.now()), max_unsettled=2)
    with pytest.raises(TooManyRequestsError) as refused:
        store.insert_export(new_export(clock.now()), max_unsettled=2)
    assert refused.value.retry_after > 0
    assert "2 exports queued or running" in str(refused.value)
    assert len(store.list_exports(workspace_id="w1", requested_by="alice")) == 2
    store.insert_export(replace(new_export(clock.now()), requested_by="bob"), max_unsettled=2)
    store.insert_export(new_export(clock.now(), workspace="w2"), max_unsettled=2)
    assert store.cancel(first.id, now=clock.now())
    store.insert_export(new_export(clock.now()), max_unsettled=2)


@pytest.mark.parametrize("audited", ["none", "half", "all"])
def test_concurrent_requests_cannot_overshoot_the_cap(
    store: MetadataStore, clock: FrozenClock, audited: str
) -> None:
    """8 threads asking 5 times each with a cap of 10: exactly 10 are recorded, whether the
    requests write their audit event in the same transaction (as every request of the API,
    the pages and the scheduler does), none do, or some do and some do not. Then 20 times
    over, 8 threads race for the one place left: one gets it."""
    cap = 10
    outcomes: list[str] = []
    event = AuditEvent(None, "w1", ActorKind.USER, "alice", Action.EXPORT_REQUESTED, None, None)

    def ask(worker: int, times: int, start: threading.Barrier | None = None) -> None:
        with_event = audited == "all" or (audited == "half" and worker % 2 == 0)
        if start is not None:
            start.wait()
        for _ in range(times):
            try:
                recorded = store.insert_export(
                    new_export(clock.now()),
                    max_unsettled=cap,
                    audit=event if with_event else None,
                )
                outcomes.append(recorded.id)
            except TooManyRequestsError:
                outcomes.append("refused")

    def race(times: int) -> list[str]:
        outcomes.clear()
        start = threading.Barrier(8)
        threads = [threading.Thread(target=ask, args=(w, times, start)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [o for o in outcomes if o != "refused"]

    assert len(race(5)) == cap
    assert outcomes.count("refused") == 40 - cap
    assert len(store.list_exports(workspace_id="w1", requested_by="alice", limit=100)) == cap
    for _ in range(20):
        unsettled = store.list_exports(
            workspace_id="w1", requested_by="alice", status=Status.QUEUED
        )
        assert len(unsettled) == cap
        assert store.cancel(unsettled[0].id, now=clock.now())  # one place left
        assert len(race(1)) == 1
