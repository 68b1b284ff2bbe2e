"""The native MySQL/MariaDB source (`mysql://`, `mariadb://`) on a real MariaDB server: exact
types, zero dates as NULL, bound parameters and the requester context, a read-only
transaction, statements refused before the server, the timeout, KILL QUERY, errors that name
the source but never the password, describe, preview and the login's grants."""

from __future__ import annotations

import threading
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from qexport import bootstrap
from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.domain.failures import (
    FailureCode,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
)
from qexport.sources.mysql import from_url
from qexport.sources.postgres.role import SourceRefusedError
from tests.support.mariadb import (
    ADMIN,
    ADMIN_PASSWORD,
    READER_PASSWORD,
    MariaDBServer,
    mariadb_server,
    require_mysqlclient,
)

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

require_mysqlclient()  # skips this module without the driver (fails in CI)

from qexport.sources.mysql.source import BATCH_BYTES, MySQLSource  # noqa: E402 - needs mysqlclient, checked above

ALICE = Requester("u-alice", "w1")
WRONG_PASSWORD = "Wrong s3cret"  # noqa: S105 - a password the server refuses


@pytest.fixture(scope="module")
def native_maria(mariadb_server: MariaDBServer) -> MariaDBServer:
    """The server, with what these tests add: an instant written from another time zone, a
    function that writes (which a read-only transaction must refuse), a geometry."""
    db = mariadb_server.database
    mariadb_server.execute(
        f"USE {db}",
        "CREATE TABLE native_instants (id INT, at TIMESTAMP(3) NULL)",
        "SET time_zone = '+02:00'",
        "INSERT INTO native_instants VALUES (1, '2024-05-01 12:30:00.250')",
        "CREATE TABLE native_counter (n INT)",
        "CREATE FUNCTION native_bump() RETURNS INT MODIFIES SQL DATA"
        " BEGIN INSERT INTO native_counter VALUES (1); RETURN 1; END",
        "CREATE TABLE native_places (id INT, spot POINT)",
        "INSERT INTO native_places VALUES (1, POINT(1, 2))",
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
        "CREATE TABLE native_odd_dates (id INT, day DATE)",
        "INSERT INTO native_odd_dates VALUES (1, '2024-02-30'), (2, '2024-02-29')",
    )
    return mariadb_server


@pytest.fixture
def mysql_source(native_maria: MariaDBServer) -> MySQLSource:
    return from_url("maria", native_maria.url(), Settings())


def _table(
    source: MySQLSource,
    sql: str,
    parameters: dict[str, Any] | None = None,
    *,
    timeout_seconds: float = 30,
    **kwargs: Any,
) -> pa.Table:
    stream = source.execute(sql, parameters or {}, ALICE, timeout_seconds=timeout_seconds, **kwargs)
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


EXPECTED_TYPES = {
    "id": pa.int64(),
    "tiny": pa.int64(),
    "small": pa.int64(),
    "medium": pa.int64(),
    "regular": pa.int64(),
    "big": pa.int64(),
    "ubig": pa.uint64(),
    "price": pa.decimal128(12, 2),
    "exact": pa.decimal128(38, 10),
    "huge": pa.decimal256(50, 4),
    "ratio": pa.float64(),
    "approx": pa.float32(),
    "day": pa.date32(),
    "moment": pa.timestamp("us"),
    "stamped": pa.timestamp("us", tz="UTC"),
    "clock": pa.duration("us"),
    "yr": pa.int16(),
    "flags": pa.int64(),
    "flag": pa.int64(),
    "doc": pa.string(),
    "blobby": pa.binary(),
    "fixed": pa.binary(),
    "word": pa.string(),
    "body": pa.string(),
    "colour": pa.string(),
    "tags": pa.string(),
}


