"""Nothing staged for an export outlives it: discarded when it settles, swept at a start."""

from __future__ import annotations

import threading

import pytest

from qexport.container import Container
from qexport.domain.exports import ExportRecord, Status
from qexport.domain.failures import FailureCode, QueryInvalidError, StorageUnavailableError
from qexport.ports import ClaimResult
from qexport.worker.loop import Worker
from qexport.worker.staging import sweep_settled_staging
from tests.fakes import FrozenClock, InMemoryObjectStore
from tests.support import queue_helpers
from tests.unit.fakes import FakeSource
from tests.unit.test_worker import current, make_deps, request, work


def _objects(deps: Container) -> InMemoryObjectStore:
    assert isinstance(deps.objects, InMemoryObjectStore)
    return deps.objects


def _die_mid_upload(deps: Container, record: ExportRecord, worker: str = "dead") -> str:
    """An attempt claims the export, begins its upload and is killed: returns the upload id."""
    clock = deps.clock
    assert isinstance(clock, FrozenClock)
    claimed = queue_helpers.claim(
        deps.exports, record.id, worker_id=worker, now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    upload = deps.objects.begin_upload(record.storage_key)
    upload.upload_part(1, b"half a file")
    clock.advance(31)  # its lease runs out
    return upload.upload_id  # type: ignore[attr-defined, no-any-return]


def test_what_a_killed_attempt_staged_is_discarded_when_the_next_one_succeeds() -> None:
    """Killed mid-upload, redelivered, succeeded: the dead attempt's upload is gone too."""
    deps = make_deps(FakeSource())
    record = request(deps)
    _die_mid_upload(deps, record)
    assert deps.objects.incomplete_uploads(record.storage_key) != []

    work(deps)

    done = current(deps, record)
    assert (done.status, done.attempt) == (Status.SUCCEEDED, 2)
    assert deps.objects.incomplete_uploads(record.storage_key) == []
    assert deps.objects.head(record.storage_key) is not None


def test_what_killed_attempts_staged_is_discarded_when_the_export_gives_up() -> None:
    """Every attempt killed mid-upload: attempts_exhausted, and no upload of any attempt left."""
    deps = make_deps(FakeSource())
    record = request(deps)
    for _ in range(deps.settings.max_attempts):
        _die_mid_upload(deps, record)
    assert len(deps.objects.incomplete_uploads(record.storage_key)) == 3

    work(deps)

    failed = current(deps, record)
    assert failed.failure_code is FailureCode.ATTEMPTS_EXHAUSTED
    assert deps.objects.incomplete_uploads(record.storage_key) == []


def test_a_permanent_failure_discards_what_earlier_attempts_staged() -> None:
    """A redelivered attempt that fails query_invalid removes the killed attempt's upload."""
    deps = make_deps(FakeSource(error=QueryInvalidError("no such column"), fail_at_batch=2))
    record = request(deps)
    _die_mid_upload(deps, record)

    work(deps)

    assert current(deps, record).failure_code is FailureCode.QUERY_INVALID
    assert deps.objects.incomplete_uploads(record.storage_key) == []


def _cancel_or_steal_midway(deps: Container, record: ExportRecord, action: str) -> threading.Event:
    """Hook the source so that, mid-production, the export is cancelled or redelivered to
    another worker; returns the event set once the running attempt's heartbeat noticed."""
    noticed = threading.Event()
    original = deps.exports.heartbeat

    def heartbeat(*args: object, **kwargs: object) -> bool:
        ok = original(*args, **kwargs)  # type: ignore[arg-type]
        if not ok:
            noticed.set()
        return ok

    deps.exports.heartbeat = heartbeat  # type: ignore[method-assign]
    done = threading.Event()

    def midway(i: int) -> None:
        if i != 3 or done.is_set():
            return
        done.set()
        clock = deps.clock
        assert isinstance(clock, FrozenClock)
        if action == "cancel":
            deps.exports.cancel(record.id, now=clock.now())
        else:  # the running attempt's lease runs out and another worker takes the export
            clock.advance(1)
            assert queue_helpers.claim(
                deps.exports, record.id, worker_id="other", now=clock.now(), lease_seconds=60
            )
            deps.objects.begin_upload(record.storage_key).upload_part(1, b"the other's")
        noticed.wait(2)

    deps.sources.source_for("fake", "acme").on_batch = midway  # type: ignore[attr-defined]
    return noticed


def test_a_cancel_noticed_mid_production_discards_what_every_attempt_staged() -> None:
    """Cancelled from the API while running: the running attempt notices within a heartbeat
    and removes its own upload and the one a killed attempt left before it."""
    deps = make_deps(FakeSource(), lease_seconds=0.15)
    record = request(deps)
    _die_mid_upload(deps, record)
    noticed = _cancel_or_steal_midway(deps, record, "cancel")

    work(deps)

    assert noticed.is_set()
    assert current(deps, record).failure_code is FailureCode.CANCELLED
    assert deps.objects.incomplete_uploads(record.storage_key) == []


def test_an_attempt_that_loses_its_lease_to_another_worker_keeps_that_workers_upload() -> None:
    """Redelivered elsewhere (not settled): the stale attempt aborts only its own upload."""
    deps = make_deps(FakeSource(), lease_seconds=0.15)
    record = request(deps)
    noticed = _cancel_or_steal_midway(deps, record, "steal")

    work(deps)

    assert noticed.is_set()
    now = current(deps, record)
    assert (now.status, now.worker_id) == (Status.RUNNING, "other")
    assert len(deps.objects.incomplete_uploads(record.storage_key)) == 1


def test_a_clean_up_error_never_changes_how_the_export_settled() -> None:
    """discard_staging failing: the export still succeeded; what is left waits for the sweep."""
    deps = make_deps(FakeSource())
    record = request(deps)
    left = _die_mid_upload(deps, record)

    def broken(key: str) -> int:
        raise StorageUnavailableError("S3 is down")

    _objects(deps).discard_staging = broken  # type: ignore[method-assign]

    work(deps)

    assert current(deps, record).status is Status.SUCCEEDED
    assert deps.objects.incomplete_uploads(record.storage_key) == [left]


def test_a_first_attempt_that_staged_nothing_asks_the_store_for_nothing_more() -> None:
    """A one-part file stored by one request (S3) on the first attempt: no listing follows."""
    deps = make_deps(FakeSource())
    objects = _objects(deps)
    begin = objects.begin_upload
    calls: list[str] = []

    def unstaged_upload(key: str) -> object:
        upload = begin(key)
        upload.staged = False
        return upload

    def counted(key: str) -> int:
        calls.append(key)
        return 0

    objects.begin_upload = unstaged_upload  # type: ignore[assignment, method-assign]
    objects.discard_staging = counted  # type: ignore[method-assign]
    first, second = request(deps), request(deps)
    _die_mid_upload(deps, second)

    work(deps)
    work(deps)

    assert current(deps, first).status is current(deps, second).status is Status.SUCCEEDED
    assert calls == [second.storage_key]


def test_a_refusal_after_attempts_ran_discards_what_they_staged() -> None:
    """Should the pre-run check ever refuse a redelivered export, its attempts' uploads go."""
    deps = make_deps(FakeSource())
    record = request(deps)
    _die_mid_upload(deps, record)
    deps.exports.cancel(record.id, now=deps.clock.now())  # settled, as a refusal would
    refused = current(deps, record)
    deps.exports.claim_next = lambda **_: ClaimResult(refused=refused)  # type: ignore[method-assign]

    assert work(deps)

    assert deps.objects.incomplete_uploads(record.storage_key) == []


def test_the_start_up_sweep_removes_staging_of_settled_exports_only() -> None:
    """Settled exports lose their staging; a running, a queued or an unknown export keeps it."""
    deps = make_deps(FakeSource())
    objects = _objects(deps)
    cancelled, running, queued = request(deps), request(deps), request(deps)
    _die_mid_upload(deps, cancelled)
    deps.exports.cancel(cancelled.id, now=deps.clock.now())
    assert queue_helpers.claim(
        deps.exports, running.id, worker_id="alive", now=deps.clock.now(), lease_seconds=60
    )
    alive = objects.begin_upload(running.storage_key)
    objects.begin_upload(queued.storage_key)  # cannot happen; still not the sweep's to judge
    unknown = objects.begin_upload("exports/w1/no-such-export/f.csv")
    foreign = objects.begin_upload("backups/2026/db.dump")

    assert sweep_settled_staging(deps.exports, objects) == 1

    assert objects.incomplete_uploads(cancelled.storage_key) == []
    assert objects.incomplete_uploads(running.storage_key) == [alive.upload_id]
    assert len(objects.incomplete_uploads(queued.storage_key)) == 1
    assert objects.incomplete_uploads(unknown.key) == [unknown.upload_id]
    assert objects.incomplete_uploads(foreign.key) == [foreign.upload_id]


def test_a_worker_sweeps_at_its_start() -> None:
    """An export cancelled while its worker was dead: the next worker's start removes what
    the dead one staged, though it never runs that export."""
    deps = make_deps(FakeSource())
    record = request(deps)
    _die_mid_upload(deps, record)
    deps.exports.cancel(record.id, now=deps.clock.now())

    assert Worker(deps, drain=True).run() == {}

    assert deps.objects.incomplete_uploads(record.storage_key) == []


@pytest.mark.parametrize("failing", ["staged_keys", "get_export"])
def test_a_sweep_that_cannot_look_leaves_everything_and_does_not_raise(failing: str) -> None:
    """The store or the metadata database unavailable: the sweep logs, removes nothing."""
    deps = make_deps(FakeSource())
    record = request(deps)
    _die_mid_upload(deps, record)
    deps.exports.cancel(record.id, now=deps.clock.now())

    def unavailable(*_args: object) -> object:
        raise StorageUnavailableError("unavailable")

    target = deps.objects if failing == "staged_keys" else deps.exports
    setattr(target, failing, unavailable)

    assert sweep_settled_staging(deps.exports, deps.objects) == 0
    assert len(deps.objects.incomplete_uploads(record.storage_key)) == 1
