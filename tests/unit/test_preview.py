"""Previewing a query on the in-memory fakes: who may, how parameters are bound, the caps, the
cells a page shows (exact, JSON-safe, long texts cut and marked), and the slots a preview and
a describe share."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from qexport.domain.audit import Action, AuditFilter, RecordedEvent
from qexport.domain.exports import Requester
from qexport.domain.failures import (
    AccessLostError,
    ForbiddenError,
    InvalidRequestError,
    MetadataUnavailableError,
    NotFoundError,
    QueryInvalidError,
    TooManyRequestsError,
)
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Parameter, ParamType, Query, Visibility
from qexport.services.describe import describe_statement
from qexport.services.preview import (
    MAX_CELL_CHARS,
    Preview,
    PreviewDesk,
    preview_query,
    preview_timeout,
)
from qexport.services.slots import SourceSlots
from qexport.writers.cells import CUT_MARK, MAX_SAFE_INTEGER, column_cells, preview_cells
from tests.fakes import (
    FixedSources,
    FrozenClock,
    InMemoryAccountStore,
    InMemoryAuditLog,
    InMemoryMetadataStore,
    InMemoryRateLimits,
    InProcessPreviews,
)
from tests.unit.fakes import FakeSource

ANN = Requester("ann", "acme")
BOB = Requester("bob", "acme")
EVE = Requester("eve", "evil")


@pytest.fixture
def preview_catalog() -> InMemoryMetadataStore:
    store = InMemoryMetadataStore()
    store.add_query(
        Query(
            "q-orders",
            "acme",
            "orders",
            "SELECT * FROM orders WHERE n >= $above",
            "shop",
            parameters=(Parameter("above", ParamType.INTEGER, required=False, default="0"),),
        )
    )
    store.add_query(
        Query(
            "q-secret",
            "acme",
            "secret",
            "SELECT 1",
            "shop",
            visibility=Visibility.MEMBERS,
            owner="bob",
        )
    )
    return store


@dataclass
class Desk:
    """A preview desk over the fakes, and what a test looks into afterwards."""

    audit: InMemoryAuditLog = field(default_factory=InMemoryAuditLog)
    accounts: InMemoryAccountStore = field(default_factory=InMemoryAccountStore)
    rates: InMemoryRateLimits = field(default_factory=InMemoryRateLimits)
    clock: FrozenClock = field(default_factory=FrozenClock)
    per_minute: int = 1_000

    def of(
        self, catalog: InMemoryMetadataStore, sources: FixedSources, slots: SourceSlots
    ) -> PreviewDesk:
        return PreviewDesk(
            catalog=catalog,
            accounts=self.accounts,
            sources=sources,
            runner=InProcessPreviews(sources),
            slots=slots,
            audit=self.audit,
            rates=self.rates,
            clock=self.clock,
            per_minute=self.per_minute,
            statement_timeout_seconds=300,
        )

    def previewed(self) -> list[RecordedEvent]:
        """The trail's `query.previewed` events, oldest first."""
        narrow = AuditFilter(action=Action.QUERY_PREVIEWED.value)
        return self.audit.list_events(workspace_id=None, narrow=narrow, limit=1_000)[::-1]

    def set_policy(self, policy: WorkspacePolicy) -> None:
        self.accounts.ensure_workspace("acme", now=self.clock.now())
        self.accounts.set_workspace_policy("acme", policy)


def _preview(
    catalog: InMemoryMetadataStore,
    source: FakeSource,
    requester: Requester = ANN,
    *,
    ref: str = "q-orders",
    slots: SourceSlots | None = None,
    workspaces: tuple[str, ...] = ("acme",),
    desk: Desk | None = None,
    **kwargs: Any,
) -> Preview:
    sources = FixedSources({"shop": source}, workspaces)
    return preview_query(
        (desk or Desk()).of(catalog, sources, slots or SourceSlots()),
        requester,
        query_ref=ref,
        **kwargs,
    )


def test_a_sensitive_query_is_not_previewed(preview_catalog: InMemoryMetadataStore) -> None:
    """A query the workspace's policy marks sensitive is refused naming the policy, and its
    source is never asked: its rows leave only through an approved export."""
    source = FakeSource(pa.table({"n": [1]}))
    desk = Desk()
    desk.set_policy(WorkspacePolicy(sensitive_queries=frozenset({"q-orders"})))
    with pytest.raises(ForbiddenError, match="policy marks the query 'orders' sensitive"):
        _preview(preview_catalog, source, desk=desk)
    assert source.calls == []