def test_every_type_is_exact_and_nulls_stay_null(mysql_source: MySQLSource) -> None:
    """Each MySQL type has one Arrow type from the result's metadata, and every value comes
    exactly: the widest integers, 50-digit decimals, microseconds, TIME past 24 h's range,
    BIT as a number, JSON as text, bytes as bytes, 4-byte UTF-8; the NULL row is all NULL."""
    table = _table(mysql_source, "SELECT * FROM types ORDER BY id")
    assert {f.name: f.type for f in table.schema} == EXPECTED_TYPES
    first, empty = table.to_pylist()
    stamped = first.pop("stamped")
    assert isinstance(stamped, datetime)
    assert stamped.tzinfo is not None
    assert first == {
        "id": 1,
        "tiny": -128,
        "small": 65535,
        "medium": -8388608,
        "regular": -2147483648,
        "big": -9223372036854775808,
        "ubig": 18446744073709551615,
        "price": Decimal("1234567890.12"),
        "exact": Decimal("1234567890123456789012345678.0123456789"),
        "huge": Decimal("1234567890123456789012345678901234567890123456.0001"),
        "ratio": 0.3,
        "approx": 0.5,
        "day": date(2024, 2, 29),
        "moment": datetime(2024, 2, 29, 23, 59, 59, 123456),
        "clock": timedelta(hours=23, minutes=59, seconds=59, milliseconds=999),
        "yr": 2024,
        "flags": 0b10101,
        "flag": 1,
        "doc": '{"a": [1, "two"]}',
        "blobby": b"\x00\xff\x10",
        "fixed": b"abc\x00",
        "word": "grüße 😀",
        "body": 'line1\nline2, "quoted"',
        "colour": "green",
        "tags": "a,b",
    }
    assert empty.pop("id") == 2
    assert set(empty.values()) == {None}


def test_a_negative_time_and_a_computed_decimal(mysql_source: MySQLSource) -> None:
    """TIME is a signed length of time up to 838 hours; a computed DECIMAL keeps its scale."""
    table = _table(
        mysql_source,
        "SELECT CAST('-838:59:59.5' AS TIME(1)) AS t, price * 2 AS doubled FROM types WHERE id = 1",
    )
    assert table.to_pylist() == [
        {
            "t": -timedelta(hours=838, minutes=59, seconds=59, milliseconds=500),
            "doubled": Decimal("2469135780.24"),
        }
    ]


def test_a_timestamp_is_the_same_instant_in_utc(mysql_source: MySQLSource) -> None:
    """A TIMESTAMP written at 12:30 in +02:00 is read as 10:30 UTC."""
    table = _table(mysql_source, "SELECT at FROM native_instants")
    assert table.column("at").to_pylist() == [datetime(2024, 5, 1, 10, 30, 0, 250000, tzinfo=UTC)]


def test_dates_no_calendar_has_are_null(mysql_source: MySQLSource) -> None:
    """0000-00-00, a zero month or day, and 2024-02-30 (ALLOW_INVALID_DATES) are NULL; the
    real dates of the same columns are kept."""
    table = _table(mysql_source, "SELECT id, day, moment, stamped FROM zero_dates ORDER BY id")
    assert table.to_pylist() == [
        {"id": 1, "day": None, "moment": None, "stamped": None},
        {"id": 2, "day": None, "moment": None, "stamped": None},
        {
            "id": 3,
            "day": date(2024, 1, 2),
            "moment": datetime(2024, 1, 2, 3, 4, 5),
            "stamped": table.column("stamped")[2].as_py(),
        },
    ]
    assert table.column("stamped")[2].as_py() is not None
    odd = _table(mysql_source, "SELECT day FROM native_odd_dates ORDER BY id")
    assert odd.column("day").to_pylist() == [None, date(2024, 2, 29)]


def test_a_type_with_no_exact_arrow_type_is_refused_naming_the_column(
    mysql_source: MySQLSource,
) -> None:
    """A GEOMETRY: query_invalid naming the column and how to convert it."""
    with pytest.raises(QueryInvalidError, match=r"'spot'.*ST_AsText"):
        _table(mysql_source, "SELECT spot FROM native_places")
    assert _table(
        mysql_source, "SELECT ST_AsText(spot) AS spot FROM native_places"
    ).to_pylist() == [{"spot": "POINT(1 2)"}]


