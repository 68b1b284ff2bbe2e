"""The audit trail on SQLite and PostgreSQL: append-only in the database, one keyed hash
chain per workspace that names the first tampered event, pruning that keeps it verifiable,
concurrent writers that never fork a chain, and events from before keys that still verify."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from qexport.domain.audit import (
    GENESIS,
    OPERATOR,
    Action,
    ActorKind,
    AuditEvent,
    AuditFilter,
    Outcome,
    verify_chain,
)
from qexport.store.audit.log import SqlAuditLog
from qexport.store.audit.writer import Writer
from qexport.store.tables.audit import audit_events
from tests.fakes import FrozenClock
from tests.support.stores import SqlMetadataStore, keyed

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(n: int, workspace: str = "acme", at: datetime = T0) -> AuditEvent:
    return AuditEvent(
        at=at + timedelta(minutes=n),
        workspace_id=workspace,
        actor_kind=ActorKind.USER,
        actor_id=f"user-{n % 3}",
        action=Action.FILE_DOWNLOADED,
        target_kind="export",
        target_id=f"export-{n}",
        outcome=Outcome.OK,
        client_address="203.0.113.7",
        details={"bytes": n * 10, "range": "bytes=0-"},
    )


def _verify(log: SqlAuditLog, workspace: str) -> tuple[int, int | None]:
    """(events verified, id of the first broken event or None), as `audit verify` walks it;
    a chain that starts where no prune said fails the test."""
    check = verify_chain(workspace, log.anchor(workspace), log.chain(workspace), log.keys)
    assert check.problem is None, check.problem
    return check.verified, check.broken.id if check.broken else None


def test_events_chain_per_workspace_and_read_back_newest_first(
    sql_store: SqlMetadataStore,
) -> None:
    """Each event names the hash of the one before in its own workspace (zeros first); the
    list narrows by actor, action prefix, target and time, newest first, keyset by id."""
    log = SqlAuditLog(sql_store.engine)
    for n in range(6):
        assert log.record(_event(n, "acme" if n % 2 == 0 else "beta"))
    acme = list(log.chain("acme"))
    assert [e.target_id for e in acme] == ["export-0", "export-2", "export-4"]
    assert acme[0].prev_hash == GENESIS
    assert [e.prev_hash for e in acme[1:]] == [e.hash for e in acme[:-1]]
    assert _verify(log, "acme") == (3, None)
    assert _verify(log, "beta") == (3, None)
    assert log.chains() == ["acme", "beta"]
    newest = log.list_events(workspace_id="acme", narrow=AuditFilter(), limit=2)
    assert [e.target_id for e in newest] == ["export-4", "export-2"]
    older = log.list_events(workspace_id="acme", narrow=AuditFilter(), before_id=newest[-1].id)
    assert [e.target_id for e in older] == ["export-0"]
    by_actor = log.list_events(workspace_id=None, narrow=AuditFilter(actor="user-1"))
    assert sorted(e.target_id or "" for e in by_actor) == ["export-1", "export-4"]
    assert log.list_events(workspace_id="acme", narrow=AuditFilter(action="file.")) != []
    assert log.list_events(workspace_id="acme", narrow=AuditFilter(action="export.")) == []
    window = AuditFilter(since=T0 + timedelta(minutes=2), until=T0 + timedelta(minutes=4))
    assert [e.target_id for e in log.list_events(workspace_id="acme", narrow=window)] == [
        "export-2"
    ]


def test_the_database_refuses_any_update_or_delete_of_an_event(
    sql_store: SqlMetadataStore,
) -> None:
    """A trigger aborts even a raw UPDATE or DELETE of an audit row, on both databases."""
    log = SqlAuditLog(sql_store.engine)
    log.record(_event(1))
    for statement in (
        audit_events.update().values(outcome="refused"),
        audit_events.update().values(details="{}"),
        audit_events.delete(),
    ):
        with (
            pytest.raises(sa.exc.DatabaseError, match="audit events are append-only"),
            sql_store.engine.begin() as conn,
        ):
            conn.execute(statement)
    assert len(list(log.chain("acme"))) == 1


def _drop_triggers(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("DROP TRIGGER audit_events_append_only ON audit_events")
        else:
            conn.exec_driver_sql("DROP TRIGGER audit_events_no_update")
            conn.exec_driver_sql("DROP TRIGGER audit_events_no_delete")


def test_an_event_edited_behind_the_triggers_is_named_by_verify(
    sql_store: SqlMetadataStore,
) -> None:
    """Someone who drops the trigger and rewrites an event's outcome, or removes an event,
    is caught: verify names the first event that no longer matches."""
    log = SqlAuditLog(sql_store.engine)
    for n in range(5):
        log.record(_event(n))
    ids = [e.id for e in log.chain("acme")]
    _drop_triggers(sql_store.engine)
    with sql_store.engine.begin() as conn:
        conn.execute(
            audit_events.update().where(audit_events.c.id == ids[2]).values(outcome="refused")
        )
    assert _verify(log, "acme") == (2, ids[2])
    with sql_store.engine.begin() as conn:  # undo, then remove an event instead
        conn.execute(audit_events.update().where(audit_events.c.id == ids[2]).values(outcome="ok"))
        conn.execute(audit_events.delete().where(audit_events.c.id == ids[1]))
    assert _verify(log, "acme") == (1, ids[2])


def test_pruning_keeps_each_chain_verifiable_and_is_itself_recorded(
    sql_store: SqlMetadataStore,
) -> None:
    """Pruning deletes the old events through its own path, stores each chain's anchor so
    that verify passes from the first kept event, records itself (the operator) in the same
    transaction, and leaves the database refusing ordinary deletes afterwards."""
    log = SqlAuditLog(sql_store.engine)
    for n in range(6):
        log.record(_event(n, "acme", at=T0 + timedelta(days=n * 100)))
    log.record(_event(0, "beta", at=T0))
    cutoff = T0 + timedelta(days=250)
    pruned = log.prune(
        before=cutoff,
        event=AuditEvent(
            at=cutoff,
            workspace_id="*",
            actor_kind=OPERATOR.kind,
            actor_id=OPERATOR.id,
            action=Action.AUDIT_PRUNED,
            target_kind=None,
            target_id=None,
        ),
    )
    assert pruned == {"acme": 3, "beta": 1}
    kept = list(log.chain("acme"))
    assert [e.target_id for e in kept] == ["export-3", "export-4", "export-5", None]
    assert [e.seq for e in kept] == [4, 5, 6, 7]
    assert log.anchor("acme").hash != GENESIS
    assert log.anchor("acme").seq == 3
    assert _verify(log, "acme") == (4, None)
    assert _verify(log, "beta") == (1, None)
    log.record(_event(9, "beta"))  # a chain pruned of its every event goes on from its anchor
    assert _verify(log, "beta") == (2, None)
    (pruning,) = log.list_events(workspace_id="*", narrow=AuditFilter(action="audit.pruned"))
    assert pruning.actor_kind == "operator"
    assert '"deleted":4' in pruning.details
    (in_acme,) = log.list_events(workspace_id="acme", narrow=AuditFilter(action="audit."))
    assert '"anchor_seq":3' in in_acme.details
    with (
        pytest.raises(sa.exc.DatabaseError, match="append-only"),
        sql_store.engine.begin() as conn,
    ):
        conn.execute(audit_events.delete())


def test_an_event_written_with_a_change_rolls_back_with_it(
    sql_store: SqlMetadataStore, clock: FrozenClock
) -> None:
    """A store write's `audit=` event is in the write's transaction: a refused write (a
    cancel of a settled export matches no row) leaves no event; a made one leaves one."""
    from tests.support.factories import new_export

    log = SqlAuditLog(sql_store.engine)
    record = sql_store.insert_export(new_export(clock.now()), audit=_event(1))
    cancelled = _event(2)
    assert sql_store.cancel(record.id, now=clock.now(), audit=cancelled)
    assert not sql_store.cancel(record.id, now=clock.now(), audit=cancelled)
    assert [e.target_id for e in log.chain("acme")] == ["export-1", "export-2"]


def test_concurrent_writers_of_one_workspace_never_fork_its_chain(
    sql_store: SqlMetadataStore,
) -> None:
    """Eight threads recording into one workspace at once (their events written together,
    as they gather): every event is kept, each chained after exactly one other, and the
    whole chain verifies."""
    engine = sql_store.engine
    log = SqlAuditLog(engine)
    start = threading.Barrier(8)
    failures: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            start.wait()
            for n in range(25):
                assert log.record(_event(worker * 100 + n))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    events = list(log.chain("acme"))
    assert len(events) == 200
    assert len({e.prev_hash for e in events}) == 200  # no two events after the same one
    assert _verify(log, "acme") == (200, None)
    assert log.failures == 0


def test_an_event_that_cannot_be_written_fails_alone(sql_store: SqlMetadataStore) -> None:
    """Among events recorded at the same moment by eight threads, one that cannot be stored
    (details that are no JSON) is refused and counted; the other seven are written."""
    log = SqlAuditLog(sql_store.engine)
    start = threading.Barrier(8)
    results: dict[int, bool] = {}

    def write(worker: int) -> None:
        event = _event(worker)
        if worker == 3:
            event = replace(event, details={("no", "json"): "a key JSON cannot hold"})
        start.wait()
        results[worker] = log.record(event)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {w: w != 3 for w in range(8)}
    assert log.failures == 1
    assert sorted(e.target_id for e in log.chain("acme")) == [
        f"export-{w}" for w in range(8) if w != 3
    ]
    assert _verify(log, "acme") == (7, None)


def test_events_given_to_the_writer_are_written_in_batches_beside_record(
    sql_store: SqlMetadataStore,
) -> None:
    """`record_soon` from eight threads, beside `record` from another: every event is kept
    once, the chain verifies, each future settles True, and those that gathered within the
    writer's linger share a batch (fewer batches than events)."""
    log = SqlAuditLog(sql_store.engine, linger=0.05)
    batches: list[int] = []
    write = log._write

    def counted(batch: list[Any]) -> None:
        batches.append(len(batch))
        write(batch)

    log._writer._write = counted
    start = threading.Barrier(9)
    futures: list[Future[bool]] = []

    def soon(worker: int) -> None:
        start.wait()
        futures.extend(log.record_soon(_event(worker * 100 + n)) for n in range(20))

    def now() -> None:
        start.wait()
        for n in range(10):
            assert log.record(_event(900 + n))

    threads = [threading.Thread(target=soon, args=(w,)) for w in range(8)]
    threads.append(threading.Thread(target=now))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [future.result(timeout=30) for future in futures] == [True] * 160
    assert sum(batches) == 160
    assert len(batches) < 160
    events = list(log.chain("acme"))
    assert len(events) == 170
    assert len({e.target_id for e in events}) == 170
    assert _verify(log, "acme") == (170, None)
    assert log.failures == 0


