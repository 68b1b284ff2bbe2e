"""Progress published between heartbeats, file name templates, the exports list's filters as
people give them, and what names a query or report on the command line."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from qexport.cli.client import ApiError, one_named
from qexport.cli.downloads import plain_file_name
from qexport.domain.exports import safe_filename
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import check_filename_template, export_filename
from qexport.services.exports import check_id_prefix, parse_listing
from qexport.worker.lease import Lease
from tests.fakes import FrozenClock, InMemoryMetadataStore
from tests.support import queue_helpers
from tests.support.factories import new_export


def _wait_for(condition: object, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_rows_are_published_between_heartbeats_without_extending_the_lease() -> None:
    """With a long lease (heartbeats 10 s apart), the rows written reach the record within
    the progress interval, and the lease's expiry is left as the claim set it."""
    store, clock = InMemoryMetadataStore(), FrozenClock()
    record = store.insert_export(new_export(clock.now()))
    claimed = queue_helpers.claim(
        store, record.id, worker_id="w", now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    lease = Lease(
        store,
        clock,
        record.id,
        claimed.lease_token,
        lease_seconds=30,
        shutdown=threading.Event(),
        progress_seconds=0.05,
    )
    with lease:
        for rows in (1000, 5000):
            lease.progress_rows = rows
            assert _wait_for(lambda r=rows: store.get_export(record.id).progress_rows == r)  # type: ignore[union-attr]
    after = store.get_export(record.id)
    assert after is not None
    assert after.lease_expires_at == claimed.lease_expires_at


def test_a_progress_write_that_matches_no_row_stops_production() -> None:
    """Cancelled while running: the next progress write finds the lease gone, and the stop
    hooks run long before the next heartbeat would have noticed."""
    store, clock = InMemoryMetadataStore(), FrozenClock()
    record = store.insert_export(new_export(clock.now()))
    claimed = queue_helpers.claim(
        store, record.id, worker_id="w", now=clock.now(), lease_seconds=30
    )
    assert claimed is not None
    assert claimed.lease_token is not None
    stopped = threading.Event()
    lease = Lease(
        store,
        clock,
        record.id,
        claimed.lease_token,
        lease_seconds=30,
        shutdown=threading.Event(),
        progress_seconds=0.05,
    )
    lease.on_stop(stopped.set)
    with lease:
        assert store.cancel(record.id, now=clock.now())
        lease.progress_rows = 10
        assert stopped.wait(5)
        assert lease.lost


@pytest.mark.parametrize(
    ("template", "name"),
    [
        (None, "orders_2026-12-02.csv"),
        ("{name}_{since}_{date}", "orders_2026-01-01_2026-12-02.csv"),
        ("{name} {format} {time}", "orders-csv-104100.csv"),
        ("../{name}/{region}", "orders.csv"),
        ("{{literal}} {name}", "literal-orders.csv"),
    ],
)
def test_a_file_name_is_filled_from_its_template_and_made_safe(
    template: str | None, name: str
) -> None:
    """The default is {name}_{date}; parameters, the format and the time are there; an
    optional parameter left out is empty; the result is sanitised like every file name."""
    at = datetime(2026, 12, 2, 10, 41, tzinfo=UTC)
    values = {"since": "2026-01-01", "region": None}
    made = export_filename(
        template, name="orders", fmt="csv", extension="csv", values=values, at=at
    )
    assert made == name


def test_a_name_ending_in_a_symbol_leaves_one_separator_before_the_date() -> None:
    """`Ventes été 2024 !` with the default template is `Ventes-ete-2024_2026-01-05`: the
    symbol's `-` and the template's `_` do not pile up into `-_`."""
    at = datetime(2026, 1, 5, 9, tzinfo=UTC)
    made = export_filename(
        None, name="Ventes été 2024 !", fmt="jsonl", extension="jsonl", values={}, at=at
    )
    assert made == "Ventes-ete-2024_2026-01-05.jsonl"


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("a - b", "a-b.csv"),
        ("x_-_y", "x_y.csv"),
        ("Mr. Smith", "Mr-Smith.csv"),
        ("v1..2", "v1.2.csv"),
        ("---", "export.csv"),
        ("a" * 79 + " !b", "a" * 79 + ".csv"),  # cut at 80: no separator left at the end
    ],
)
def test_separators_never_double_up_or_end_a_name(name: str, safe: str) -> None:
    """A run of `-`, `_` and `.` (symbols replaced included) becomes one separator, `_`
    first, then `-`; the name never starts or ends with one, even once cut to 80."""
    assert safe_filename(name, "csv") == safe


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        ("orders_2026-12-02.csv", "orders_2026-12-02.csv"),  # qexport's own: kept as it is
        ("Sales.pdf", "Sales.pdf"),
        ("../../.bashrc", "export.bashrc"),
        ("/etc/cron.d/x.csv", "etc-cron.d-x.csv"),
        ("..", "export.bin"),
        ("a/../../b.csv", "a-b.csv"),
        ("C:\\Windows\\x.csv", "C-Windows-x.csv"),
        (".hidden.csv", "hidden.csv"),
    ],
)
def test_a_downloads_own_name_is_one_plain_name(given: str, plain: str) -> None:
    """The name a download is written under when it comes from the export (a server could
    send anything) never has a separator or `..` in it and never starts with a dot, so it
    stays inside the directory it is written to; qexport's own names pass unchanged."""
    assert plain_file_name(given) == plain


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{name}_{sinse}", "unknown placeholder {sinse}"),
        ("{name", "unmatched { or }"),
        ("{date:%Y}", "without a format"),
        ("   ", "cannot be empty"),
    ],
)
def test_a_bad_file_name_template_is_refused_naming_the_problem(
    template: str, message: str
) -> None:
    """An unknown placeholder is named (with the known ones); broken braces and format
    specs are refused; nothing is silently dropped."""
    with pytest.raises(InvalidRequestError) as caught:
        check_filename_template(template, ["since"])
    assert message in caught.value.detail
    assert caught.value.field == "filename_template"