def test_parameters_are_bound_never_sql(mysql_source: MySQLSource) -> None:
    """Values that look like SQL, with quotes and backslashes, are data; so are numbers."""
    for hostile in ("' OR 1=1 -- ", "\\' OR 1=1 -- ", "x' OR '1'='1"):
        table = _table(mysql_source, "SELECT name FROM people WHERE name = $n", {"n": hostile})
        assert table.num_rows == 0, hostile
    table = _table(
        mysql_source, "SELECT $n AS echoed, $k + 1 AS next", {"n": "' OR 1=1 --", "k": 41}
    )
    assert table.to_pylist() == [{"echoed": "' OR 1=1 --", "next": 42}]
    assert _table(mysql_source, "SELECT name FROM people LIMIT $n", {"n": 1}).num_rows == 1


def test_the_requester_is_bound_and_set_as_user_variables(mysql_source: MySQLSource) -> None:
    """$user_id and $workspace_id are bound values; @qexport_user_id and
    @qexport_workspace_id hold the same for views."""
    mine = _table(mysql_source, "SELECT name FROM people WHERE owner = $user_id")
    assert mine.to_pylist() == [{"name": "Ann"}]
    variables = _table(
        mysql_source, "SELECT @qexport_user_id AS u, @qexport_workspace_id AS w, $workspace_id AS p"
    )
    assert variables.to_pylist() == [{"u": "u-alice", "w": "w1", "p": "w1"}]


def test_mysql_strings_and_comments_are_read_as_mysql_reads_them(mysql_source: MySQLSource) -> None:
    """A backslash-escaped quote, a `#` comment and a backtick name hold no placeholder and
    end no statement."""
    table = _table(
        mysql_source,
        "SELECT 'O\\'Brien; $x' AS `odd;$name`, \"it\\\"s\" AS q # a comment; $y\n",
    )
    assert table.to_pylist() == [{"odd;$name": "O'Brien; $x", "q": 'it"s'}]


def test_the_transaction_is_read_only(native_maria: MariaDBServer) -> None:
    """Even a login that may write (the admin, allowed) cannot: a function that inserts,
    called from a CTE, is refused by the READ ONLY transaction, and nothing was written."""
    admin = from_url(
        "admin", native_maria.url(ADMIN, ADMIN_PASSWORD), Settings(), allow_privileged_role=True
    )
    with pytest.raises(QueryInvalidError, match="READ ONLY"):
        _table(admin, "WITH x AS (SELECT native_bump() AS b) SELECT * FROM x")
    assert native_maria.execute(f"SELECT count(*) FROM {native_maria.database}.native_counter") == [
        (0,)
    ]


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("DELETE FROM people /* refused_marker */", "got DELETE"),
        ("SELECT 1 /* refused_marker */; DELETE FROM people", "2 statements"),
        ("SELECT 1 /*! refused_marker */", "executable comments"),
        ("SHOW TABLES /* refused_marker */", "got SHOW"),
    ],
)
def test_anything_but_one_query_is_refused_before_the_server(
    native_maria: MariaDBServer, sql: str, refusal: str
) -> None:
    """The server's general log never sees a refused statement (a sent one is there)."""
    admin = from_url(
        "admin", native_maria.url(ADMIN, ADMIN_PASSWORD), Settings(), allow_privileged_role=True
    )
    native_maria.execute(
        "TRUNCATE mysql.general_log",
        "SET GLOBAL log_output = 'TABLE'",
        "SET GLOBAL general_log = 1",
    )
    try:
        with pytest.raises(QueryInvalidError, match=refusal):
            _table(admin, sql)
        _table(admin, "SELECT 1 AS sent_marker")
        logged = native_maria.execute("SELECT argument FROM mysql.general_log")
    finally:
        native_maria.execute("SET GLOBAL general_log = 0")
    texts = [str(row[0]) for row in logged]
    assert any("sent_marker" in text for text in texts)
    assert not any("refused_marker" in text for text in texts)
    assert native_maria.execute(f"SELECT count(*) FROM {native_maria.database}.people") == [(2,)]


