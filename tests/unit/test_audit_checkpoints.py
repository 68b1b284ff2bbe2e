"""Checkpoints of the audit chains, in memory: signed heads kept in the object store that
name what a chain must still hold, written at most every QEXPORT_AUDIT_CHECKPOINT_EVERY and
never over a chain that lost what the last one named."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from qexport.domain.audit import GENESIS, Action, ActorKind, AuditEvent, RecordedEvent, unkeyed
from qexport.domain.audit_checkpoints import (
    ChainHead,
    Checkpoint,
    chain_of_folder,
    checkpoint_of,
    folder,
    object_key,
    signature_problem,
)
from qexport.domain.audit_keys import AuditKeys
from qexport.services.audit_checkpoints import Checkpointer, newest
from qexport.services.audit_trail import verify
from tests.fakes import FrozenClock, InMemoryAuditLog, InMemoryObjectStore
from tests.fakes.audit import TEST_AUDIT_KEYS

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
EVERY = timedelta(minutes=10)
HEAD = ChainHead("acme", 120, 4321, "ab" * 32, T0, "0" * 64, 0)


def _record(log: InMemoryAuditLog, n: int, workspace: str = "acme") -> None:
    log.record(
        AuditEvent(T0, workspace, ActorKind.USER, "u1", Action.FILE_DOWNLOADED, "export", f"e{n}")
    )


def test_a_checkpoint_is_believed_only_with_the_signature_of_a_secret_given() -> None:
    """A checkpoint reads back as written and its signature holds; any field changed, or a
    secret not given, and it is refused saying why; what is not a checkpoint is refused."""
    key = TEST_AUDIT_KEYS.current
    checkpoint = checkpoint_of(HEAD, T0, key)
    assert Checkpoint.read(checkpoint.document()) == checkpoint
    assert signature_problem(checkpoint, TEST_AUDIT_KEYS) is None
    moved = replace(checkpoint, seq=119)
    assert "signature does not match" in (signature_problem(moved, TEST_AUDIT_KEYS) or "")
    other = AuditKeys.from_secrets("another installation's secret")
    assert "QEXPORT_SECRET_KEY_PREVIOUS" in (signature_problem(checkpoint, other) or "")
    for junk in (b"{}", b'{"version": 1, "seq": 1}', b"[1]"):
        with pytest.raises(ValueError, match="not a checkpoint"):
            Checkpoint.read(junk)
    with pytest.raises(ValueError, match="not a number"):
        Checkpoint.read(checkpoint.document().replace(b'"seq": 120', b'"seq": "120"'))


def test_checkpoint_names_sort_newest_first() -> None:
    """A listing's first name is the highest sequence, so one request finds the newest."""
    keys = [object_key("acme", seq) for seq in (9, 10, 1_000_000, 11)]
    assert sorted(keys)[0] == "audit/checkpoints/acme/9999999999998999999-seq1000000.json"
    assert [int(k.rsplit("seq", 1)[1].removesuffix(".json")) for k in sorted(keys)] == [
        1_000_000,
        11,
        10,
        9,
    ]
    assert object_key("*", 1).startswith("audit/checkpoints/%2A/")
    # A workspace id written into the database by hand still names a folder of its own.
    for odd in ("..", ".", "a/b", "", "é", "%2A"):
        assert chain_of_folder(folder(odd).removeprefix("audit/checkpoints/")) == odd
        assert "/." not in folder(odd)
        assert folder(odd).count("/") == 3


def test_a_moved_chain_is_checkpointed_at_most_once_per_period() -> None:
    """The first pass checkpoints every chain; a chain that moves again within the period
    waits for it to end; one that did not move gets none; the log has each checkpoint."""
    log, objects, clock = InMemoryAuditLog(), InMemoryObjectStore(), FrozenClock(T0)
    _record(log, 1)
    _record(log, 2, "beta")
    checkpointer = Checkpointer(log, objects, clock, EVERY)
    with structlog.testing.capture_logs() as logs:
        first = checkpointer.run_once()
    assert [(c.workspace_id, c.seq) for c in first.written] == [("acme", 1), ("beta", 1)]
    assert [e["seq"] for e in logs if e["event"] == "audit_checkpoint_written"] == [1, 1]
    _record(log, 3)
    clock.advance(60)
    assert checkpointer.run_once().written == []
    clock.advance(EVERY.total_seconds())
    assert [(c.workspace_id, c.seq) for c in checkpointer.run_once().written] == [("acme", 2)]
    found = newest(objects, "acme")
    assert found is not None
    assert found.checkpoint is not None
    assert (found.checkpoint.seq, found.key) == (2, object_key("acme", 2))
    assert checkpointer.run_once(force=True).written == []  # nothing moved since


