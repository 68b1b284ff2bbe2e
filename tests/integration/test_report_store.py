"""The store contract for reports and the workspace time zone they are dated in, on every
backend (in memory, SQLite and PostgreSQL), so the fake cannot drift: what is written reads
back whole, deletes are soft, and a claim reads a report export's report with its queries."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from qexport.domain.accounts import Standing
from qexport.domain.exports import ExportRecord
from qexport.domain.queries import Query, Visibility
from qexport.domain.reports import Display, Report, ReportSubject, Section
from qexport.ports import AccountStore
from qexport.store.accounts import SqlAccountStore
from tests.fakes import FrozenClock, InMemoryAccountStore
from tests.support.factories import new_export
from tests.support.stores import MetadataStore, SqlMetadataStore

LEASE = 30.0


def _report(workspace: str = "w1", title: str = "Sales", **changes: object) -> Report:
    report = Report(
        id=str(uuid.uuid4()),
        workspace_id=workspace,
        title=title,
        description="Every order, then the big ones ✓",
        sections=(
            Section("All orders", "q1"),
            Section(
                "Big orders",
                "q2",
                parameters={"above": 100, "since": "2024-01-01"},
                display=Display.BAR,
                row_cap=25,
            ),
        ),
        visibility=Visibility.MEMBERS,
        members=frozenset({"bob", "carol"}),
        owner="alice",
    )
    return replace(report, **changes)  # type: ignore[arg-type]


def test_a_report_reads_back_whole(store: MetadataStore) -> None:
    """Title, description, ordered sections (fixed parameters, display, row cap),
    visibility, members and owner all survive the round trip."""
    report = store.add_report(_report())
    assert store.get_report(report.id) == report
    assert store.get_report("no-such-report") is None


def test_reports_are_listed_by_title_within_their_workspace(store: MetadataStore) -> None:
    """A workspace lists its own live reports, by title; another workspace's stay out."""
    b = store.add_report(_report(title="B"))
    a = store.add_report(_report(title="A"))
    store.add_report(_report(workspace="w2", title="Elsewhere"))
    assert [r.id for r in store.list_reports("w1")] == [a.id, b.id]
    assert [r.title for r in store.list_reports("w2")] == ["Elsewhere"]
    assert store.list_reports("w3") == []


def test_titles_need_not_be_unique(store: MetadataStore) -> None:
    """Two reports may share a title; both are kept and listed."""
    first = store.add_report(_report(title="Same"))
    second = store.add_report(_report(title="Same"))
    assert {r.id for r in store.list_reports("w1")} == {first.id, second.id}


def test_an_update_replaces_the_report_but_not_its_workspace(store: MetadataStore) -> None:
    """update_report writes title, sections and visibility; the workspace stays."""
    report = store.add_report(_report())
    changed = replace(
        report,
        workspace_id="w2",
        title="Renamed",
        description="",
        sections=(Section("Only", "q3", display=Display.LINE),),
        visibility=Visibility.WORKSPACE,
        members=frozenset(),
    )
    assert store.update_report(changed) is True
    assert store.get_report(report.id) == replace(changed, workspace_id="w1")
    assert store.update_report(_report()) is False  # never added


def test_a_deleted_report_stays_readable_by_id_marked_deleted(store: MetadataStore) -> None:
    """delete_report is soft: the report reads back marked deleted, leaves the list, and can
    be neither deleted again nor updated."""
    report = store.add_report(_report())
    assert store.delete_report(report.id) is True
    gone = store.get_report(report.id)
    assert gone is not None
    assert gone.deleted
    assert store.list_reports("w1") == []
    assert store.delete_report(report.id) is False
    assert store.update_report(replace(report, title="Back")) is False
    assert store.delete_report("no-such-report") is False


def _report_export(store: MetadataStore, clock: FrozenClock, report_id: str) -> ExportRecord:
    new = replace(
        new_export(clock.now()),
        subject_type="report",
        subject_id=report_id,
        subject_name="Sales",
        format="pdf",
        filename="Sales.pdf",
    )
    return store.insert_export(new)


def test_a_claim_reads_the_report_with_its_queries(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """The admission sees the report and each section's query as stored at claim time;
    a missing query is None, so the pre-render check can refuse it."""
    store.add_query(Query("q1", "w1", "orders", "SELECT 1", "shop"))
    report = store.add_report(_report())
    export = _report_export(store, clock, report.id)
    seen: list[object] = []

    def admit(record: ExportRecord, subject: object, standing: Standing) -> str | None:
        seen.append(subject)
        return None

    result = store.claim_next(worker_id="w", now=clock.now(), lease_seconds=LEASE, admit=admit)
    assert result.claimed is not None
    assert result.claimed.id == export.id
    assert isinstance(result.subject, ReportSubject)
    assert result.subject.report == report
    assert result.subject.queries["q1"] == store.get_query("q1")
    assert result.subject.queries["q2"] is None
    assert seen == [result.subject]


def test_a_refused_report_export_fails_access_lost(
    store: MetadataStore, clock: FrozenClock
) -> None:
    """A report deleted before the claim is shown to the admission as deleted; its refusal
    settles the export queued -> failed/access_lost with a refused event."""
    report = store.add_report(_report(owner="alice"))
    export = _report_export(store, clock, report.id)
    store.delete_report(report.id)

    def admit(record: ExportRecord, subject: object, standing: Standing) -> str | None:
        assert isinstance(subject, ReportSubject)
        return subject.refusal(record.requester)

    result = store.claim_next(worker_id="w", now=clock.now(), lease_seconds=LEASE, admit=admit)
    assert result.claimed is None
    assert result.refused is not None
    settled = store.get_export(export.id)
    assert settled is not None
    assert settled.status.value == "failed"
    assert settled.failure_code is not None
    assert settled.failure_code.value == "access_lost"
    assert [e.kind.value for e in store.list_events(export.id)] == ["requested", "refused"]


# ---------------------------------------------------------------- the workspace's time zone


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def report_accounts(request: pytest.FixtureRequest) -> AccountStore:
    """An AccountStore on each backend."""
    if request.param == "memory":
        return InMemoryAccountStore()
    store = request.getfixturevalue(f"{request.param}_store")
    assert isinstance(store, SqlMetadataStore)
    return SqlAccountStore(store.engine)


def test_a_workspace_is_dated_in_utc_until_set(
    report_accounts: AccountStore, clock: FrozenClock
) -> None:
    """A new (or unknown) workspace answers UTC; a set zone reads back; setting one on a
    workspace that does not exist changes nothing and says so."""
    report_accounts.ensure_workspace("w1", now=clock.now())
    assert report_accounts.workspace_timezone("w1") == "UTC"
    assert report_accounts.workspace_timezone("nowhere") == "UTC"
    assert report_accounts.set_workspace_timezone("w1", "Europe/Paris") is True
    assert report_accounts.workspace_timezone("w1") == "Europe/Paris"
    assert report_accounts.set_workspace_timezone("nowhere", "Asia/Tokyo") is False
    assert report_accounts.workspace_timezone("nowhere") == "UTC"
