"""`qexport audit verify` against someone who can write the metadata database, on the embedded
default (SQLite, a folder) and scaled out (PostgreSQL, S3): each way of rewriting the trail
that passed before keys and checkpoints is named (exit 1, with where), while an untouched
chain, a pruned one and one with events from before keys verify.

Every tampering first drops the triggers that refuse UPDATE and DELETE of events, as an
insider who owns the database would, and none knows QEXPORT_SECRET_KEY."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from qexport.domain.audit import (
    GENESIS,
    Action,
    ActorKind,
    AuditEvent,
    RecordedEvent,
    canonical,
    unkeyed,
)
from qexport.domain.audit_keys import ChainKey
from qexport.store.audit.log import SqlAuditLog
from qexport.store.engine import MIGRATIONS
from qexport.store.tables.audit import audit_anchors, audit_events
from tests.e2e.conftest import Env

pytest_plugins = ["tests.support.s3server"]

NOW = datetime.now(UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def trail(request: pytest.FixtureRequest, env: Env) -> Iterator[Env]:
    """The commands on the embedded default, or on PostgreSQL and S3 with the secret set."""
    if request.param == "postgresql":
        env.extra.update(
            {
                "QEXPORT_DATABASE_URL": request.getfixturevalue("pg_url"),
                "QEXPORT_STORAGE_URL": f"s3://{request.getfixturevalue('s3_bucket')}/q",
                "QEXPORT_S3_ENDPOINT_URL": request.getfixturevalue("moto_endpoint"),
                "QEXPORT_SECRET_KEY": "audit-e2e-secret-" + "k" * 32,
            }
        )
    yield env
    env.store.engine.dispose()


def _record(env: Env, count: int, *, days_ago: float = 0) -> list[RecordedEvent]:
    """`count` downloads recorded in acme's chain (as a server records them); its events."""
    log = SqlAuditLog(env.store.engine)
    start = NOW - timedelta(days=days_ago)
    for n in range(count):
        assert log.record(_download(n, start + timedelta(seconds=n)))
    return list(log.chain("acme"))


def _download(n: int, at: datetime) -> AuditEvent:
    return AuditEvent(at, "acme", ActorKind.USER, "u1", Action.FILE_DOWNLOADED, "export", f"e{n}")


def _verify(env: Env) -> tuple[int, str]:
    done = env.run("audit", "verify", check=False)
    return done.returncode, " ".join(done.stdout.split())  # rich wraps long lines


def _tamper(env: Env) -> sa.Connection:
    """A transaction past the append-only triggers (dropped, as the database's owner can)."""
    conn = env.store.engine.connect()
    conn.begin()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("DROP TRIGGER IF EXISTS audit_events_append_only ON audit_events")
    else:
        conn.exec_driver_sql("DROP TRIGGER IF EXISTS audit_events_no_update")
        conn.exec_driver_sql("DROP TRIGGER IF EXISTS audit_events_no_delete")
    return conn


def _delete(conn: sa.Connection, events: list[RecordedEvent]) -> None:
    conn.execute(audit_events.delete().where(audit_events.c.id.in_([e.id for e in events])))


def _rechain(
    conn: sa.Connection, events: list[RecordedEvent], prev: str, seq: int, key: ChainKey | None
) -> None:
    """Chain `events` again after `prev` from sequence `seq`, in place: with plain SHA-256
    (key None: the chain's old unkeyed hash), or HMAC under a key of the attacker's that
    carries the real key's id."""
    for e in events:
        fields = {
            "at": e.at,
            "workspace_id": e.workspace_id,
            "actor_kind": e.actor_kind,
            "actor_id": e.actor_id,
            "action": e.action,
            "target_kind": e.target_kind,
            "target_id": e.target_id,
            "outcome": e.outcome,
            "client_address": e.client_address,
            "details": e.details,
            "prev_hash": prev,
        }
        if key is None:
            values = {"key_id": None, "hash": hashlib.sha256(canonical(**fields)).hexdigest()}
        else:
            text = canonical(**fields, seq=seq, key_id=e.key_id)
            values = {"key_id": e.key_id, "hash": key.mac(e.workspace_id, text)}
        conn.execute(
            audit_events.update()
            .where(audit_events.c.id == e.id)
            .values(prev_hash=prev, seq=seq, **values)
        )
        prev, seq = values["hash"], seq + 1


def test_an_untouched_chain_verifies_and_a_deleted_tail_is_named_by_its_checkpoint(
    trail: Env,
) -> None:
    """Tampering 1. A chain checkpointed to storage verifies, naming its keyed stretch and
    its checkpoint; its last 5 events deleted, verify exits 1 naming the missing sequences,
    the checkpoint that names them and where it is stored."""
    events = _record(trail, 30)
    assert "wrote 1 checkpoint(s)" in trail.run("audit", "checkpoint").stdout
    code, said = _verify(trail)
    assert code == 0, said
    key_id = events[0].key_id
    assert f"chain 'acme': 30 event(s) verified (sequences 1-30: HMAC-SHA256, key {key_id})" in said
    assert "holding its checkpoint of" in said
    assert "30 event(s) in 1 chain(s) verified" in said

    with _tamper(trail) as conn:
        _delete(conn, events[-5:])
        conn.commit()
    code, said = _verify(trail)
    assert code == 1, said
    assert "chain 'acme': sequences 26-30 are missing: the checkpoint of" in said
    assert re.search(r"at audit/checkpoints/acme/\d{19}-seq30\.json\) names sequence 30", said)
    assert "the database's chain ends at sequence 25" in said


