"""The worker and one attempt, on the in-memory fakes: error mapping, retries, fencing."""

from __future__ import annotations

import csv
import io
import threading
from dataclasses import replace
from datetime import timedelta

import pytest

from qexport.config import Settings
from qexport.container import Container
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester, Status
from qexport.domain.failures import (
    FailureCode,
    MetadataUnavailableError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.domain.lifecycle import Outcome
from qexport.domain.queries import Parameter, ParamType, Query, Visibility
from qexport.domain.sensitivity import Relation
from qexport.services.exports import open_download
from qexport.services.requests import record_request
from qexport.worker.loop import Worker
from qexport.worker.runner import run_attempt
from tests.fakes import FixedSources, FrozenClock, InMemoryMetadataStore, InMemoryObjectStore
from tests.support import queue_helpers
from tests.support.containers import container_of
from tests.unit.fakes import FakeSource

ALICE = Requester("alice", "w1")


def make_deps(source: FakeSource, **settings: object) -> Container:
    store = InMemoryMetadataStore()
    store.add_query(
        Query(
            id="q1",
            workspace_id="w1",
            name="numbers",
            sql="select n, s from t where n < $limit",
            source="fake",
            parameters=(Parameter("limit", ParamType.INTEGER, required=False, default="10"),),
            visibility=Visibility.MEMBERS,
            members=frozenset({"alice"}),
            owner="alice",
        )
    )
    base = {"max_attempts": 3, "retry_base_seconds": 1.0, "lease_seconds": 30.0}
    return container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"fake": source}),
        clock=FrozenClock(),
        settings=Settings(**{**base, **settings}),  # type: ignore[arg-type]
    )


def request(deps: Container, fmt: str = "csv", **params: str) -> ExportRecord:
    return record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "numbers", by_name=True), fmt, parameters=params),
    )


def work(deps: Container) -> bool:
    return Worker(deps, worker_id="w-test").run_once()


def current(deps: Container, record: ExportRecord) -> ExportRecord:
    found = deps.exports.get_export(record.id)
    assert found is not None
    return found


def test_an_export_succeeds_with_a_file_that_matches_its_record() -> None:
    """The whole attempt: the stored csv holds the rows, and the record describes it."""
    deps = make_deps(FakeSource())
    record = request(deps, limit="5")
    assert work(deps)
    done = current(deps, record)
    assert done.status is Status.SUCCEEDED
    assert done.row_count == 1000
    assert done.attempt == 1
    _, stream = open_download(
        deps.exports, deps.catalog, deps.objects, deps.clock, ALICE, record.id
    )
    data = stream.read()
    assert len(data) == done.size_bytes
    rows = list(csv.reader(io.StringIO(data.decode())))
    assert rows[0] == ["n", "s"]
    assert len(rows) == 1001
    assert done.expires_at == done.completed_at + timedelta(days=7)  # type: ignore[operator]


def test_the_requester_context_and_typed_parameters_reach_the_source() -> None:
    """The source gets the requester and parameters typed from the query's declaration."""
    source = FakeSource()
    deps = make_deps(source)
    request(deps, limit="42")
    work(deps)
    _, params, requester = source.calls[0]
    assert params == {"limit": 42}
    assert requester == ALICE


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            QueryInvalidError('Parser Error: syntax error at or near "SELEC"'),
            FailureCode.QUERY_INVALID,
        ),
        (QueryTimeoutError("statement timeout of 1 s reached"), FailureCode.QUERY_TIMEOUT),
    ],
)
def test_a_permanent_failure_settles_at_once(error: Exception, code: FailureCode) -> None:
    """A permanent refusal fails the export on the first attempt with its code and message."""
    deps = make_deps(FakeSource(error=error))
    record = request(deps)
    work(deps)
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (Status.FAILED, code, 1)
    assert failed.failure_detail == str(error)


