"""A Hypothesis state machine for the export lifecycle (DESIGN section 1).

It drives a MetadataStore and an ObjectStore with requests, claims, heartbeats, releases,
completions, failures, cancels and clock moves, predicts every outcome from a model of the
DESIGN table, and checks the three invariants after every step. Subclasses pick the store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from qexport.domain.exports import ExportRecord, Result, Status
from qexport.domain.failures import FailureCode, ObjectExistsError
from tests.fakes import FrozenClock, InMemoryObjectStore
from tests.support import queue_helpers
from tests.support.factories import new_export
from tests.support.stores import MetadataStore

LEASE = 30.0


@dataclass
class Model:
    """What the DESIGN table says the record must be."""

    key: str
    status: Status = Status.QUEUED
    attempt: int = 0
    token: str | None = None
    lease_expires_at: datetime | None = None
    settled_snapshot: ExportRecord | None = None

    def claimable(self, now: datetime) -> bool:
        if self.status is Status.QUEUED:
            return True
        return (
            self.status is Status.RUNNING
            and self.lease_expires_at is not None
            and self.lease_expires_at < now
        )


@dataclass(frozen=True)
class Holder:
    """A worker's view of an attempt: the export and the token it was given (maybe stale)."""

    export_id: str
    token: str
    rows: int = field(default=0)


class LifecycleMachine(RuleBasedStateMachine):
    exports = Bundle("exports")
    holders = Bundle("holders")

    def make_store(self) -> MetadataStore:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.clock = FrozenClock()
        self.store = self.make_store()
        self.objects = InMemoryObjectStore()
        self.model: dict[str, Model] = {}

    # ------------------------------------------------------------------ rules

    @rule(target=exports)
    def request(self) -> str:
        record = self.store.insert_export(new_export(self.clock.now()))
        export_id, key = record.id, record.storage_key
        self.model[export_id] = Model(key=key)
        return export_id

    @rule(target=holders, export_id=exports)
    def claim(self, export_id: str) -> Holder:
        model = self.model[export_id]
        now = self.clock.now()
        expected = model.claimable(now)
        claimed = queue_helpers.claim(
            self.store, export_id, worker_id="w", now=now, lease_seconds=LEASE
        )
        assert (claimed is not None) == expected, (model, claimed)
        if claimed is None:
            return Holder(export_id, "never-granted")
        assert claimed.lease_token is not None
        assert claimed.attempt == model.attempt + 1
        assert claimed.lease_token != model.token
        model.status, model.attempt, model.token = (
            Status.RUNNING,
            claimed.attempt,
            claimed.lease_token,
        )
        model.lease_expires_at = now + timedelta(seconds=LEASE)
        return Holder(export_id, claimed.lease_token)

    def _holds(self, holder: Holder) -> bool:
        model = self.model[holder.export_id]
        return model.status is Status.RUNNING and model.token == holder.token

    @rule(holder=holders, rows=st.integers(0, 10_000))
    def heartbeat(self, holder: Holder, rows: int) -> None:
        now = self.clock.now()
        expected = self._holds(holder)
        ok = self.store.heartbeat(
            holder.export_id, holder.token, now=now, lease_seconds=LEASE, progress_rows=rows
        )
        assert ok == expected
        if ok:
            self.model[holder.export_id].lease_expires_at = now + timedelta(seconds=LEASE)

    @rule(holder=holders, delay=st.sampled_from([0.0, 5.0, 60.0]))
    def release(self, holder: Holder, delay: float) -> None:
        now = self.clock.now()
        expected = self._holds(holder)
        ok = self.store.release_with_backoff(
            holder.export_id,
            holder.token,
            now=now,
            delay_seconds=delay,
            code=FailureCode.SOURCE_UNAVAILABLE,
            detail="down",
        )
        assert ok == expected
        if ok:
            self.model[holder.export_id].lease_expires_at = now + timedelta(seconds=delay)

    @rule(holder=consumes(holders), payload=st.binary(max_size=64), rows=st.integers(0, 100))
    def complete(self, holder: Holder, payload: bytes, rows: int) -> None:
        """Upload and complete the object (create-if-absent, adopt on loss), then succeed."""
        model = self.model[holder.export_id]
        upload = self.objects.begin_upload(model.key)
        upload.upload_part(1, payload)
        try:
            stored = upload.complete(rows=rows, sha256=hashlib.sha256(payload).hexdigest())
        except ObjectExistsError:
            adopted = self.objects.head(model.key)
            assert adopted is not None
            stored = adopted
        now = self.clock.now()
        expected = self._holds(holder)
        ok = self.store.succeed(
            holder.export_id,
            holder.token,
            now=now,
            result=Result(stored.size_bytes, stored.rows, stored.sha256),
            expires_at=now + timedelta(days=1),
        )
        assert ok == expected
        if ok:
            self._settle(holder.export_id, Status.SUCCEEDED)

    @rule(holder=consumes(holders), code=st.sampled_from(list(FailureCode)))
    def fail(self, holder: Holder, code: FailureCode) -> None:
        expected = self._holds(holder)
        ok = self.store.fail(
            holder.export_id, holder.token, now=self.clock.now(), code=code, detail="boom"
        )
        assert ok == expected
        if ok:
            self._settle(holder.export_id, Status.FAILED)

    @rule(export_id=exports)
    def fail_before_run(self, export_id: str) -> None:
        expected = self.model[export_id].status is Status.QUEUED
        ok = queue_helpers.fail_before_run(
            self.store, export_id, now=self.clock.now(), code=FailureCode.ACCESS_LOST, detail="gone"
        )
        assert ok == expected
        if ok:
            self._settle(export_id, Status.FAILED)

    @rule(export_id=exports)
    def cancel(self, export_id: str) -> None:
        expected = self.model[export_id].status in (Status.QUEUED, Status.RUNNING)
        ok = self.store.cancel(export_id, now=self.clock.now())
        assert ok == expected
        if ok:
            self._settle(export_id, Status.FAILED)

    @rule(seconds=st.sampled_from([1.0, 10.0, 29.0, 31.0, 120.0, 86_400.0 * 2]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def _settle(self, export_id: str, status: Status) -> None:
        model = self.model[export_id]
        model.status = status
        model.settled_snapshot = self.store.get_export(export_id)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def records_match_the_model_and_the_invariants_hold(self) -> None:
        keys_with_objects = set(self.objects.objects)
        for export_id, model in self.model.items():
            record = self.store.get_export(export_id)
            assert record is not None
            assert record.status is model.status
            assert record.attempt == model.attempt
            # Invariant 3: the key chosen at request time is the only key ever used.
            assert record.storage_key == model.key
            # Invariant 1: a settled record never changes again.
            if model.settled_snapshot is not None:
                assert record == model.settled_snapshot
            # Invariant 2: a succeeded record describes the object stored at its key.
            if record.status is Status.SUCCEEDED:
                stored = self.objects.head(record.storage_key)
                assert stored is not None
                assert (record.size_bytes, record.row_count, record.sha256) == (
                    stored.size_bytes,
                    stored.rows,
                    stored.sha256,
                )
                assert record.completed_at is not None
                assert record.expires_at is not None
        # Invariant 3: objects exist only at the exports' own keys, at most one per key.
        assert keys_with_objects <= {m.key for m in self.model.values()}