def test_the_server_stops_a_statement_at_the_timeout(
    mysql_source: MySQLSource, native_maria: MariaDBServer
) -> None:
    """max_statement_time ends it on the server: query_timeout, and it no longer runs."""
    with pytest.raises(QueryTimeoutError, match="1 s") as caught:
        _table(mysql_source, "SELECT SLEEP(30) AS native_timeout_marker", timeout_seconds=1)
    assert caught.value.code is FailureCode.QUERY_TIMEOUT
    assert _running(native_maria, "native_timeout_marker") == 0


def test_on_interrupt_kills_the_query_on_the_server(
    mysql_source: MySQLSource, native_maria: MariaDBServer
) -> None:
    """The interrupt handed out before the statement starts runs KILL QUERY: the statement
    ends on the server at once, failed as interrupted (not as a timeout)."""
    handed: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _table(
                mysql_source, "SELECT SLEEP(60) AS native_kill_marker", on_interrupt=handed.append
            )
        except QExportError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while _running(native_maria, "native_kill_marker") == 0:
        assert time.monotonic() < deadline, "the statement never started"
        time.sleep(0.05)
    handed[0]()
    thread.join(15)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert "interrupted" in str(errors[0])
    assert not isinstance(errors[0], QueryTimeoutError)
    assert _running(native_maria, "native_kill_marker") == 0


def test_bad_sql_is_query_invalid(mysql_source: MySQLSource) -> None:
    """The server's own words for a missing table, a syntax error, a table not granted."""
    with pytest.raises(QueryInvalidError, match="doesn't exist"):
        _table(mysql_source, "SELECT * FROM nope")
    with pytest.raises(QueryInvalidError, match="SQL syntax"):
        _table(mysql_source, "SELECT id FROM people WHERE")
    with pytest.raises(QueryInvalidError, match="denied"):
        _table(mysql_source, "SELECT * FROM mysql.user")


def test_a_refused_login_names_the_source_never_the_password(native_maria: MariaDBServer) -> None:
    """A wrong password: access_lost (as PostgreSQL's refused login), naming the source and
    the user, never the password."""
    wrong = from_url("maria", native_maria.url(password=WRONG_PASSWORD), Settings())
    with pytest.raises(QExportError, match=r"'maria' refused qexport's login") as caught:
        wrong.describe("SELECT 1", {}, ALICE, timeout_seconds=5)
    assert caught.value.code is FailureCode.ACCESS_LOST
    assert "Access denied for user 'reader'" in str(caught.value)
    assert "'reader'@" not in str(caught.value)  # the address qexport came from: the log's
    assert "s3cret" not in str(caught.value)
    assert WRONG_PASSWORD not in repr(wrong)


def test_no_server_at_the_address_is_source_unavailable_at_once() -> None:
    """Nothing listens on the port: source_unavailable (retried later), naming the source
    and not the password."""
    gone = from_url(
        "gone", f"mysql://reader:{READER_PASSWORD.replace(' ', '%20')}@127.0.0.1:1/x", Settings()
    )
    with pytest.raises(SourceUnavailableError, match="'gone' cannot be reached") as caught:
        gone.describe("SELECT 1", {}, ALICE, timeout_seconds=5)
    assert READER_PASSWORD not in str(caught.value)
    assert "127.0.0.1" not in str(caught.value)


def test_describe_gives_the_types_without_reading_a_row(mysql_source: MySQLSource) -> None:
    """MySQL's type names, precision and signedness; no row read (a LIMIT of the query's own
    included)."""
    columns = mysql_source.describe(
        "SELECT price, ubig, stamped, word, blobby, fixed, flags FROM types LIMIT 1",
        {},
        ALICE,
        timeout_seconds=5,
    )
    assert [(c.name, c.type) for c in columns] == [
        ("price", "DECIMAL(12,2)"),
        ("ubig", "BIGINT UNSIGNED"),
        ("stamped", "TIMESTAMP"),
        ("word", "VARCHAR"),
        ("blobby", "BLOB"),
        ("fixed", "BINARY"),
        ("flags", "BIT(5)"),
    ]
    with pytest.raises(QueryInvalidError, match="'spot'"):
        mysql_source.describe("SELECT spot FROM native_places", {}, ALICE, timeout_seconds=5)


