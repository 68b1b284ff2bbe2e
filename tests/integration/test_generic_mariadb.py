"""The generic SQLAlchemy source on a real MariaDB server (`sqlalchemy+mysql+mysqldb://`):
exact types, a read-only transaction, the server's statement timeout, KILL QUERY on cancel,
errors that name the source but never the password, describe, preview and the worker's path."""

from __future__ import annotations

import io
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qexport import bootstrap
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import (
    FailureCode,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceLoginError,
    SourceUnavailableError,
)
from qexport.domain.queries import Query
from qexport.services.requests import record_request
from qexport.sources.generic.source import GenericSource, from_url
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.mariadb import (
    ADMIN,
    ADMIN_PASSWORD,
    READER_PASSWORD,
    MariaDBServer,
    mariadb_server,
)

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

ALICE = Requester("u-alice", "w1")
SCHEME = "sqlalchemy+mysql+mysqldb"
WRONG_PASSWORD = "Wrong s3cret"  # noqa: S105 - a password the server refuses


@pytest.fixture(scope="module")
def generic_maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The server, with what these tests add: an instant written from another time zone, and
    a function that writes (which a read-only transaction must refuse)."""
    db = mariadb_server.database
    mariadb_server.execute(
        f"USE {db}",
        "CREATE TABLE instants (id INT, at TIMESTAMP(3) NULL)",
        "SET time_zone = '+02:00'",
        "INSERT INTO instants VALUES (1, '2024-05-01 12:30:00.250')",
        "CREATE TABLE counter (n INT)",
        "CREATE FUNCTION bump() RETURNS INT MODIFIES SQL DATA"
        " BEGIN INSERT INTO counter VALUES (1); RETURN 1; END",
    )
    return mariadb_server


@pytest.fixture
def generic_maria_source(generic_maria: MariaDBServer) -> GenericSource:
    return from_url("maria", generic_maria.url(scheme=SCHEME), Settings())


def _table(source: GenericSource, sql: str, parameters: dict[str, Any] | None = None) -> pa.Table:
    stream = source.execute(sql, parameters or {}, ALICE, timeout_seconds=30)
    try:
        return pa.Table.from_batches(list(stream), schema=stream.schema)
    finally:
        stream.close()


def _running(server: MariaDBServer, marker: str) -> int:
    rows = server.execute(
        "SELECT count(*) FROM information_schema.processlist"
        f" WHERE info LIKE '%{marker}%' AND info NOT LIKE '%processlist%'"
    )
    return int(rows[0][0])


def test_types_are_exact(generic_maria_source: GenericSource) -> None:
    """DECIMAL keeps every digit (decimal128, or decimal256 past 38 digits), DATETIME is a
    wall-clock time, TIME a duration, JSON text, BLOB bytes; NULLs stay NULL."""
    table = _table(
        generic_maria_source,
        "SELECT price, exact, huge, moment, clock, doc, blobby, word FROM types ORDER BY id",
    )
    types = {f.name: f.type for f in table.schema}
    assert pa.types.is_decimal(types["price"])
    assert types["price"].scale == 2
    assert types["exact"].scale == 10
    assert types["moment"] == pa.timestamp("us")
    assert types["clock"] == pa.duration("us")
    assert types["doc"] == pa.string()
    assert types["blobby"] == pa.binary()
    first, empty = table.to_pylist()
    assert first == {
        "price": Decimal("1234567890.12"),
        "exact": Decimal("1234567890123456789012345678.0123456789"),
        "huge": Decimal("1234567890123456789012345678901234567890123456.0001"),
        "moment": datetime(2024, 2, 29, 23, 59, 59, 123456),
        "clock": timedelta(hours=23, minutes=59, seconds=59, milliseconds=999),
        "doc": '{"a": [1, "two"]}',
        "blobby": b"\x00\xff\x10",
        "word": "grüße 😀",
    }
    assert set(empty.values()) == {None}


def test_a_timestamp_is_the_same_instant_in_utc(generic_maria_source: GenericSource) -> None:
    """A TIMESTAMP written at 12:30 in +02:00 is read as 10:30 UTC, whatever the zones of
    the server and of qexport's session."""
    table = _table(generic_maria_source, "SELECT at FROM instants")
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.column("at").to_pylist() == [datetime(2024, 5, 1, 10, 30, 0, 250000, tzinfo=UTC)]


def test_an_unsigned_bigint_past_int64_is_refused_naming_the_column(
    generic_maria_source: GenericSource,
) -> None:
    """18446744073709551615 fits no int64: query_invalid naming the column, not the value."""
    with pytest.raises(QueryInvalidError, match="'ubig'") as caught:
        _table(generic_maria_source, "SELECT ubig FROM types ORDER BY id")
    assert "18446744073709551615" not in str(caught.value)
    exact = _table(
        generic_maria_source, "SELECT CAST(ubig AS DECIMAL(20, 0)) AS ubig FROM types ORDER BY id"
    )
    assert exact.column("ubig").to_pylist() == [Decimal(18446744073709551615), None]


def test_parameters_and_the_requester_are_bound(generic_maria_source: GenericSource) -> None:
    """$user_id and a parameter that looks like SQL are values, never SQL."""
    mine = _table(generic_maria_source, "SELECT name FROM people WHERE owner = $user_id")
    assert mine.to_pylist() == [{"name": "Ann"}]
    hostile = _table(
        generic_maria_source, "SELECT name FROM people WHERE name = $n", {"n": "x' OR '1'='1"}
    )
    assert hostile.num_rows == 0


