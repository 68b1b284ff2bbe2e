"""What keeps previews on the record, on SQLite and PostgreSQL: the rate limits' sliding
window, exact when many callers ask at once, and each workspace's preview totals, kept by the
database itself as preview events are written and pruned."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from qexport.domain.audit import OPERATOR, Action, ActorKind, AuditEvent, Outcome
from qexport.domain.stats import PreviewTally
from qexport.store.audit.log import SqlAuditLog
from qexport.store.rates import SqlRateLimits
from qexport.store.stats import read_stats
from tests.support.stores import SqlMetadataStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def test_a_key_is_admitted_its_limit_in_any_window_and_told_when_next(
    sql_store: SqlMetadataStore,
) -> None:
    """Three a minute: three uses are admitted, the fourth is told to wait until the first
    leaves the window (and is not counted); another key has its own; once a minute has passed
    since the first use, one more is admitted."""
    rates = SqlRateLimits(sql_store.engine)

    def admit(key: str, at: datetime) -> timedelta:
        return rates.admit(key, now=at, limit=3, window=MINUTE)

    for second in (0, 10, 20):
        assert admit("ann", T0 + timedelta(seconds=second)) == timedelta(0)
    assert admit("ann", T0 + timedelta(seconds=30)) == timedelta(seconds=30)
    assert admit("ann", T0 + timedelta(seconds=59)) == timedelta(seconds=1)
    assert admit("bob", T0 + timedelta(seconds=30)) == timedelta(0)
    assert admit("ann", T0 + timedelta(seconds=60)) == timedelta(0)
    assert admit("ann", T0 + timedelta(seconds=61)) == timedelta(seconds=9)


def test_a_key_longer_than_its_column_is_counted_all_the_same(
    sql_store: SqlMetadataStore,
) -> None:
    """A key of 1,000 characters (a local requester may name any user) is admitted and
    counted like any other, never refused by the database."""
    rates = SqlRateLimits(sql_store.engine)
    key = "preview:acme:" + "u" * 1_000
    assert rates.admit(key, now=T0, limit=1, window=MINUTE) == timedelta(0)
    assert rates.admit(key, now=T0, limit=1, window=MINUTE) == MINUTE
    assert rates.admit(key[:-1], now=T0, limit=1, window=MINUTE) == timedelta(0)


def test_a_use_given_back_frees_one_place_and_only_one(sql_store: SqlMetadataStore) -> None:
    """Two uses at the same moment, a limit of two: giving one back admits one more, not
    two; giving back a use that was never recorded, or another key's, changes nothing; a
    long key is given back as it was admitted."""
    rates = SqlRateLimits(sql_store.engine)

    def admit(key: str) -> bool:
        return rates.admit(key, now=T0, limit=2, window=MINUTE) == timedelta(0)

    assert admit("ann")
    assert admit("ann")
    assert not admit("ann")
    rates.give_back("ann", at=T0)
    rates.give_back("bob", at=T0)
    rates.give_back("ann", at=T0 + timedelta(seconds=1))
    assert admit("ann")
    assert not admit("ann")
    key = "preview:acme:" + "u" * 1_000
    assert admit(key)
    assert admit(key)
    rates.give_back(key, at=T0)
    assert admit(key)
    assert not admit(key)


def test_callers_at_once_are_admitted_exactly_the_limit(sql_store: SqlMetadataStore) -> None:
    """Twenty callers at the same moment (each its own connection, as server processes are)
    with a limit of five: exactly five admitted."""
    rates = SqlRateLimits(sql_store.engine)
    barrier = threading.Barrier(20)
    admitted: list[bool] = []

    def ask() -> None:
        barrier.wait(timeout=30)
        admitted.append(rates.admit("ann", now=T0, limit=5, window=MINUTE) == timedelta(0))

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(admitted) == 20
    assert admitted.count(True) == 5


def _previewed(n: int, workspace: str, rows: Any, outcome: Outcome = Outcome.OK) -> AuditEvent:
    details = {"query_name": "orders", "parameters": {"off": n * 100}}
    if rows is not None:
        details["rows"] = rows
    return AuditEvent(
        at=T0 + timedelta(minutes=n),
        workspace_id=workspace,
        actor_kind=ActorKind.USER,
        actor_id="ann",
        action=Action.QUERY_PREVIEWED,
        target_kind="query",
        target_id="q-orders",
        outcome=outcome,
        details=details,
    )


def _tallies(sql_store: SqlMetadataStore) -> dict[str, PreviewTally]:
    found = read_stats(sql_store.engine, T0 + timedelta(days=1)).previews
    return {w: found.get(w, PreviewTally()) for w in ("acme", "beta")}


def test_preview_totals_follow_the_events_written_and_pruned(sql_store: SqlMetadataStore) -> None:
    """Previews that showed rows add themselves and their rows to their workspace's totals
    however they are written (alone, or together); refused and failed ones, and other events,
    do not; a prune takes off exactly the previews it deleted."""
    log = SqlAuditLog(sql_store.engine)
    assert log.record(_previewed(0, "acme", 100))
    assert log.record(_previewed(1, "acme", 100))
    assert log.record(_previewed(2, "acme", None, Outcome.FAILED))
    assert log.record(_previewed(3, "acme", None, Outcome.REFUSED))
    futures = [log.record_soon(_previewed(4 + n, "beta", 7)) for n in range(3)]
    assert all(f.result(timeout=30) for f in futures)
    other = AuditEvent(
        at=T0 + timedelta(minutes=10),
        workspace_id="acme",
        actor_kind=ActorKind.USER,
        actor_id="ann",
        action=Action.FILE_DOWNLOADED,
        target_kind="export",
        target_id="e1",
        details={"bytes": 10, "rows": 1_000},
    )
    assert log.record(other)
    assert _tallies(sql_store) == {"acme": PreviewTally(2, 200), "beta": PreviewTally(3, 21)}
    pruned = log.prune(
        before=T0 + timedelta(minutes=1, seconds=30),
        event=AuditEvent(
            at=T0 + timedelta(days=1),
            workspace_id="*",
            actor_kind=OPERATOR.kind,
            actor_id=OPERATOR.id,
            action=Action.AUDIT_PRUNED,
            target_kind=None,
            target_id=None,
        ),
    )
    assert pruned["acme"] == 2  # the two previews before the cut
    assert _tallies(sql_store) == {"acme": PreviewTally(0, 0), "beta": PreviewTally(3, 21)}
    with sql_store.engine.connect() as conn:
        kept = conn.execute(
            sa.text("SELECT count(*) FROM audit_events WHERE action = 'query.previewed'")
        ).scalar_one()
    assert kept == 5