@pytest.mark.parametrize("rehash", ["sha256", "wrong_key"])
def test_events_deleted_in_the_middle_and_the_rest_rehashed_without_the_secret_are_named(
    trail: Env, rehash: str
) -> None:
    """Tamperings 2 and 4. 18 events deleted from the middle and the rest chained again, with
    the chain's plain SHA-256 or with HMAC under a guessed secret, renumbered to hide the gap:
    verify exits 1 naming the first rewritten event and why."""
    events = _record(trail, 40)
    trail.run("audit", "checkpoint")
    kept, gone, rest = events[:10], events[10:28], events[28:]
    guess = ChainKey.derive("a guess at the secret") if rehash == "wrong_key" else None
    with _tamper(trail) as conn:
        _delete(conn, gone)
        _rechain(conn, rest, kept[-1].hash, 11, guess)
        conn.commit()
    code, said = _verify(trail)
    assert code == 1, said
    first = rest[0]
    assert f"chain 'acme': event {first.id} (sequence 11, file.downloaded at" in said
    if rehash == "sha256":
        assert "it is hashed without a key (plain SHA-256) after keyed events" in said
    else:
        assert f"its hash does not match its fields under key {first.key_id}" in said
    assert "10 event(s) before it verified" in said


def test_events_deleted_from_the_start_behind_an_anchor_no_prune_made_are_named(
    trail: Env,
) -> None:
    """Tampering 3. The first 20 events deleted and an anchor row inserted so that the rest
    starts from it, as a prune would leave it: with the anchor's sequence left at its
    default, verify names the 20 missing sequences; with it set to 20, it names the anchor,
    which no signed audit.pruned event of the chain names."""
    events = _record(trail, 30)
    with _tamper(trail) as conn:
        _delete(conn, events[:20])
        conn.execute(
            audit_anchors.insert(),
            {"workspace_id": "acme", "anchor_hash": events[19].hash, "pruned_before": NOW},
        )
        conn.commit()
    code, said = _verify(trail)
    assert code == 1, said
    assert f"event {events[20].id} (sequence 21," in said
    assert "sequences 1-20 are missing before it" in said
    with trail.store.engine.begin() as conn:
        conn.execute(audit_anchors.update().values(anchor_seq=20))
    code, said = _verify(trail)
    assert code == 1, said
    assert (
        "chain 'acme': its anchor (the hash of sequence 20, the last event pruned) is named by"
        " no signed audit.pruned event: events up to sequence 20 were removed outside a prune"
    ) in said


def test_a_pruned_chain_verifies_with_its_checkpoints(trail: Env) -> None:
    """`audit prune` deletes the events past QEXPORT_AUDIT_RETENTION and checkpoints the
    chains it pruned; verify passes from the first kept event, the anchor named by the
    chain's own audit.pruned event, and events recorded afterwards chain on."""
    _record(trail, 4, days_ago=30)
    _record(trail, 2)
    trail.extra["QEXPORT_AUDIT_RETENTION"] = "15"
    pruned = trail.run("audit", "prune").stdout
    assert "deleted 4 event(s) older than 15 days from 1 chain(s)" in pruned
    assert "wrote 2 checkpoint(s) to storage" in pruned
    _record(trail, 1)
    code, said = _verify(trail)
    assert code == 0, said
    assert "chain 'acme': 4 event(s) verified (sequences 5-8: HMAC-SHA256" in said
    assert "chain '*': 1 event(s) verified" in said


def test_events_recorded_before_keys_verify_after_the_upgrade(trail: Env) -> None:
    """A database of the version before keys, with unkeyed events: `db upgrade` numbers
    them, events recorded afterwards are keyed after them, and verify passes naming the
    unkeyed stretch and the keyed one."""
    engine = trail.store.engine
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0019")
    prev = GENESIS
    with engine.begin() as conn:
        for n in range(3):
            row = unkeyed(_download(n, NOW - timedelta(hours=1)), prev, NOW)
            conn.execute(audit_events.insert(), row)
            prev = row["hash"]
    trail.run("db", "upgrade")
    events = _record(trail, 2)
    trail.run("audit", "checkpoint")
    code, said = _verify(trail)
    assert code == 0, said
    assert (
        "chain 'acme': 5 event(s) verified (sequences 1-3: SHA-256, unkeyed (from before"
        f" keys); sequences 4-5: HMAC-SHA256, key {events[-1].key_id})"
    ) in said