def test_the_writer_settles_an_event_it_cannot_write_as_not_recorded(
    sql_store: SqlMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event that cannot be stored settles False and is counted; those beside it are
    written. An idle writer stops, and the next event starts it again."""
    monkeypatch.setattr(Writer, "_IDLE_SECONDS", 0.05)
    log = SqlAuditLog(sql_store.engine, linger=0.05)
    bad = replace(_event(1), details={("no", "json"): "a key JSON cannot hold"})
    futures = [log.record_soon(e) for e in (_event(0), bad, _event(2))]
    assert [future.result(timeout=30) for future in futures] == [True, False, True]
    assert log.failures == 1
    first = log._writer.thread
    assert first is not None
    first.join(timeout=10)
    assert not first.is_alive()
    assert log.record_soon(_event(3)).result(timeout=30)
    assert log._writer.thread is not first
    assert sorted(e.target_id for e in log.chain("acme")) == ["export-0", "export-2", "export-3"]
    assert _verify(log, "acme") == (3, None)


def test_writers_of_separate_processes_and_transactions_never_fork_a_chain(
    sql_store: SqlMetadataStore,
) -> None:
    """Three engines, as three server processes would have, write into one workspace at
    once: downloads' events recorded on their own, and requests whose event is written in
    the request's own transaction. Whoever waited for the chain's lock chains after the
    event of the writer it waited for: no two events follow the same one, and it verifies."""
    from qexport.store.engine import create_engine
    from tests.support.factories import new_export

    url = sql_store.engine.url.render_as_string(hide_password=False)
    engines = [keyed(create_engine(url)) for _ in range(3)]
    start = threading.Barrier(6)
    failures: list[BaseException] = []

    def record(engine: sa.Engine, worker: int) -> None:
        log = SqlAuditLog(engine)
        try:
            start.wait()
            for n in range(20):
                assert log.record(_event(worker * 100 + n))
        except BaseException as exc:  # reported below
            failures.append(exc)

    def request(engine: sa.Engine, worker: int) -> None:
        store = SqlMetadataStore(engine)
        try:
            start.wait()
            for n in range(20):
                store.insert_export(new_export(T0), audit=_event(worker * 100 + n))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [
        threading.Thread(target=job, args=(engine, 10 * i + j))
        for i, engine in enumerate(engines)
        for j, job in enumerate((record, request))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for engine in engines:
            engine.dispose()
    assert failures == []
    log = SqlAuditLog(sql_store.engine)
    events = list(log.chain("acme"))
    assert len(events) == 120
    assert len({e.prev_hash for e in events}) == 120
    assert _verify(log, "acme") == (120, None)


def _key_material(log: SqlAuditLog, workspaces: list[str]) -> list[bytes]:
    """Every form of the chains' keys a database could be handed: each workspace's event key
    and HMAC's two padded keys made from it, the chain and checkpoint keys they derive from."""
    key = log.keys.current
    found = [key._chain, key._checkpoint]
    for workspace in workspaces:
        event_key = key.event_key(workspace)
        padded = event_key.ljust(64, b"\0")
        found += [event_key, bytes(b ^ 0x36 for b in padded), bytes(b ^ 0x5C for b in padded)]
    return found


def _holds(value: Any, secret: bytes) -> bool:
    if isinstance(value, bytes | bytearray | memoryview):
        return secret in bytes(value)
    if isinstance(value, dict):
        return any(_holds(v, secret) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds(v, secret) for v in value)
    return secret.hex() in str(value).lower()


def test_no_function_of_the_database_is_handed_the_chains_keys(
    postgresql_store: SqlMetadataStore,
) -> None:
    """On PostgreSQL the upgrade leaves no qexport_audit_append, nor any function that takes
    bytes; and appending events (on their own, through the writer, in a store's transaction,
    in a prune) sends no statement or parameter holding a key, a padded key or its hex: the
    HMACs are computed in qexport's process. The chains verify and the download totals add
    up."""
    from sqlalchemy import event

    from tests.support.factories import new_export

    engine = postgresql_store.engine
    with engine.connect() as conn:
        functions = conn.execute(
            sa.text(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = current_schema()"
                " AND (p.proname LIKE 'qexport_audit%' OR 'bytea'::regtype = ANY(p.proargtypes))"
            )
        ).all()
    assert functions == []
    log = SqlAuditLog(engine, linger=0.01)
    odd = "100%s'é\\"
    sent: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert log.record(_event(1))
        assert log.record_soon(_event(2, "beta")).result(timeout=30)
        postgresql_store.insert_export(new_export(T0), audit=_event(3))
        cutoff = T0 + timedelta(minutes=2)
        pruned = AuditEvent(
            cutoff, "*", OPERATOR.kind, OPERATOR.id, Action.AUDIT_PRUNED, None, None
        )
        assert log.prune(before=cutoff, event=pruned) == {"acme": 1}
        for n in range(3):  # a name that quoting or placeholders would have to get right
            assert log.record(_event(5 + n, odd))
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert any("INSERT INTO audit_events" in statement for statement, _ in sent)
    for secret in _key_material(log, ["acme", "beta", "*", odd]):
        assert not any(_holds([statement, parameters], secret) for statement, parameters in sent)
    for workspace in ("acme", "beta", odd):
        assert _verify(log, workspace)[1] is None
    assert [e.seq for e in log.chain(odd)] == [1, 2, 3]
    with engine.connect() as conn:
        totals: dict[str, int] = dict(
            conn.execute(
                sa.text("SELECT workspace_id, bytes_sent FROM audit_download_totals")
            ).all()
        )
    assert totals == {"acme": 30, "beta": 20, odd: 50 + 60 + 70}