def test_list_filters_are_checked_together_naming_each_parameter() -> None:
    """Every bad filter is refused at once, each under its API parameter name."""
    with pytest.raises(InvalidRequestError) as caught:
        parse_listing(status="done", fmt="docx", since="yesterday", until="2026-13-01")
    assert [p.field for p in caught.value.problems] == ["status", "format", "since", "until"]
    listing = parse_listing(since="2026-12-01", until="2026-12-01", search=" orders ")
    assert listing.narrow.since == datetime(2026, 12, 1, tzinfo=UTC)
    assert listing.narrow.until == datetime(2026, 12, 2, tzinfo=UTC)  # the whole day
    assert listing.narrow.search == "orders"
    assert parse_listing(status="", fmt="").filtered is False


@pytest.mark.parametrize("prefix", ["abc", "abcd'; --", "zzzz", "a" * 65, "----", "ab-cd"])
def test_an_id_prefix_is_four_hex_characters_or_more(prefix: str) -> None:
    """Too short, not hex, too long, or not starting with 4 hex digits as every id does:
    refused before anything is looked up."""
    with pytest.raises(InvalidRequestError):
        check_id_prefix(prefix)
    assert check_id_prefix(" ABCD ") == "abcd"


QUERIES = [
    ("abcd1111-0000-4000-8000-000000000001", "orders"),
    ("abcd2222-0000-4000-8000-000000000002", "refunds"),
    ("beef3333-0000-4000-8000-000000000003", "beef"),
]


def test_a_subject_is_named_by_its_name_its_id_or_the_start_of_its_id() -> None:
    """A name, an id, or a start (any case) that only one id has; a name wins over a start
    that reads like one (`beef`, a query's name)."""
    assert one_named(QUERIES, "query", "refunds") == QUERIES[1][0]
    assert one_named(QUERIES, "query", QUERIES[0][0]) == QUERIES[0][0]
    assert one_named(QUERIES, "query", "ABCD2") == QUERIES[1][0]
    assert one_named(QUERIES, "query", "beef") == QUERIES[2][0]
    assert one_named(QUERIES, "query", "beef3") == QUERIES[2][0]


def test_an_unknown_or_ambiguous_subject_is_refused_as_a_server_would() -> None:
    """Unknown: 404 not_found with the nearest names; a start several ids share: 422 naming
    them; a start under 4 characters is a name, and unknown."""
    with pytest.raises(ApiError) as unknown:
        one_named(QUERIES, "query", "ordrs")
    assert (unknown.value.status, unknown.value.code) == (404, "not_found")
    assert unknown.value.detail == "no query 'ordrs' that you can read; did you mean 'orders'?"
    with pytest.raises(ApiError) as elsewhere:
        one_named(QUERIES, "query", "zzzzzz", where="in this workspace")
    assert elsewhere.value.detail == "no query 'zzzzzz' in this workspace"
    with pytest.raises(ApiError) as ambiguous:
        one_named(QUERIES, "query", "abcd")
    assert (ambiguous.value.status, ambiguous.value.code) == (422, "invalid_request")
    assert ambiguous.value.detail.startswith("query id 'abcd' is ambiguous; it starts ")
    assert f"{QUERIES[0][0]} (orders)" in ambiguous.value.detail
    with pytest.raises(ApiError, match="no query 'abc'"):
        one_named(QUERIES, "query", "abc")


def test_a_list_is_read_only_until_the_name_is_met() -> None:
    """The pairs (a server's pages) are read no further than the one named."""
    read: list[str] = []

    def pairs() -> Iterator[tuple[str, str]]:
        for pair in QUERIES:
            read.append(pair[1])
            yield pair

    assert one_named(pairs(), "query", "orders") == QUERIES[0][0]
    assert read == ["orders"]
