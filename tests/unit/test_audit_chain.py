"""The audit chain in memory: the keyed hash covers every field, the link to the event before
and its place, so any edit, removal, reordering or rehash without the secret is named by the
walk; events from before keys still verify; details are bounded."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from qexport.domain.audit import (
    GENESIS,
    START,
    Action,
    ActorKind,
    Anchor,
    AuditEvent,
    AuditFilter,
    RecordedEvent,
    Stretch,
    chained,
    changes,
    details_text,
    unkeyed,
    verify_chain,
)
from qexport.domain.audit_keys import AuditKeys, ChainKey
from tests.fakes import InMemoryAuditLog
from tests.fakes.audit import TEST_AUDIT_KEYS

KEYS = TEST_AUDIT_KEYS

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _event(n: int) -> AuditEvent:
    return AuditEvent(
        at=T0 + timedelta(seconds=n),
        workspace_id="acme",
        actor_kind=ActorKind.TOKEN,
        actor_id="u1",
        action=Action.EXPORT_REQUESTED,
        target_kind="export",
        target_id=f"e{n}",
        details={"format": "csv", "n": n},
    )


def _record(log: InMemoryAuditLog, n: int) -> None:
    log.record(_event(n))


def _walk(events: list[RecordedEvent], anchor: Anchor = START, keys: AuditKeys = KEYS) -> str:
    """`ok`, or the broken event's target and the reason."""
    check = verify_chain("acme", anchor, events, keys)
    if check.broken is None:
        return check.problem or "ok"
    return f"{check.broken.target_id}: {check.reason}"


def _rehashed(
    events: list[RecordedEvent], prev: str, seq: int, key: ChainKey | None
) -> list[RecordedEvent]:
    """`events` chained again after `prev` from sequence `seq`: with `key`, or with plain
    SHA-256 (no key), as someone who can write the database could."""
    done = []
    for e in events:
        event = AuditEvent(
            e.at,
            e.workspace_id,
            ActorKind(e.actor_kind),
            e.actor_id,
            Action(e.action),
            e.target_kind,
            e.target_id,
            details={"format": "csv"},
        )
        row = (
            chained(event, prev, seq, T0, key) if key else {**unkeyed(event, prev, T0), "seq": seq}
        )
        done.append(RecordedEvent(id=e.id, **row))
        prev, seq = row["hash"], seq + 1
    return done


def test_every_field_is_covered_by_the_hash() -> None:
    """Changing any one field of a recorded event (its time, actor, outcome, details...)
    makes the walk stop at that event."""
    log = InMemoryAuditLog()
    for n in range(3):
        _record(log, n)
    events = list(log.chain("acme"))
    assert verify_chain("acme", Anchor(), events, KEYS).verified == 3
    assert [e.seq for e in events] == [1, 2, 3]
    for change in (
        {"at": T0},
        {"actor_id": "u2"},
        {"outcome": "refused"},
        {"details": '{"format":"xlsx","n":1}'},
        {"client_address": "10.0.0.1"},
        {"key_id": KEYS.current.key_id[::-1]},
    ):
        forged = [events[0], replace(events[1], **change), events[2]]
        check = verify_chain("acme", Anchor(), forged, KEYS)
        assert (check.verified, check.broken) == (1, forged[1]), change


def test_a_removed_or_reordered_event_breaks_the_chain_after_it() -> None:
    """The walk names the event after a gap with the sequences missing before it, and an
    event out of its place."""
    log = InMemoryAuditLog()
    for n in range(4):
        _record(log, n)
    events = list(log.chain("acme"))
    assert _walk([events[0], events[3]]) == "e3: sequences 2-3 are missing before it"
    assert _walk([events[1], events[0]]).startswith("e1: sequence 1 is missing")
    # Made to start after them, with no prune to say so.
    assert "named by no signed audit.pruned" in _walk(events[2:], Anchor(events[1].hash, 2))


def test_the_fake_prunes_like_the_store_and_lists_newest_first() -> None:
    """A prune leaves each chain verifiable from its anchor, which the chain's own signed
    audit.pruned event names."""
    log = InMemoryAuditLog()
    for n in range(4):
        _record(log, n)
    prune = AuditEvent(None, "*", ActorKind.OPERATOR, "cli", Action.AUDIT_PRUNED, None, None)
    assert log.prune(before=T0 + timedelta(seconds=2), event=prune) == {"acme": 2}
    kept = list(log.chain("acme"))
    assert [e.target_id for e in kept] == ["e2", "e3", None]
    assert kept[-1].action == "audit.pruned"
    assert log.anchor("acme").seq == 2
    assert _walk(kept, log.anchor("acme")) == "ok"
    found = log.list_events(workspace_id="acme", narrow=AuditFilter(action="export."))
    assert [e.target_id for e in found] == ["e3", "e2"]


def test_changes_name_the_fields_and_keep_a_statement_before_and_after() -> None:
    found = changes({"sql": "SELECT 1", "name": "a"}, {"sql": "SELECT 2", "name": "a"})
    assert found["changed"] == ["sql"]
    assert (found["sql_before"], found["sql_after"]) == ("SELECT 1", "SELECT 2")
    assert "sql_before" not in changes({"sql": "x", "name": "a"}, {"sql": "x", "name": "b"})
    assert details_text({"b": 1, "a": [2]}) == '{"a":[2],"b":1}'
    assert details_text({"huge": "x" * 20_000}) == '{"truncated":true}'


_TEXT = st.text(max_size=40)