def test_a_pass_cut_short_begins_no_further_chain_and_the_next_writes_them() -> None:
    """A worker's shutdown past its grace cuts its pass short: the chain being written is
    finished, no other begun; the next pass (this process's or another's) writes those."""
    log, objects, clock = InMemoryAuditLog(), InMemoryObjectStore(), FrozenClock(T0)
    _record(log, 1)
    _record(log, 2, "beta")
    checkpointer = Checkpointer(log, objects, clock, EVERY)
    cut = threading.Event()
    real_put = objects.put_new

    def put_then_cut(key: str, data: bytes) -> bool:
        if key.startswith(folder("acme")):
            cut.set()  # the shutdown's interrupt arrives while the first chain is written
        return real_put(key, data)

    objects.put_new = put_then_cut  # type: ignore[method-assign]
    cut_pass = checkpointer.run_once(cut_short=cut)
    assert [c.workspace_id for c in cut_pass.written] == ["acme"]
    assert newest(objects, "beta") is None
    objects.put_new = real_put  # type: ignore[method-assign]
    assert [c.workspace_id for c in checkpointer.run_once().written] == ["beta"]


def test_no_checkpoint_is_written_over_a_tail_deleted_after_the_last_one() -> None:
    """Events deleted just after a checkpoint, and new ones written in their place: the next
    pass refuses to checkpoint the chain (logged), and verify names the missing sequences'
    replacement by the newest checkpoint."""
    log, objects, clock = InMemoryAuditLog(), InMemoryObjectStore(), FrozenClock(T0)
    for n in range(5):
        _record(log, n)
    checkpointer = Checkpointer(log, objects, clock, EVERY)
    assert [c.seq for c in checkpointer.run_once().written] == [5]
    log._events = log._events[:3]  # the tail deleted behind the store's back
    for n in range(5, 8):
        _record(log, n)
    clock.advance(EVERY.total_seconds())
    with structlog.testing.capture_logs() as logs:
        assert checkpointer.run_once().written == []
    (tampered,) = [e for e in logs if e["event"] == "audit_chain_tampered"]
    assert "another event at the checkpoint's sequence 5" in tampered["reason"]
    (report,) = verify(log, objects, checkpoint_every=EVERY)
    assert report.finding is not None
    assert report.finding.startswith("the event at sequence 5 (id 7) is not the one")


def test_verify_names_a_truncated_tail_and_a_chain_gone_from_the_database() -> None:
    """The last events deleted: verify names the missing sequences and the checkpoint that
    says so; a chain whose every event and anchor were deleted is found by its checkpoints."""
    log, objects, clock = InMemoryAuditLog(), InMemoryObjectStore(), FrozenClock(T0)
    for n in range(8):
        _record(log, n)
    _record(log, 1, "beta")
    Checkpointer(log, objects, clock, EVERY).run_once()
    assert all(r.ok for r in verify(log, objects, checkpoint_every=EVERY))
    log._events = [e for e in log._events if e.workspace_id == "acme"][:3]
    acme, beta = verify(log, objects, checkpoint_every=EVERY)
    assert acme.finding is not None
    assert acme.finding.startswith("sequences 4-8 are missing: the checkpoint of")
    assert "the database's chain ends at sequence 3" in acme.finding
    assert beta.check.workspace_id == "beta"
    assert beta.finding is not None
    assert beta.finding.startswith("sequence 1 is missing")


def _unkeyed_chain(log: InMemoryAuditLog, workspace: str, count: int) -> None:
    """`count` events of `workspace` hashed as before keys, put in the trail as they are."""
    prev = GENESIS
    for n in range(count):
        event = AuditEvent(T0, workspace, ActorKind.USER, "u1", Action.SIGN_IN, None, None)
        row = unkeyed(event, prev, T0)
        log._events.append(RecordedEvent(id=1000 + len(log._events), **row, seq=n + 1))
        prev = row["hash"]


def test_a_chain_of_unkeyed_events_made_up_after_keys_began_is_named() -> None:
    """The first checkpoint pass lists, signed, the chains that hold events from before
    keys; one that appears later made only of such events (anyone can compute them) is named
    by verify, while the listed one verifies."""
    log, objects, clock = InMemoryAuditLog(), InMemoryObjectStore(), FrozenClock(T0)
    _unkeyed_chain(log, "old", 3)
    _record(log, 1)
    Checkpointer(log, objects, clock, EVERY).run_once()
    _unkeyed_chain(log, "framed", 2)
    reports = {r.check.workspace_id: r for r in verify(log, objects, checkpoint_every=EVERY)}
    assert reports["old"].ok
    assert reports["acme"].ok
    assert reports["framed"].finding == (
        "its events at sequences 1-2 are hashed without a key, but it held no such events when"
        " keys began (audit/unkeyed-chains.json of 2026-06-01T09:00:00+00:00): they were made"
        " up since"
    )