def test_the_transaction_is_read_only(generic_maria: MariaDBServer) -> None:
    """Even a login that may write (the admin) cannot: a function that inserts is refused by
    the READ ONLY transaction, and nothing was written."""
    admin = from_url("admin", generic_maria.url(ADMIN, ADMIN_PASSWORD, scheme=SCHEME), Settings())
    with pytest.raises(QueryInvalidError, match="READ ONLY"):
        _table(admin, "SELECT bump() AS b")
    assert generic_maria.execute(f"SELECT count(*) FROM {generic_maria.database}.counter") == [(0,)]
    with pytest.raises(QueryInvalidError, match="only a single SELECT"):
        _table(admin, "DELETE FROM people")


def test_the_server_stops_a_statement_at_the_timeout(
    generic_maria_source: GenericSource, generic_maria: MariaDBServer
) -> None:
    """max_statement_time ends it on the server: query_timeout, and it no longer runs."""
    with pytest.raises(QueryTimeoutError, match="1 s"):
        _table_timed(generic_maria_source, "SELECT SLEEP(30) AS slept_timeout_marker", 1)
    assert _running(generic_maria, "slept_timeout_marker") == 0


def _table_timed(source: GenericSource, sql: str, seconds: float) -> None:
    stream = source.execute(sql, {}, ALICE, timeout_seconds=seconds)
    try:
        list(stream)
    finally:
        stream.close()


def test_on_interrupt_kills_the_query_on_the_server(
    generic_maria_source: GenericSource, generic_maria: MariaDBServer
) -> None:
    """The interrupt handed out before the statement starts runs KILL QUERY: the statement
    ends on the server at once, failed as interrupted."""
    handed: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            generic_maria_source.execute(
                "SELECT SLEEP(60) AS slept_kill_marker",
                {},
                ALICE,
                timeout_seconds=0,
                on_interrupt=handed.append,
            )
        except QExportError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while _running(generic_maria, "slept_kill_marker") == 0:
        assert time.monotonic() < deadline, "the statement never started"
        time.sleep(0.05)
    handed[0]()
    thread.join(15)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert "interrupted" in str(errors[0])
    assert not isinstance(errors[0], QueryTimeoutError)
    assert _running(generic_maria, "slept_kill_marker") == 0


def test_bad_sql_is_query_invalid(generic_maria_source: GenericSource) -> None:
    """The server's own words for a missing table or a syntax error."""
    with pytest.raises(QueryInvalidError, match="doesn't exist"):
        _table(generic_maria_source, "SELECT * FROM nope")
    with pytest.raises(QueryInvalidError, match="SQL syntax"):
        _table(generic_maria_source, "SELECT id FROM people WHERE")


def test_a_refused_login_names_the_source_never_the_password(generic_maria: MariaDBServer) -> None:
    """A wrong password: access_lost at once (not retried), naming the source, as for every
    source; no server at the address: source_unavailable. The password appears nowhere."""
    wrong = from_url("maria", generic_maria.url(password=WRONG_PASSWORD, scheme=SCHEME), Settings())
    with pytest.raises(SourceLoginError, match="'maria' refused qexport's login") as refused:
        wrong.describe("SELECT 1", {}, ALICE, timeout_seconds=5)
    assert refused.value.code is FailureCode.ACCESS_LOST
    assert "s3cret" not in str(refused.value)
    gone = from_url(
        "gone", f"{SCHEME}://reader:{READER_PASSWORD.replace(' ', '%20')}@127.0.0.1:1/x", Settings()
    )
    with pytest.raises(SourceUnavailableError, match="'gone'") as caught:
        gone.describe("SELECT 1", {}, ALICE, timeout_seconds=5)
    assert READER_PASSWORD not in str(caught.value)
    assert READER_PASSWORD not in repr(gone)


def test_describe_and_preview(generic_maria_source: GenericSource) -> None:
    """Describe gives MariaDB's type names without a row; preview the first rows, cut."""
    columns = generic_maria_source.describe(
        "SELECT price, stamped, word FROM types", {}, ALICE, timeout_seconds=5
    )
    assert [(c.name, c.type) for c in columns] == [
        ("price", "DECIMAL(12,2)"),
        ("stamped", "TIMESTAMP"),
        ("word", "VARCHAR"),
    ]
    shown = generic_maria_source.preview(
        "SELECT id, word FROM types ORDER BY id",
        {},
        ALICE,
        timeout_seconds=5,
        max_rows=1,
        max_cell_chars=3,
        max_bytes=10_000,
    )
    assert shown.table.to_pylist() == [{"id": 1, "word": "grüß"}]
    assert shown.more


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_mariadb_query_exports_through_the_worker(
    generic_maria: MariaDBServer, tmp_path: Path, fmt: str
) -> None:
    """A worker exports a generic MariaDB source built from its URL."""
    generic_maria_source = bootstrap.source_from_url(
        "maria", generic_maria.url(scheme=SCHEME), Settings()
    )
    store = InMemoryMetadataStore()
    sql = "SELECT id, price, word FROM types WHERE id = 1"
    store.add_query(Query(str(uuid.uuid4()), "w1", "typed", sql, "maria"))
    deps = container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"maria": generic_maria_source}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path / "data"),
    )
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "typed", by_name=True), fmt),
    )
    Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    assert final.status is Status.SUCCEEDED, final.failure_detail
    with deps.objects.open(record.storage_key) as body:
        data = body.read()
    if fmt == "csv":
        assert data.decode().splitlines()[1] == '1,1234567890.12,"grüße 😀"'
    else:
        assert pq.read_table(io.BytesIO(data)).to_pylist() == [
            {"id": 1, "price": Decimal("1234567890.12"), "word": "grüße 😀"}
        ]