def test_a_transient_failure_is_retried_with_backoff_then_fails() -> None:
    """source_unavailable: released with growing delays, then failed after max_attempts."""
    deps = make_deps(FakeSource(error=SourceUnavailableError("connection refused")))
    clock = deps.clock
    assert isinstance(clock, FrozenClock)
    record = request(deps)
    delays = []
    for attempt in (1, 2):
        work(deps)
        released = current(deps, record)
        assert released.status is Status.RUNNING
        assert released.attempt == attempt
        assert released.last_error_code is FailureCode.SOURCE_UNAVAILABLE
        assert released.lease_expires_at is not None
        delays.append((released.lease_expires_at - clock.now()).total_seconds())
        assert not work(deps)  # nothing claimable during the backoff
        clock.advance(delays[-1] + 0.1)
    assert 0.8 <= delays[0] <= 1.2
    assert 1.6 <= delays[1] <= 2.4
    work(deps)
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.SOURCE_UNAVAILABLE,
        3,
    )
    assert failed.failure_detail == "connection refused"


def test_an_export_whose_workers_keep_dying_ends_attempts_exhausted() -> None:
    """A record redelivered past max_attempts without a transient code fails attempts_exhausted."""
    deps = make_deps(FakeSource())
    clock = deps.clock
    assert isinstance(clock, FrozenClock)
    record = request(deps)
    for _ in range(3):  # three workers claim and die without a word
        assert queue_helpers.claim(
            deps.exports, record.id, worker_id="dead", now=clock.now(), lease_seconds=30
        )
        clock.advance(31)
    work(deps)
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.ATTEMPTS_EXHAUSTED,
        4,
    )


def test_an_unexpected_error_fails_the_export_but_not_the_worker() -> None:
    """A bug in one export settles it `internal` without a traceback; the next export runs."""
    deps = make_deps(FakeSource(error=ZeroDivisionError("division by zero"), fail_at_batch=2))
    bad = request(deps)
    work(deps)
    failed = current(deps, bad)
    assert failed.failure_code is FailureCode.INTERNAL
    assert "Traceback" not in (failed.failure_detail or "")
    assert "division" not in (failed.failure_detail or "")  # details stay in the logs
    assert deps.objects.incomplete_uploads(bad.storage_key) == []  # type: ignore[attr-defined]
    deps.sources.source_for("fake", "w1").error = None  # type: ignore[attr-defined]
    good = request(deps)
    work(deps)
    assert current(deps, good).status is Status.SUCCEEDED


def test_the_row_limit_fails_limit_exceeded_and_aborts_the_upload() -> None:
    """More rows than allowed: failed limit_exceeded, no object, no staged parts."""
    deps = make_deps(FakeSource(), max_rows=250)
    record = request(deps)
    work(deps)
    failed = current(deps, record)
    assert failed.failure_code is FailureCode.LIMIT_EXCEEDED
    assert deps.objects.head(record.storage_key) is None
    assert deps.objects.incomplete_uploads(record.storage_key) == []


def test_the_byte_limit_fails_limit_exceeded() -> None:
    """A file growing past the byte limit fails limit_exceeded with nothing stored."""
    deps = make_deps(FakeSource(), max_bytes=1000)
    record = request(deps)
    work(deps)
    assert current(deps, record).failure_code is FailureCode.LIMIT_EXCEEDED
    assert deps.objects.head(record.storage_key) is None


def test_losing_the_lease_stops_production_and_aborts_the_upload() -> None:
    """Cancelled mid-production: the heartbeat finds no row, production stops, nothing stored."""
    deps: Container
    cancelled = threading.Event()

    def cancel_midway(i: int) -> None:
        if i == 3 and not cancelled.is_set():
            deps.exports.cancel(record.id, now=deps.clock.now())
            cancelled.set()
            # The next heartbeat notices; give the heartbeat thread a moment to run.
            lease_beat.wait(2)

    lease_beat = threading.Event()
    source = FakeSource(on_batch=cancel_midway)
    deps = make_deps(source, lease_seconds=0.15)
    original = deps.exports.heartbeat

    def heartbeat(*args: object, **kwargs: object) -> bool:
        ok = original(*args, **kwargs)  # type: ignore[arg-type]
        if not ok:
            lease_beat.set()
        return ok

    deps.exports.heartbeat = heartbeat  # type: ignore[method-assign]
    record = request(deps)
    work(deps)
    final = current(deps, record)
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.CANCELLED)
    assert deps.objects.head(record.storage_key) is None
    assert deps.objects.incomplete_uploads(record.storage_key) == []
    assert source.streams[0].closed