def test_a_preview_runs_the_query_with_bound_values_as_the_requester(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """The source gets the query's SQL, the parameters typed as an export binds them and the
    requester; the answer carries the columns, the rows and the values it ran with."""
    source = FakeSource(pa.table({"n": [1, 2, 3], "s": ["a", "b", "c"]}))
    found = _preview(preview_catalog, source, parameters={"above": "2"})
    assert source.calls == [("SELECT * FROM orders WHERE n >= $above", {"above": 2}, ANN)]
    assert [(c.name, c.type) for c in found.columns] == [("n", "int64"), ("s", "string")]
    assert found.rows == [[1, "a"], [2, "b"], [3, "c"]]
    assert found.parameters == {"above": 2}
    assert not found.truncated


def test_rows_past_the_limit_are_left_out_and_said_so(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """At most `limit` rows; `more_rows` and `truncated` say the result goes on."""
    source = FakeSource(pa.table({"n": list(range(500))}))
    found = _preview(preview_catalog, source, limit=100)
    assert len(found.rows) == 100
    assert found.more_rows
    assert found.truncated
    assert len(_preview(preview_catalog, source, limit=7).rows) == 7


@pytest.mark.parametrize("limit", [0, 101, -1, True, "5"])
def test_a_limit_outside_1_to_100_is_refused(
    preview_catalog: InMemoryMetadataStore, limit: object
) -> None:
    """The limit is a whole number from 1 to 100; anything else is refused, naming it."""
    source = FakeSource()
    with pytest.raises(InvalidRequestError) as caught:
        _preview(preview_catalog, source, limit=limit)
    assert caught.value.field == "limit"
    assert source.calls == []


def test_a_query_the_requester_may_not_read_is_not_found(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """A members-only query of someone else, and any query of another workspace, are not found
    (the same answer as a missing one), and the source is never asked."""
    source = FakeSource()
    with pytest.raises(NotFoundError):
        _preview(preview_catalog, source, ANN, ref="q-secret")
    with pytest.raises(NotFoundError):
        _preview(preview_catalog, source, EVE, workspaces=("acme", "evil"))
    assert source.calls == []
    assert _preview(preview_catalog, source, BOB, ref="q-secret").rows  # its owner reads it


def test_a_bad_parameter_is_refused_naming_it(preview_catalog: InMemoryMetadataStore) -> None:
    """A value that is not the parameter's type, or an undeclared parameter, is refused with
    the field `parameters.<name>` before the source is asked."""
    source = FakeSource()
    with pytest.raises(InvalidRequestError) as caught:
        _preview(preview_catalog, source, parameters={"above": "many"})
    assert caught.value.field == "parameters.above"
    with pytest.raises(InvalidRequestError) as caught:
        _preview(preview_catalog, source, parameters={"nope": 1})
    assert caught.value.field == "parameters.nope"
    assert source.calls == []


def test_a_source_the_workspace_may_no_longer_use_is_access_lost(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """As the worker refuses an export of it: access_lost, nothing run."""
    source = FakeSource()
    with pytest.raises(AccessLostError):
        _preview(preview_catalog, source, workspaces=("other",))
    assert source.calls == []


def test_the_timeout_is_the_statement_timeout_at_most_30_seconds() -> None:
    """A person waits for a preview: the statement timeout applies, capped at 30 s."""
    assert preview_timeout(300) == 30
    assert preview_timeout(5) == 5
    assert preview_timeout(0) == 30


# ---------------------------------------------------------------- cells


def test_cells_are_exact_and_json_safe() -> None:
    """Decimals as their exact text, integers past 2^53 as text, NaN and the infinities as
    text, NULL as null, aware timestamps in ISO 8601 with their offset, binary as \\x hex,
    nested values as JSON text; the whole answer is strict JSON."""
    stamp = dt.datetime(2024, 5, 1, 10, 30, tzinfo=dt.UTC)
    table = pa.table(
        {
            "d": pa.array([Decimal("12.50"), Decimal("0.00000010"), None], pa.decimal128(12, 8)),
            "i": [MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 2, None],
            "f": [0.1, float("nan"), float("-inf")],
            "t": pa.array([stamp, None, stamp], pa.timestamp("us", tz="Europe/Berlin")),
            "b": [b"\x00\xff", None, b""],
            "l": [[1, 2], None, []],
            "day": [dt.date(2024, 2, 29), None, dt.date(1, 1, 1)],
            "ok": [True, None, False],
        }
    )
    cells = preview_cells(table, max_chars=100, max_bytes=10_000)
    assert cells.rows == [
        [
            "12.50000000",
            MAX_SAFE_INTEGER,
            0.1,
            "2024-05-01T12:30:00.000000+02:00",
            "\\x00ff",
            "[1,2]",
            "2024-02-29",
            True,
        ],
        ["0.00000010", str(MAX_SAFE_INTEGER + 2), "NaN", None, None, None, None, None],
        [
            None,
            None,
            "-Infinity",
            "2024-05-01T12:30:00.000000+02:00",
            "\\x",
            "[]",
            "0001-01-01",
            False,
        ],
    ]
    json.dumps(cells.rows, allow_nan=False)  # strict JSON: no NaN or Infinity numbers


def test_long_texts_are_cut_with_a_mark_and_numbers_never() -> None:
    """A text past the cap ends with the cut mark and is counted; a long number is not cut."""
    table = pa.table(
        {"s": ["x" * 50, "short"], "n": pa.array([Decimal(10) ** 30, 1], pa.decimal128(38, 0))}
    )
    cells = preview_cells(table, max_chars=10, max_bytes=10_000)
    assert cells.rows[0] == ["x" * 10 + CUT_MARK, "1" + "0" * 30]
    assert cells.rows[1] == ["short", "1"]
    assert cells.cut == 1


def test_rows_stop_at_the_byte_bound_but_the_first_is_shown() -> None:
    """Rows are shown while their text stays within the bound; one that would pass it is left
    out (`dropped`), but never the first."""
    table = pa.table({"s": ["a" * 400, "b" * 400, "c" * 400]})
    cells = preview_cells(table, max_chars=1_000, max_bytes=900)
    assert [row[0][0] for row in cells.rows] == ["a", "b"]
    assert cells.dropped
    assert len(preview_cells(table, max_chars=1_000, max_bytes=10).rows) == 1


def test_the_service_cuts_what_a_source_returned_uncut(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """A source may leave long values whole: the service still cuts them at MAX_CELL_CHARS."""
    source = FakeSource(pa.table({"s": ["é" * (MAX_CELL_CHARS + 500)]}))
    found = _preview(preview_catalog, source)
    assert found.rows == [["é" * MAX_CELL_CHARS + CUT_MARK]]
    assert found.cut_cells == 1
    assert found.truncated


def test_every_arrow_kind_becomes_a_cell() -> None:
    """Intervals read as ISO 8601 durations, dictionaries as their values, half floats as
    floats, a NULL column as nulls."""
    assert column_cells(pa.array([pa.MonthDayNano([1, 2, 3_000_000_000])])) == ["P1M2DT3S"]
    assert column_cells(pa.array(["a", "b", "a"]).dictionary_encode()) == ["a", "b", "a"]
    assert column_cells(pa.array([1], pa.int64()).dictionary_encode()) == [1]
    assert column_cells(pa.array([0.5], pa.float32()).cast(pa.float16())) == [0.5]
    assert column_cells(pa.nulls(2)) == [None, None]


# ---------------------------------------------------------------- slots


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _blocked(
    catalog: InMemoryMetadataStore, slots: SourceSlots, gate: threading.Event, *who: Requester
) -> tuple[list[threading.Thread], threading.Barrier]:
    """Previews by `who`, each blocked inside its source until `gate` is set."""
    started = threading.Barrier(len(who) + 1)

    def wait() -> None:
        started.wait(timeout=10)
        gate.wait(timeout=10)

    threads = [
        threading.Thread(
            target=_preview,
            args=(catalog, FakeSource(on_preview=wait), requester),
            kwargs={"slots": slots},
        )
        for requester in who
    ]
    for thread in threads:
        thread.start()
    return threads, started


def test_a_requester_holds_at_most_two_source_slots(
    preview_catalog: InMemoryMetadataStore, gate: threading.Event
) -> None:
    """With two of Ann's previews running, her third preview and a describe are refused
    (429 with a Retry-After), without the source being asked; Bob's still runs; once hers
    finish she may preview again."""
    slots = SourceSlots(per_requester=2, per_process=8)
    threads, started = _blocked(preview_catalog, slots, gate, ANN, ANN)
    started.wait(timeout=10)
    third = FakeSource()
    with pytest.raises(TooManyRequestsError) as caught:
        _preview(preview_catalog, third, slots=slots)
    assert caught.value.retry_after > 0
    with pytest.raises(TooManyRequestsError):
        describe_statement(
            FixedSources({"shop": third}),
            InProcessPreviews(FixedSources({"shop": third})),
            ANN,
            source="shop",
            sql="SELECT 1",
            parameters=(),
            timeout_seconds=5,
            slots=slots,
        )
    assert third.calls == []
    assert _preview(preview_catalog, FakeSource(), BOB, slots=slots).rows
    gate.set()
    for thread in threads:
        thread.join(timeout=10)
    assert slots.held(ANN) == 0
    assert _preview(preview_catalog, FakeSource(), slots=slots).rows


def test_the_process_holds_at_most_its_bound(
    preview_catalog: InMemoryMetadataStore, gate: threading.Event
) -> None:
    """Past the per-process bound anyone's preview is refused, whoever holds the slots."""
    slots = SourceSlots(per_requester=2, per_process=2)
    threads, started = _blocked(preview_catalog, slots, gate, ANN, BOB)
    started.wait(timeout=10)
    with pytest.raises(TooManyRequestsError, match="the server"):
        _preview(preview_catalog, FakeSource(), Requester("carol", "acme"), slots=slots)
    gate.set()
    for thread in threads:
        thread.join(timeout=10)


def test_a_failed_preview_gives_its_slot_back(preview_catalog: InMemoryMetadataStore) -> None:
    """A source's refusal passes through, and the slot is free again."""
    slots = SourceSlots(per_requester=1, per_process=1)
    with pytest.raises(QueryInvalidError):
        _preview(preview_catalog, FakeSource(error=QueryInvalidError("no such table")), slots=slots)
    assert slots.held(ANN) == 0
    assert _preview(preview_catalog, FakeSource(), slots=slots).rows


# ---------------------------------------------------------------- on the record


class _Unwritable(InMemoryAuditLog):
    """A trail that cannot be written (the database is down)."""

    def record(self, event: Any) -> bool:
        return False


def test_rows_whose_event_cannot_be_written_are_not_shown(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """Every row that leaves is on the record: a preview whose event cannot be written is
    refused (503, try again) rather than shown unaccounted for."""
    with pytest.raises(MetadataUnavailableError, match="could not be recorded"):
        _preview(preview_catalog, FakeSource(), desk=Desk(audit=_Unwritable()))


def test_each_preview_run_is_recorded_and_refusals_before_it_are_not(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """A preview shown, one the source refused and one of a sensitive query are each an
    event (ok with its rows; failed with its code; refused); a bad parameter, a limit out of
    range and a query that cannot be read ran nothing and are not recorded."""
    desk = Desk()
    _preview(
        preview_catalog, FakeSource(pa.table({"n": [1, 2]})), parameters={"above": "1"}, desk=desk
    )
    with pytest.raises(QueryInvalidError):
        _preview(preview_catalog, FakeSource(error=QueryInvalidError("no such table")), desk=desk)
    for bad in ({"parameters": {"above": "x"}}, {"limit": 0}, {"ref": "q-secret"}):
        with pytest.raises((InvalidRequestError, NotFoundError)):
            _preview(preview_catalog, FakeSource(), desk=desk, **bad)
    desk.set_policy(WorkspacePolicy(sensitive_queries=frozenset({"q-orders"})))
    with pytest.raises(ForbiddenError):
        _preview(preview_catalog, FakeSource(), desk=desk)
    shown, failed, refused = desk.previewed()
    assert (shown.outcome, json.loads(shown.details)["rows"]) == ("ok", 2)
    assert json.loads(shown.details)["parameters"] == {"above": 1}
    assert (failed.outcome, json.loads(failed.details)["code"]) == ("failed", "query_invalid")
    assert refused.outcome == "refused"


def test_a_long_parameter_value_is_recorded_cut(preview_catalog: InMemoryMetadataStore) -> None:
    """A value's text is cut to 200 characters on the record: a hostile value cannot bloat
    the trail."""
    preview_catalog.add_query(
        Query(
            "q-who",
            "acme",
            "who",
            "SELECT $who AS w",
            "shop",
            (Parameter("who", ParamType.STRING),),
        )
    )
    desk = Desk()
    _preview(preview_catalog, FakeSource(), ref="q-who", parameters={"who": "x" * 5_000}, desk=desk)
    [found] = desk.previewed()
    assert json.loads(found.details)["parameters"] == {"who": "x" * 200}


def test_past_the_previews_a_minute_the_next_waits_for_the_oldest(
    preview_catalog: InMemoryMetadataStore,
) -> None:
    """Two a minute: the third is refused with how long until the first leaves the minute,
    nothing run; once it has, one more runs; another member has their own minute."""
    desk = Desk(per_minute=2)
    source = FakeSource()
    _preview(preview_catalog, source, desk=desk)
    desk.clock.advance(20)
    _preview(preview_catalog, source, desk=desk)
    with pytest.raises(TooManyRequestsError, match="2 previews in the last minute") as caught:
        _preview(preview_catalog, source, desk=desk)
    assert caught.value.retry_after == 40
    assert len(source.calls) == 2
    assert _preview(preview_catalog, FakeSource(), BOB, desk=desk).rows
    desk.clock.advance(40)
    assert _preview(preview_catalog, source, desk=desk).rows


def test_the_policys_row_limit_caps_the_rows_shown(preview_catalog: InMemoryMetadataStore) -> None:
    """`max_rows` below the limit asked for caps it, and the preview says the policy did;
    the source is asked for no more."""
    desk = Desk()
    desk.set_policy(WorkspacePolicy(max_rows=3))
    found = _preview(
        preview_catalog, FakeSource(pa.table({"n": list(range(10))})), desk=desk, limit=50
    )
    assert [row[0] for row in found.rows] == [0, 1, 2]
    assert (found.limit, found.policy_rows, found.more_rows) == (3, 3, True)