def _chain(n: int, log: InMemoryAuditLog | None = None) -> list[RecordedEvent]:
    log = log or InMemoryAuditLog()
    for i in range(n):
        _record(log, i)
    return list(log.chain("acme"))


def test_a_chain_rehashed_without_the_secret_is_named_where_the_rewrite_starts() -> None:
    """Events removed from the middle and the rest chained again with plain SHA-256 (the
    chain's old, unkeyed hash) or with HMAC under a guessed secret, as someone who can write
    the database but does not hold the secret could: the walk stops at the first one."""
    events = _chain(10)
    kept, rest = events[:3], events[6:]
    unkeyed_rest = _rehashed(rest, kept[-1].hash, 4, None)
    assert _walk(kept + unkeyed_rest) == (
        "e6: it is hashed without a key (plain SHA-256) after keyed events: the chain was"
        " rewritten from here by someone without the secret"
    )
    guessed = ChainKey.derive("a guess")
    rekeyed = [
        replace(e, key_id=KEYS.current.key_id)  # the label of the real key, the MAC of a guess
        for e in _rehashed(rest, kept[-1].hash, 4, guessed)
    ]
    reason = _walk(kept + rekeyed)
    assert reason == f"e6: its hash does not match its fields under key {KEYS.current.key_id}"
    assert _walk(kept + _rehashed(rest, kept[-1].hash, 4, guessed)).startswith(
        f"e6: it is keyed with key {guessed.key_id}, which is neither QEXPORT_SECRET_KEY's"
    )
    # Left in place, the rest still names the gap before it.
    assert _walk(kept + rest) == "e6: sequences 4-6 are missing before it"


def test_events_keyed_with_a_former_secret_verify_once_it_is_given_as_previous() -> None:
    """After a rotation the chain holds two stretches; with only the new secret the first
    event of the old one cannot be checked (and says how to fix it); with the old secret in
    QEXPORT_SECRET_KEY_PREVIOUS every event verifies, each stretch named by its key."""
    old, new = AuditKeys.from_secrets("old secret"), AuditKeys.from_secrets("new secret")
    log = InMemoryAuditLog(old)
    for n in range(3):
        _record(log, n)
    log.keys = new
    for n in range(3, 5):
        _record(log, n)
    events = list(log.chain("acme"))
    assert "QEXPORT_SECRET_KEY_PREVIOUS" in _walk(events, keys=new)
    both = AuditKeys.from_secrets("new secret", ["old secret"])
    check = verify_chain("acme", Anchor(), events, both)
    assert check.broken is None
    assert check.stretches == (
        Stretch(old.current.key_id, 1, 3),
        Stretch(new.current.key_id, 4, 5),
    )


def test_unkeyed_events_from_before_keys_verify_and_may_not_follow_keyed_ones() -> None:
    """Events hashed with plain SHA-256 before keys, numbered by the upgrade, verify as a
    stretch of their own before the keyed one; the first keyed event pins their last hash
    and count, and an unkeyed event after a keyed one is refused."""
    prev, old = GENESIS, []
    for n in range(3):
        row = unkeyed(_event(n), prev, T0)
        old.append(RecordedEvent(id=n + 1, **row, seq=n + 1))
        prev = row["hash"]
    keyed = [
        RecordedEvent(id=n + 4, **chained(_event(n + 3), prev_hash, n + 4, T0, KEYS.current))
        for n, prev_hash in ((0, prev),)
    ]
    keyed.append(
        RecordedEvent(id=5, **chained(_event(4), keyed[0].hash, 5, T0, KEYS.current)),
    )
    check = verify_chain("acme", Anchor(), old + keyed, KEYS)
    assert (check.broken, check.verified) == (None, 5)
    assert check.stretches == (Stretch(None, 1, 3), Stretch(KEYS.current.key_id, 4, 5))
    # The first one deleted, the chain made to start after it, the rest renumbered.
    shortened = [replace(e, seq=e.seq - 1) for e in old[1:]]
    assert _walk(shortened + keyed, Anchor(old[0].hash)) == "e3: sequence 3 is missing before it"
    late = RecordedEvent(id=6, **unkeyed(_event(5), keyed[-1].hash, T0), seq=6)
    assert "without a key" in _walk(old + keyed + [late])


def test_an_anchor_holds_only_when_the_chains_signed_prune_event_names_it() -> None:
    """A legitimate prune's anchor verifies; an anchor written by hand after deleting the
    first events is named (at sequence 0 by the gap it leaves, above 0 for want of a signed
    audit.pruned event); an anchor moved past the one the prune named is named too."""
    log = InMemoryAuditLog()
    events = _chain(30, log)
    assert _walk(events[20:], Anchor(events[19].hash, 20)).startswith(
        "its anchor (the hash of sequence 20, the last event pruned) is named by no signed"
        " audit.pruned event"
    )
    assert _walk(events[20:], Anchor(events[19].hash, 0)) == (
        "e20: sequences 1-20 are missing before it"
    )
    prune = AuditEvent(None, "*", ActorKind.OPERATOR, "cli", Action.AUDIT_PRUNED, None, None)
    log.prune(before=T0 + timedelta(seconds=10), event=prune)
    kept, anchor = list(log.chain("acme")), log.anchor("acme")
    assert (anchor.seq, _walk(kept, anchor)) == (10, "ok")
    moved = Anchor(kept[4].hash, kept[4].seq, anchor.pruned_before)
    assert "is not the one the last audit.pruned event" in _walk(kept[5:], moved)