def test_an_object_completed_by_an_earlier_attempt_is_adopted() -> None:
    """If the file was stored but the worker died before settling, the next attempt adopts it."""
    deps = make_deps(FakeSource())
    record = request(deps)
    upload = deps.objects.begin_upload(record.storage_key)
    upload.upload_part(1, b"a,b\r\n1,2\r\n")
    upload.complete(rows=1, sha256="f" * 64)
    work(deps)
    done = current(deps, record)
    assert (done.status, done.row_count, done.sha256, done.size_bytes) == (
        Status.SUCCEEDED,
        1,
        "f" * 64,
        10,
    )
    assert deps.sources.source_for("fake", "w1").calls == []  # type: ignore[attr-defined]


def test_a_deleted_query_fails_access_lost_before_running() -> None:
    """Pre-run check: queued -> failed access_lost; the source is never asked."""
    source = FakeSource()
    deps = make_deps(source)
    record = request(deps)
    deps.catalog.delete_query("q1")
    work(deps)
    failed = current(deps, record)
    assert (failed.status, failed.failure_code, failed.attempt) == (
        Status.FAILED,
        FailureCode.ACCESS_LOST,
        0,
    )
    assert source.calls == []


def test_access_revoked_fails_access_lost_before_running() -> None:
    """A requester removed from the query's members loses access before the run."""
    deps = make_deps(FakeSource())
    record = request(deps)
    query = deps.catalog.get_query("q1")
    assert query is not None
    deps.catalog.update_query(
        Query(**{**query.__dict__, "members": frozenset({"bob"}), "owner": "bob"})
    )
    work(deps)
    assert current(deps, record).failure_code is FailureCode.ACCESS_LOST


def test_drain_exits_once_nothing_is_left() -> None:
    """`--drain` runs every queued export and then returns."""
    deps = make_deps(FakeSource())
    records = [request(deps) for _ in range(3)]
    outcomes = Worker(deps, concurrency=2, drain=True).run()
    assert outcomes == {"succeeded": 3}
    assert all(current(deps, r).status is Status.SUCCEEDED for r in records)


def test_shutdown_hands_a_running_export_back() -> None:
    """Past the grace period a stopping worker releases its export for immediate redelivery."""
    started = threading.Event()
    release = threading.Event()

    def block(i: int) -> None:
        if i == 1:
            started.set()
            release.wait(5)

    deps = make_deps(FakeSource(on_batch=block))
    record = request(deps)
    worker = Worker(deps, concurrency=1)
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(5)
    worker.stop(grace_seconds=0)
    worker.interrupt.wait(2)
    release.set()
    thread.join(5)
    handed = current(deps, record)
    assert handed.status is Status.RUNNING
    assert handed.lease_expires_at is not None
    assert handed.lease_expires_at <= deps.clock.now()
    assert deps.objects.incomplete_uploads(record.storage_key) == []
    assert worker.outcomes == {"handed_back": 1}


def test_a_file_stored_by_a_dead_attempt_is_adopted_even_past_the_attempt_cap() -> None:
    """The work is done: the last attempt adopts the file instead of giving up."""
    deps = make_deps(FakeSource())
    clock = deps.clock
    assert isinstance(clock, FrozenClock)
    record = request(deps)
    for _ in range(3):
        assert queue_helpers.claim(
            deps.exports, record.id, worker_id="dead", now=clock.now(), lease_seconds=30
        )
        clock.advance(31)
    upload = deps.objects.begin_upload(record.storage_key)
    upload.upload_part(1, b"n\r\n1\r\n")
    upload.complete(rows=1, sha256="e" * 64)
    work(deps)
    done = current(deps, record)
    assert (done.status, done.attempt, done.row_count) == (Status.SUCCEEDED, 4, 1)


