"""The ApprovalStore contract on every backend (in memory, SQLite, PostgreSQL): a decision is
taken once, only while the request is pending and unexpired, and an approval's export exists
exactly when the approval does."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest

from qexport.domain.approvals import ApprovalStatus, Decision, NewApproval
from qexport.ports import ApprovalStore
from qexport.store.approvals import SqlApprovalStore
from tests.factories import new_export
from tests.fakes import FrozenClock, InMemoryApprovalStore, InMemoryMetadataStore
from tests.stores import MetadataStore, SqlMetadataStore

TTL = timedelta(days=3)


@dataclass
class Backend:
    approvals: ApprovalStore
    store: MetadataStore


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        store = InMemoryMetadataStore()
        yield Backend(InMemoryApprovalStore(store), store)
        return
    sql = request.getfixturevalue(f"{request.param}_store")
    assert isinstance(sql, SqlMetadataStore)
    yield Backend(SqlApprovalStore(sql.engine), sql)


def _asked(backend: Backend, clock: FrozenClock, workspace: str = "w1") -> str:
    now = clock.now()
    new = NewApproval(
        id=str(uuid.uuid4()),
        workspace_id=workspace,
        requested_by="alice",
        subject_type="query",
        subject_id="q1",
        subject_name="orders",
        format="csv",
        parameters={"since": "2024-01-01"},
        options={"neutralize_formulas": True},
        notify=[{"email": "alice@example.com"}],
        created_at=now,
        expires_at=now + TTL,
        fingerprint="0" * 64,
    )
    assert backend.approvals.add_approval(new).status is ApprovalStatus.PENDING
    return new.id


def test_an_approval_creates_its_export_once(backend: Backend) -> None:
    """The first approval inserts the export and names it; a second decision of either kind
    changes nothing and inserts nothing."""
    clock = FrozenClock()
    approval_id = _asked(backend, clock)
    export = new_export(clock.now())
    decided = backend.approvals.decide_approval(
        approval_id, Decision.APPROVE, by="bob", now=clock.now(), reason="ok", export=(export, [])
    )
    assert decided is not None
    assert (decided.status, decided.export_id, decided.decided_by) == (
        ApprovalStatus.APPROVED,
        export.id,
        "bob",
    )
    assert backend.store.get_export(export.id) is not None
    second = new_export(clock.now())
    again = backend.approvals.decide_approval(
        approval_id, Decision.APPROVE, by="carol", now=clock.now(), reason=None,
        export=(second, []),
    )  # fmt: skip
    assert again is None
    assert backend.store.get_export(second.id) is None  # rolled back with the refused decision
    assert backend.approvals.decide_approval(
        approval_id, Decision.DENY, by="carol", now=clock.now(), reason=None
    ) is None  # fmt: skip
    stored = backend.approvals.get_approval(approval_id)
    assert stored is not None
    assert stored.decided_by == "bob"


def test_an_expired_request_cannot_be_decided_and_is_not_pending(backend: Backend) -> None:
    """Past `expires_at` nothing can be decided and the request is no longer counted or
    listed as pending; a denial before then creates nothing."""
    clock = FrozenClock()
    lapsed, denied, waiting = _asked(backend, clock), _asked(backend, clock), _asked(backend, clock)
    assert backend.approvals.decide_approval(
        denied, Decision.DENY, by="bob", now=clock.now(), reason="no"
    ) is not None  # fmt: skip
    assert backend.approvals.pending_approvals(clock.now()) == {"w1": 2}
    clock.advance(TTL.total_seconds())
    export = new_export(clock.now())
    assert backend.approvals.decide_approval(
        lapsed, Decision.APPROVE, by="bob", now=clock.now(), reason=None, export=(export, [])
    ) is None  # fmt: skip
    assert backend.store.get_export(export.id) is None
    assert backend.approvals.pending_approvals(clock.now()) == {}
    assert backend.approvals.list_approvals("w1", pending_at=clock.now()) == []
    assert {r.id for r in backend.approvals.list_approvals("w1")} == {lapsed, denied, waiting}
    stored = backend.approvals.get_approval(waiting)
    assert stored is not None
    assert stored.effective_status(clock.now()) is ApprovalStatus.EXPIRED


def test_two_admins_approving_at_once_make_one_export(backend: Backend) -> None:
    """Racing approvals: exactly one wins, and exactly one export exists."""
    clock = FrozenClock()
    approval_id = _asked(backend, clock)
    exports = [new_export(clock.now()) for _ in range(4)]
    results: list[object] = []
    start = threading.Barrier(len(exports))

    def approve(index: int) -> None:
        start.wait()
        results.append(
            backend.approvals.decide_approval(
                approval_id,
                Decision.APPROVE,
                by=f"admin{index}",
                now=clock.now(),
                reason=None,
                export=(exports[index], []),
            )
        )

    threads = [threading.Thread(target=approve, args=(i,)) for i in range(len(exports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in results) == 1
    assert sum(backend.store.get_export(e.id) is not None for e in exports) == 1
