"""The audit chain in memory: the hash covers every field and the link to the event
before, so any edit, removal or reordering is named by the walk; details are bounded."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from qexport.domain.audit import (
    GENESIS,
    Action,
    ActorKind,
    AuditEvent,
    AuditFilter,
    around_prev,
    chained,
    changes,
    details_text,
    unchained,
    verify_chain,
)
from tests.fakes import InMemoryAuditLog

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _record(log: InMemoryAuditLog, n: int) -> None:
    log.record(
        AuditEvent(
            at=T0 + timedelta(seconds=n),
            workspace_id="acme",
            actor_kind=ActorKind.TOKEN,
            actor_id="u1",
            action=Action.EXPORT_REQUESTED,
            target_kind="export",
            target_id=f"e{n}",
            details={"format": "csv", "n": n},
        )
    )


def test_every_field_is_covered_by_the_hash() -> None:
    """Changing any one field of a recorded event (its time, actor, outcome, details...)
    makes the walk stop at that event."""
    log = InMemoryAuditLog()
    for n in range(3):
        _record(log, n)
    events = list(log.chain("acme"))
    assert verify_chain("acme", GENESIS, events).verified == 3
    for change in (
        {"at": T0},
        {"actor_id": "u2"},
        {"outcome": "refused"},
        {"details": '{"format":"xlsx","n":1}'},
        {"client_address": "10.0.0.1"},
    ):
        forged = [events[0], replace(events[1], **change), events[2]]
        check = verify_chain("acme", GENESIS, forged)
        assert (check.verified, check.broken) == (1, forged[1]), change


def test_a_removed_or_reordered_event_breaks_the_chain_after_it() -> None:
    log = InMemoryAuditLog()
    for n in range(4):
        _record(log, n)
    events = list(log.chain("acme"))
    assert verify_chain("acme", GENESIS, [events[0], events[2], events[3]]).broken == events[2]
    assert verify_chain("acme", GENESIS, [events[1], events[0]]).broken == events[1]
    assert verify_chain("acme", events[1].hash, events[2:]).broken is None  # from an anchor


def test_the_fake_prunes_like_the_store_and_lists_newest_first() -> None:
    log = InMemoryAuditLog()
    for n in range(4):
        _record(log, n)
    prune = AuditEvent(None, "*", ActorKind.OPERATOR, "cli", Action.AUDIT_PRUNED, None, None)
    assert log.prune(before=T0 + timedelta(seconds=2), event=prune) == {"acme": 2}
    kept = list(log.chain("acme"))
    assert [e.target_id for e in kept] == ["e2", "e3"]
    assert verify_chain("acme", log.anchor("acme"), kept).broken is None
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


@given(
    actor=st.one_of(st.none(), _TEXT),
    target=st.one_of(st.none(), _TEXT),
    address=st.one_of(st.none(), _TEXT),
    details=st.dictionaries(_TEXT, st.one_of(_TEXT, st.integers()), max_size=4),
    prev=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
def test_the_text_around_prev_hash_hashes_as_the_chain_does(
    actor: str | None,
    target: str | None,
    address: str | None,
    details: dict[str, object],
    prev: str,
) -> None:
    """Whatever the values hold (quotes, backslashes, `"prev_hash":"`, any Unicode), the
    canonical text before and after prev_hash, with any hash between, is the event's
    canonical form: its SHA-256 is the hash chaining after that hash gives."""
    event = AuditEvent(
        at=T0,
        workspace_id="acme",
        actor_kind=ActorKind.USER,
        actor_id=actor,
        action=Action.FILE_DOWNLOADED,
        target_kind="export",
        target_id=target,
        client_address=address,
        details={**details, "trap": f'"prev_hash":"{prev}"'},
    )
    before, after = around_prev(unchained(event, T0))
    text = (before + prev + after).encode("ascii")
    assert hashlib.sha256(text).hexdigest() == chained(event, prev, T0)["hash"]