def test_a_metadata_outage_while_settling_leaves_the_export_to_be_redelivered() -> None:
    """If the record cannot be settled, it is not failed on a guess: the lease runs out and
    the next attempt adopts the stored file."""
    deps = make_deps(FakeSource())
    clock = deps.clock
    assert isinstance(clock, FrozenClock)
    record = request(deps)
    original = deps.exports.succeed
    calls = []

    def flaky_succeed(*args: object, **kwargs: object) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise MetadataUnavailableError("the metadata database is unavailable: locked")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    deps.exports.succeed = flaky_succeed  # type: ignore[method-assign]
    work(deps)
    assert current(deps, record).status is Status.RUNNING
    clock.advance(31)
    work(deps)
    done = current(deps, record)
    assert (done.status, done.attempt, done.row_count) == (Status.SUCCEEDED, 2, 1000)


READ = Relation("main", "t", frozenset({"n", "s"}))


def test_each_run_records_with_its_file_what_its_planner_said_it_read() -> None:
    """With no policy rule at all, the worker still plans the run with the values it binds
    and records what it read with the export, so that a rule added later judges the file by
    it; a file adopted from an attempt that died before settling has no such record."""
    source = FakeSource(reads=frozenset({READ}))
    deps = make_deps(source)
    record = request(deps, limit="3")
    work(deps)
    done = current(deps, record)
    assert done.status is Status.SUCCEEDED
    assert done.reads == {"fake": frozenset({READ})}
    assert source.planned == [("select n, s from t where n < $limit", {"limit": 3})]


def test_a_plan_that_fails_on_an_unmarked_source_leaves_the_reads_unknown() -> None:
    """A planner that fails (a timeout) on a source no rule marks does not stop the run: the
    file is made, and what it read is not on record for that source (a rule added later
    reads it as every marked table)."""
    source = FakeSource(reads=frozenset({READ}))

    def slow_plan(*args: object, **kwargs: object) -> None:
        raise QueryTimeoutError("statement timeout of 10 s reached")

    source.relations = slow_plan  # type: ignore[method-assign, assignment]
    deps = make_deps(source)
    record = request(deps)
    work(deps)
    done = current(deps, record)
    assert (done.status, done.reads) == (Status.SUCCEEDED, {"fake": None})


def test_the_run_executes_the_sql_its_planner_saw() -> None:
    """An attempt that reads its query itself (not handed it by the claim) runs the query it
    planned, even when an editor changes the query between the plan and the run: the file's
    record of what it read describes what ran."""
    source = FakeSource(reads=frozenset({READ}))
    deps = make_deps(source)
    record = request(deps)
    clock = deps.clock
    claimed = queue_helpers.claim(
        deps.exports, record.id, worker_id="w-test", now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    read_query = deps.catalog.get_query

    def edited_after_reading(query_id: str) -> Query | None:
        found = read_query(query_id)
        if found is not None and "secrets" not in found.sql:
            deps.catalog.update_query(replace(found, sql="select n, s from secrets"))
        return found

    deps.catalog.get_query = edited_after_reading  # type: ignore[method-assign]
    outcome = run_attempt(deps, claimed, threading.Event(), "w-test", subject=None)
    assert outcome is Outcome.SUCCEEDED
    (planned_sql, _), (ran_sql, _, _) = source.planned[0], source.calls[0]
    assert planned_sql == ran_sql == "select n, s from t where n < $limit"


def test_a_slot_that_fails_unexpectedly_stops_the_worker_which_says_so() -> None:
    """What gets past a slot's handler (here a SystemExit; with the worker's output gone,
    logging the failure raises BrokenPipeError) stops the worker and `run` raises it, instead
    of a drain that never ends with no slot left to drain."""
    deps = make_deps(FakeSource())
    request(deps)
    worker = Worker(deps, concurrency=1, drain=True)

    def gone() -> bool:
        raise SystemExit(3)

    worker.run_once = gone  # type: ignore[method-assign]
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except SystemExit as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)  # (a bound for the failure, which was waiting for ever)
    assert not thread.is_alive()
    assert [exc.code for exc in raised if isinstance(exc, SystemExit)] == [3]
