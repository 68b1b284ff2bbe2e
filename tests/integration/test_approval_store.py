"""The ApprovalStore contract on every backend (in memory, SQLite, PostgreSQL): a decision is
taken once, only while the request is pending and unexpired, and an approval's export exists
exactly when the approval does."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa

from qexport.domain.approvals import ApprovalStatus, Decision, NewApproval
from qexport.domain.audit import Action, ActorKind, AuditEvent
from qexport.domain.failures import TooManyRequestsError
from qexport.ports import ApprovalStore
from qexport.store.approvals import SqlApprovalStore
from qexport.store.engine import create_engine
from tests.fakes import FrozenClock, InMemoryApprovalStore, InMemoryMetadataStore
from tests.support.factories import new_export
from tests.support.stores import MetadataStore, SqlMetadataStore, keyed

TTL = timedelta(days=3)


@dataclass
class Backend:
    approvals: ApprovalStore
    store: MetadataStore
    # Another store over a connection of its own (on SQL a new engine on the same database),
    # as a second server process would have; the in-memory store is shared.
    connect: Callable[[], ApprovalStore]


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def approvals_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        store = InMemoryMetadataStore()
        shared = InMemoryApprovalStore(store)
        yield Backend(shared, store, lambda: shared)
        return
    sql = request.getfixturevalue(f"{request.param}_store")
    assert isinstance(sql, SqlMetadataStore)
    url = sql.engine.url.render_as_string(hide_password=False)
    engines: list[sa.Engine] = []

    def connect() -> ApprovalStore:
        engines.append(engine := keyed(create_engine(url)))
        return SqlApprovalStore(engine)

    yield Backend(SqlApprovalStore(sql.engine), sql, connect)
    for engine in engines:
        engine.dispose()


def _new(clock: FrozenClock, workspace: str = "w1", requested_by: str = "alice") -> NewApproval:
    now = clock.now()
    return NewApproval(
        id=str(uuid.uuid4()),
        workspace_id=workspace,
        requested_by=requested_by,
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


def _asked(backend: Backend, clock: FrozenClock, workspace: str = "w1") -> str:
    new = _new(clock, workspace)
    assert backend.approvals.add_approval(new).status is ApprovalStatus.PENDING
    return new.id


def test_an_approval_creates_its_export_once(approvals_backend: Backend) -> None:
    """The first approval inserts the export and names it; a second decision of either kind
    changes nothing and inserts nothing."""
    clock = FrozenClock()
    approval_id = _asked(approvals_backend, clock)
    export = new_export(clock.now())
    decided = approvals_backend.approvals.decide_approval(
        approval_id, Decision.APPROVE, by="bob", now=clock.now(), reason="ok", export=(export, [])
    )
    assert decided is not None
    assert (decided.status, decided.export_id, decided.decided_by) == (
        ApprovalStatus.APPROVED,
        export.id,
        "bob",
    )
    assert approvals_backend.store.get_export(export.id) is not None
    second = new_export(clock.now())
    again = approvals_backend.approvals.decide_approval(
        approval_id, Decision.APPROVE, by="carol", now=clock.now(), reason=None,
        export=(second, []),
    )  # fmt: skip
    assert again is None
    assert (
        approvals_backend.store.get_export(second.id) is None
    )  # rolled back with the refused decision
    assert approvals_backend.approvals.decide_approval(
        approval_id, Decision.DENY, by="carol", now=clock.now(), reason=None
    ) is None  # fmt: skip
    stored = approvals_backend.approvals.get_approval(approval_id)
    assert stored is not None
    assert stored.decided_by == "bob"


def test_an_expired_request_cannot_be_decided_and_is_not_pending(
    approvals_backend: Backend,
) -> None:
    """Past `expires_at` nothing can be decided and the request is no longer counted or
    listed as pending; a denial before then creates nothing."""
    clock = FrozenClock()
    lapsed, denied, waiting = (
        _asked(approvals_backend, clock),
        _asked(approvals_backend, clock),
        _asked(approvals_backend, clock),
    )
    assert approvals_backend.approvals.decide_approval(
        denied, Decision.DENY, by="bob", now=clock.now(), reason="no"
    ) is not None  # fmt: skip
    assert approvals_backend.approvals.pending_approvals(clock.now()) == {"w1": 2}
    clock.advance(TTL.total_seconds())
    export = new_export(clock.now())
    assert approvals_backend.approvals.decide_approval(
        lapsed, Decision.APPROVE, by="bob", now=clock.now(), reason=None, export=(export, [])
    ) is None  # fmt: skip
    assert approvals_backend.store.get_export(export.id) is None
    assert approvals_backend.approvals.pending_approvals(clock.now()) == {}
    assert approvals_backend.approvals.list_approvals("w1", pending_at=clock.now()) == []
    assert {r.id for r in approvals_backend.approvals.list_approvals("w1")} == {
        lapsed,
        denied,
        waiting,
    }
    stored = approvals_backend.approvals.get_approval(waiting)
    assert stored is not None
    assert stored.effective_status(clock.now()) is ApprovalStatus.EXPIRED


def test_two_admins_approving_at_once_make_one_export(approvals_backend: Backend) -> None:
    """Racing approvals: exactly one wins, and exactly one export exists."""
    clock = FrozenClock()
    approval_id = _asked(approvals_backend, clock)
    exports = [new_export(clock.now()) for _ in range(4)]
    results: list[object] = []
    start = threading.Barrier(len(exports))

    def approve(index: int) -> None:
        start.wait()
        results.append(
            approvals_backend.approvals.decide_approval(
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
    assert sum(approvals_backend.store.get_export(e.id) is not None for e in exports) == 1


def test_the_waiting_cap_refuses_the_request_past_it(approvals_backend: Backend) -> None:
    """At the cap a request is refused (429, saying how many wait) and nothing is recorded;
    another requester or workspace is not held back, and a decided or expired request makes
    room again."""
    clock = FrozenClock()
    first = approvals_backend.approvals.add_approval(_new(clock), max_waiting=2)
    approvals_backend.approvals.add_approval(_new(clock), max_waiting=2)
    refused = _new(clock)
    with pytest.raises(TooManyRequestsError, match="you have 2 export requests waiting") as err:
        approvals_backend.approvals.add_approval(refused, max_waiting=2)
    assert err.value.retry_after > 0
    assert approvals_backend.approvals.get_approval(refused.id) is None
    approvals_backend.approvals.add_approval(_new(clock, requested_by="bob"), max_waiting=2)
    approvals_backend.approvals.add_approval(_new(clock, workspace="w2"), max_waiting=2)
    assert approvals_backend.approvals.decide_approval(
        first.id, Decision.DENY, by="alice", now=clock.now(), reason=None
    ) is not None  # fmt: skip
    approvals_backend.approvals.add_approval(_new(clock), max_waiting=2)
    with pytest.raises(TooManyRequestsError):
        approvals_backend.approvals.add_approval(_new(clock), max_waiting=2)
    clock.advance(TTL.total_seconds())  # the two waiting lapse
    approvals_backend.approvals.add_approval(_new(clock), max_waiting=2)


def test_forty_requests_at_once_are_accepted_up_to_the_cap_exactly(
    approvals_backend: Backend,
) -> None:
    """40 requests of one requester sent at once, each over a connection of its own (half
    with their audit event in the transaction, as the service writes it, half without), with
    a cap of 5: exactly 5 are recorded and 35 refused. Counted by a read before the
    insert, as it was, 33 to 38 got through on PostgreSQL and all 40 on SQLite."""
    clock, cap, senders = FrozenClock(), 5, 40
    stores = [approvals_backend.connect() for _ in range(senders)]
    for store in stores:  # connected before the start, so that they start together
        store.list_approvals("w1", limit=1)
    start = threading.Barrier(senders)
    outcomes: list[str] = []

    def ask(index: int) -> None:
        new = _new(clock)
        event = AuditEvent(
            None, "w1", ActorKind.USER, "alice", Action.APPROVAL_REQUESTED, "approval", new.id
        )
        start.wait(timeout=60)
        try:
            stores[index].add_approval(
                new, audit=event if index % 2 == 0 else None, max_waiting=cap
            )
            outcomes.append("recorded")
        except TooManyRequestsError:
            outcomes.append("refused")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert (outcomes.count("recorded"), outcomes.count("refused")) == (cap, senders - cap)
    waiting = approvals_backend.approvals.list_approvals("w1", pending_at=clock.now(), limit=100)
    assert len(waiting) == cap
