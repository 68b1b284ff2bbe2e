"""The exports list and the progress write on every backend (in memory, SQLite, PostgreSQL):
filters, pages both ways, id prefixes, and `record_progress`."""

from __future__ import annotations

from dataclasses import replace

from qexport.domain.exports import ExportFilter, ExportRecord, Requester
from qexport.domain.failures import FailureCode
from qexport.services.exports import ExportListing, list_export_page
from tests.fakes import FrozenClock
from tests.support import queue_helpers
from tests.support.factories import new_export
from tests.support.stores import MetadataStore

LEASE = 30.0


def _request(store: MetadataStore, clock: FrozenClock, **changes: object) -> ExportRecord:
    new = replace(new_export(clock.now()), **changes)  # type: ignore[arg-type]
    clock.advance(1)
    return store.insert_export(new)


def test_progress_is_written_under_the_lease_without_touching_it(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """`record_progress` with the current token sets the rows written, leaves the lease's
    expiry as it was and writes no event; a stale token changes nothing and says so."""
    record = _request(store, clock)
    claimed = queue_helpers.claim(
        store, record.id, worker_id="w", now=clock.now(), lease_seconds=LEASE
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    events = len(store.list_events(record.id))
    assert store.record_progress(record.id, claimed.lease_token, rows=1234)
    after = store.get_export(record.id)
    assert after is not None
    assert after.progress_rows == 1234
    assert after.lease_expires_at == claimed.lease_expires_at
    assert len(store.list_events(record.id)) == events
    assert not store.record_progress(record.id, "not-the-token", rows=99)
    again = store.get_export(record.id)
    assert again is not None
    assert again.progress_rows == 1234


def test_filters_narrow_by_format_subject_dates_name_and_id_prefix(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """Each filter keeps exactly the exports it names, newest first; search ignores case and
    treats % and _ as plain characters."""
    csv_orders = _request(store, clock)
    parquet = _request(store, clock, format="parquet")
    other = _request(store, clock, subject_id="q2", subject_name="Refunds_100%")
    late = _request(store, clock)

    def ids(narrow: ExportFilter) -> list[str]:
        return [r.id for r in store.list_exports(workspace_id="w1", narrow=narrow)]

    assert ids(ExportFilter(format="parquet")) == [parquet.id]
    assert ids(ExportFilter(subject_id="q2")) == [other.id]
    assert ids(ExportFilter(since=parquet.created_at, until=late.created_at)) == [
        other.id,
        parquet.id,
    ]
    assert ids(ExportFilter(search="REFUNDS")) == [other.id]
    assert ids(ExportFilter(search="100%")) == [other.id]
    assert ids(ExportFilter(search="_1")) == [other.id]
    assert ids(ExportFilter(search="%")) == [other.id]
    assert ids(ExportFilter(search="nothing")) == []
    assert ids(ExportFilter(id_prefix=csv_orders.id[:6])) == [csv_orders.id]
    assert ids(ExportFilter(id_prefix=csv_orders.id[:13])) == [csv_orders.id]
    assert ids(ExportFilter(id_prefix=csv_orders.id)) == [csv_orders.id]


def test_a_failure_code_keeps_the_exports_that_failed_with_it(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """`failure_code` keeps the failed exports settled with that code (the `cancelled` status
    filter): not those failed otherwise, nor the unsettled ones."""
    cancelled, refused, _still_queued = (_request(store, clock) for _ in range(3))
    assert store.cancel(cancelled.id, now=clock.now())
    claimed = queue_helpers.claim(
        store, refused.id, worker_id="w", now=clock.now(), lease_seconds=LEASE
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    assert store.fail(
        refused.id,
        claimed.lease_token,
        now=clock.now(),
        code=FailureCode.QUERY_INVALID,
        detail="no such table",
    )
    listed = store.list_exports(
        workspace_id="w1", narrow=ExportFilter(failure_code=FailureCode.CANCELLED)
    )
    assert [r.id for r in listed] == [cancelled.id]


def test_an_id_prefix_is_found_whatever_its_last_hex_digit(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """Prefixes ending in 9 or f (where the next character is not the next hex digit) find
    their export, and a prefix never finds an id that merely sorts next to it."""
    wanted = _request(store, clock, id="abc9f000-0000-4000-8000-000000000001")
    _request(store, clock, id="abca0000-0000-4000-8000-000000000002")
    sibling = _request(store, clock, id="abc9e000-0000-4000-8000-000000000003")
    _request(store, clock, id="abc9ff00-0000-4000-8000-000000000004")

    def ids(prefix: str) -> set[str]:
        found = store.list_exports(workspace_id="w1", narrow=ExportFilter(id_prefix=prefix))
        return {r.id for r in found}

    assert ids("abc9") == {wanted.id, sibling.id, "abc9ff00-0000-4000-8000-000000000004"}
    for prefix in ("abc9f0", "abc9f000", "abc9f000-0"):
        assert ids(prefix) == {wanted.id}, prefix


def test_pages_go_older_and_newer_with_the_filters_kept(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """Seven csv exports among others, three a page: older pages then newer ones come back
    in the same order, every csv export once, nothing else."""
    made = []
    for index in range(10):
        fmt = "csv" if index % 4 else "jsonl"
        made.append(_request(store, clock, format=fmt))
    csv_ids = [r.id for r in reversed(made) if r.format == "csv"]
    listing = ExportListing(narrow=ExportFilter(format="csv"))
    alice = Requester("alice", "w1")

    def page(**cursor: object) -> tuple[list[str], object, object]:
        found = list_export_page(store, clock, alice, listing, limit=3, **cursor)  # type: ignore[arg-type]
        return [r.id for r in found.items], found.older, found.newer

    first, older, newer = page()
    assert first == csv_ids[:3]
    assert newer is None
    assert older is not None
    second, older2, newer2 = page(before=older)
    assert second == csv_ids[3:6]
    assert older2 is not None
    assert newer2 is not None
    third, older3, _ = page(before=older2)
    assert third == csv_ids[6:]
    assert older3 is None
    back, _, newer_back = page(after=newer2)
    assert back == first
    assert newer_back is None


def test_a_member_never_sees_others_through_a_requester_filter(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """A member asking for someone else's exports gets none; an admin gets theirs."""
    _request(store, clock)
    bobs = _request(store, clock, requested_by="bob")
    bob_filter = ExportListing(requested_by="bob")
    alice = Requester("alice", "w1")
    as_member = list_export_page(store, clock, alice, bob_filter)
    assert as_member.items == []
    as_admin = list_export_page(store, clock, alice, bob_filter, whole_workspace=True)
    assert [r.id for r in as_admin.items] == [bobs.id]