def test_preview_gives_the_first_rows_in_the_querys_order_cut(mysql_source: MySQLSource) -> None:
    """The first rows as the query orders them, long texts cut, and whether more follow."""
    shown = mysql_source.preview(
        "SELECT id, word FROM types ORDER BY id DESC",
        {},
        ALICE,
        timeout_seconds=5,
        max_rows=1,
        max_cell_chars=3,
        max_bytes=10_000,
    )
    assert shown.table.to_pylist() == [{"id": 2, "word": None}]
    assert shown.more
    assert [(c.name, c.type) for c in shown.columns] == [("id", "INT"), ("word", "VARCHAR")]
    first = mysql_source.preview(
        "SELECT word FROM types ORDER BY id",
        {},
        ALICE,
        timeout_seconds=5,
        max_rows=5,
        max_cell_chars=3,
        max_bytes=10_000,
    )
    assert first.table.to_pylist() == [{"word": "grüß"}, {"word": None}]
    assert not first.more


def test_check_role_refuses_a_privileged_login_and_accepts_a_reader(
    native_maria: MariaDBServer,
) -> None:
    """The admin (ALL PRIVILEGES ON *.*, WITH GRANT OPTION) is refused naming what it may do,
    unless allowed, which returns the findings; the reader (SELECT on its database) passes."""
    admin_url = native_maria.url(ADMIN, ADMIN_PASSWORD)
    with pytest.raises(SourceRefusedError, match=r"'admin' has ALL PRIVILEGES on \*\.\*"):
        from_url("admin", admin_url, Settings()).check_role()
    allowed = from_url("admin", admin_url, Settings(), allow_privileged_role=True).check_role()
    assert any("GRANT OPTION" in finding for finding in allowed)
    assert from_url("maria", native_maria.url(), Settings()).check_role() == []
    with pytest.raises(SourceRefusedError):  # and a worker's first export judges it too
        _table(from_url("admin", admin_url, Settings()), "SELECT 1 AS one")


def test_the_urls_of_both_schemes_make_this_source(native_maria: MariaDBServer) -> None:
    """mysql:// and mariadb:// are the same source, built through the source boundary."""
    for scheme in ("mysql", "mariadb"):
        built = bootstrap.source_from_url("maria", native_maria.url(scheme=scheme), Settings())
        assert isinstance(built, MySQLSource)
        assert _table(built, "SELECT 1 AS one").to_pylist() == [{"one": 1}]
    with pytest.raises(ValueError, match="'nope' is not known") as caught:
        from_url("bad", native_maria.url() + "?nope=1", Settings())
    assert READER_PASSWORD not in str(caught.value)


def test_wide_values_come_in_batches_bounded_by_bytes(mysql_source: MySQLSource) -> None:
    """300 values of 200 KB (60 MB): every row arrives, in batches of at most about 32 MiB."""
    stream = mysql_source.execute(
        "SELECT seq, REPEAT('x', 200000) AS big FROM seq_1_to_300", {}, ALICE, timeout_seconds=30
    )
    try:
        batches = list(stream)
    finally:
        stream.close()
    assert sum(b.num_rows for b in batches) == 300
    assert len(batches) > 1
    assert max(b.nbytes for b in batches) <= BATCH_BYTES + 200_000 * 8
    assert {len(v) for b in batches for v in b.column("big").to_pylist()} == {200_000}


def test_preview_stops_at_its_byte_bound(mysql_source: MySQLSource) -> None:
    """Values past `max_bytes`: fewer rows than asked, and `more` says reading stopped."""
    shown = mysql_source.preview(
        "SELECT seq, REPEAT('y', 50000) AS big FROM seq_1_to_100",
        {},
        ALICE,
        timeout_seconds=5,
        max_rows=50,
        max_cell_chars=10,
        max_bytes=200_000,
    )
    assert 0 < shown.table.num_rows < 50
    assert shown.more
    assert {len(v) for v in shown.table.column("big").to_pylist()} == {11}
