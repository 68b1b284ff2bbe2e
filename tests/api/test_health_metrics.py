"""Operations endpoints: liveness, readiness with the failing check named, Prometheus metrics
computed from the metadata database."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from qexport.domain.accounts import Principal, Role
from qexport.domain.commands import CancelExport, RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester, Result
from qexport.domain.failures import FailureCode
from qexport.domain.queries import Query
from qexport.services.exports import cancel_export
from qexport.services.requests import record_request
from qexport.store.engine import head_revision
from qexport.store.exports.queue import SqlExportQueue
from qexport.store.stats import read_stats
from tests.api.conftest import Api
from tests.e2e.conftest import wait_for
from tests.fakes import FrozenClock
from tests.support import queue_helpers
from tests.support.stores import MetadataStore, SqlMetadataStore

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_healthz_answers_without_a_token(api: Api) -> None:
    """Liveness needs no token and says ok."""
    response = api.client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


READY = {"database": "ok", "schema": "ok", "storage": "ok"}


def test_readyz_reports_each_check(api: Api) -> None:
    """With the database at this code's schema and the storage folder usable, readiness is
    200 and names each check; a fresh data dir whose storage folder does not exist yet is
    ready too."""
    response = api.client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": READY}


def test_readyz_is_503_while_the_schema_is_not_this_servers(api: Api) -> None:
    """A database whose schema is older than this server's code (a newer server started
    against an old database, without `qexport db upgrade`): 503 naming both revisions."""
    head = head_revision()
    assert isinstance(api.deps.exports, SqlExportQueue)
    with api.deps.exports.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
    response = api.client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"] == {**READY, "schema": "failed"}
    assert "revision 0001" in body["detail"]
    assert f"{head}" in body["detail"]
    assert "qexport db upgrade" in body["detail"]


def test_readyz_answers_without_waiting_for_a_check_that_hangs(api: Api) -> None:
    """A database check that does not answer (a locked table, a network that drops packets)
    is reported `timed_out` instead of holding the probe; a probe that comes while it still
    runs waits for the same run rather than starting another, and once it ends the next
    probe is ready."""
    released = threading.Event()
    runs: list[str] = []

    def hangs() -> None:
        runs.append("started")
        released.wait(timeout=60)

    app = api.client.app
    app.state.context = replace(api.deps, check_database=hangs)  # type: ignore[attr-defined]
    first, second = api.client.get("/readyz"), api.client.get("/readyz")
    for response in (first, second):
        assert response.status_code == 503
        assert response.json()["checks"] == {**READY, "database": "timed_out"}
        assert "database did not answer" in response.json()["detail"]
    assert runs == ["started"]
    released.set()
    answered = wait_for(lambda: api.client.get("/readyz").status_code == 200, timeout=30)
    assert answered


def test_readyz_is_503_when_the_storage_folder_is_unusable(api: Api) -> None:
    """A file where the storage folder should be: 503 problem naming storage, without paths."""
    objects = api.context.settings.data_dir / "objects"
    objects.write_text("not a folder")
    response = api.client.get("/readyz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "unavailable"
    assert body["checks"] == {**READY, "storage": "failed"}
    assert "storage" in body["detail"]
    assert str(api.context.settings.data_dir) not in response.text


def test_readyz_is_503_when_the_database_file_is_gone(api: Api) -> None:
    """The SQLite file deleted under a running server: 503 naming the database check."""
    database = api.context.settings.data_dir / "qexport.db"
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        path.unlink(missing_ok=True)
    response = api.client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {**READY, "database": "failed", "schema": "failed"}
    assert "qexport.db" not in response.text


def test_metrics_on_an_empty_database(api: Api) -> None:
    """Every status and failure code is reported (as 0) before the first export, so alerts
    and rates work from the start; no token is needed."""
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = _samples(response.text)
    for status in ("queued", "running", "succeeded", "failed", "expired"):
        assert _value(samples, "qexport_exports", status=status) == 0
    for code in FailureCode:
        assert _value(samples, "qexport_export_failures_total", code=code.value) == 0
    assert _value(samples, "qexport_queue_depth") == 0
    assert _value(samples, "qexport_oldest_queued_age_seconds") == 0
    assert _value(samples, "qexport_rows_written_total") == 0


@pytest.fixture
def people(api: Api) -> Requester:
    api.member("ann@acme.test", "viewer")
    api.add_query("orders")
    api.add_query("broken", sql="SELEC id FROM orders", parameters=())
    return Requester(api.user_id("ann@acme.test"), "acme")


def _request(api: Api, who: Requester, query: str = "orders") -> ExportRecord:
    return record_request(
        api.deps.exports,
        api.deps.catalog,
        api.clock,
        who,
        RequestExport(SubjectRef("query", query, by_name=True), "csv"),
    )


def _retried_by_hand(store: MetadataStore, clock: FrozenClock, export_id: str) -> None:
    """Attempt 1 runs 12 s and is released for a retry; attempt 2 runs 3 s and succeeds."""
    first = queue_helpers.claim(store, export_id, worker_id="w1", now=clock.now(), lease_seconds=30)
    assert first is not None
    assert first.lease_token
    clock.advance(12)
    assert store.release_with_backoff(
        export_id,
        first.lease_token,
        now=clock.now(),
        delay_seconds=0,
        code=FailureCode.SOURCE_UNAVAILABLE,
        detail="source down",
    )
    clock.advance(1)
    second = queue_helpers.claim(
        store, export_id, worker_id="w2", now=clock.now(), lease_seconds=30
    )
    assert second is not None
    assert second.lease_token
    assert second.attempt == 2
    clock.advance(3)
    result = Result(size_bytes=10, row_count=5, sha256="0" * 64)
    expires = clock.now() + timedelta(days=7)
    assert store.succeed(
        export_id, second.lease_token, now=clock.now(), result=result, expires_at=expires
    )


def test_metrics_after_exports(api: Api, people: Requester) -> None:
    """Counts by effective status, failures by code, rows and bytes over succeeded (expired
    included) exports, queue depth, oldest queued age, and attempt durations of the last 24 h
    by outcome, all from what the worker and the store recorded."""
    store, clock = api.deps.exports, api.clock
    old = [_request(api, people), _request(api, people)]
    assert api.drain() == {"succeeded": 2}
    clock.advance(8 * 86400)  # past the 7-day retention: both expired; their attempts too old
    recent = _request(api, people)
    _request(api, people, "broken")
    admin = Principal(people.user_id, "", people.workspace_id, Role.ADMIN, "t")
    cancel_export(api.deps, admin, CancelExport(_request(api, people).id))
    assert api.drain() == {"succeeded": 1, "failed": 1}
    retried = _request(api, people)
    _retried_by_hand(store, clock, retried.id)
    _request(api, people)
    clock.advance(60)
    _request(api, people)
    clock.advance(30)

    samples = _samples(api.client.get("/metrics").text)

    statuses = ("queued", "running", "succeeded", "failed", "expired")
    counts = {s: _value(samples, "qexport_exports", status=s) for s in statuses}
    assert counts == {"queued": 2, "running": 0, "succeeded": 2, "failed": 2, "expired": 2}
    assert _value(samples, "qexport_export_failures_total", code="query_invalid") == 1
    assert _value(samples, "qexport_export_failures_total", code="cancelled") == 1
    assert _value(samples, "qexport_export_failures_total", code="internal") == 0
    done = [store.get_export(r.id) for r in (*old, recent)]
    assert _value(samples, "qexport_rows_written_total") == 3 * 100 + 5
    sizes = sum(r.size_bytes or 0 for r in done if r is not None)
    assert sizes > 0
    assert _value(samples, "qexport_bytes_written_total") == sizes + 10
    assert _value(samples, "qexport_queue_depth") == 2
    assert _value(samples, "qexport_oldest_queued_age_seconds") == 90

    duration = "qexport_attempt_duration_seconds"
    # Attempts started in the last 24 h: `recent` (0 s under the frozen clock) and the retried
    # one's second attempt (3 s) succeeded, `broken` failed, the first retried attempt (12 s)
    # was released; the two old exports' attempts are outside the window.
    assert _value(samples, f"{duration}_gcount", outcome="succeeded") == 2
    assert _value(samples, f"{duration}_gsum", outcome="succeeded") == pytest.approx(3.0)
    assert _value(samples, f"{duration}_bucket", outcome="succeeded", le="1.0") == 1
    assert _value(samples, f"{duration}_bucket", outcome="succeeded", le="5.0") == 2
    assert _value(samples, f"{duration}_gcount", outcome="failed") == 1
    assert _value(samples, f"{duration}_bucket", outcome="released", le="5.0") == 0
    assert _value(samples, f"{duration}_bucket", outcome="released", le="15.0") == 1
    assert _value(samples, f"{duration}_gsum", outcome="released") == pytest.approx(12.0)
    assert _value(samples, f"{duration}_gcount", outcome="cancelled") == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_stats_read_the_same_on_both_databases(
    backend: str, request: pytest.FixtureRequest, clock: FrozenClock
) -> None:
    """The scrape's SQL gives the same figures on SQLite and PostgreSQL: an export running
    with an expired lease counts as claimable, a released attempt's duration is measured."""
    store: SqlMetadataStore = request.getfixturevalue(f"{backend}_store")

    who = Requester("ann", "acme")
    store.add_query(Query("q1", "acme", "q", "SELECT 1 AS x", "demo", ()))
    queued = record_request(
        store, store, clock, who, RequestExport(SubjectRef("query", "q", by_name=True), "csv")
    )
    stale = record_request(
        store, store, clock, who, RequestExport(SubjectRef("query", "q", by_name=True), "csv")
    )
    retried = record_request(
        store, store, clock, who, RequestExport(SubjectRef("query", "q", by_name=True), "csv")
    )
    assert queue_helpers.claim(store, stale.id, worker_id="w", now=clock.now(), lease_seconds=5)
    _retried_by_hand(store, clock, retried.id)
    clock.advance(10)

    stats = read_stats(store.engine, clock.now())

    assert stats.by_status == {
        "queued": 1,
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "expired": 0,
    }
    assert stats.queue_depth == 2  # the queued one and the running one whose lease expired
    assert stats.oldest_queued_at is not None
    assert stats.oldest_queued_at == queued.created_at
    assert (stats.rows_written, stats.bytes_written) == (5, 10)
    assert stats.attempts["released"].sum_seconds == pytest.approx(12.0)
    assert stats.attempts["succeeded"].sum_seconds == pytest.approx(3.0)
    assert dict(stats.attempts["succeeded"].buckets)[5.0] == 1
    assert dict(stats.attempts["succeeded"].buckets)[1.0] == 0
