"""What members read of a source's failure, from each library's real wording: what is wrong
and what to do, never where the source is (paths, hosts, addresses, ports, process ids); and
the operator's log line that keeps the library's whole reason, with the source's name."""

from __future__ import annotations

from typing import Any

import duckdb
import grpc
import psycopg
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from qexport.domain.failures import (
    FailureCode,
    QExportError,
    SourceLoginError,
    SourceUnavailableError,
)
from qexport.sources.duckdb import errors as duckdb_errors
from qexport.sources.generic import errors as generic_errors
from qexport.sources.generic.dialects import Rules
from qexport.sources.postgres import errors as postgres_errors
from qexport.sources.spark import errors as spark_errors
from qexport.sources.withheld import without_layout
from tests.support.mariadb import require_mysqlclient

PASSWORD = "pw-never-shown"  # noqa: S105 - a made-up password, to show it never leaks
LOCKED = (
    'IO Error: Could not set lock on file "/srv/data/shop.duckdb": Conflicting lock is held in'
    " /root/.pyenv/versions/3.11.7/bin/python3.11 (PID 23243). See also"
    " https://duckdb.org/docs/current/connect/concurrency"
)
REFUSED = (
    'connection failed: connection to server at "10.0.0.5", port 5439 failed: Connection'
    " refused\n\tIs the server running on that host and accepting TCP/IP connections?"
)
NO_HBA = (
    'connection failed: connection to server at "db.internal" (10.0.0.5), port 5439 failed:'
    ' FATAL:  no pg_hba.conf entry for host "10.0.0.7", user "reader", database "sales", no'
    " encryption"
)
PIPE = "/srv/scratch/qexport-x1/pipes/ab12.csv"  # a source's own named pipe
GRPC_REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:15002: Failed to"
    " connect to remote host: Connection refused"
)


@pytest.mark.parametrize(
    ("said", "gone", "kept"),
    [
        (LOCKED, ["/srv/data", "/root/.pyenv", "python3.11", "23243", "PID"], ["Conflicting"]),
        (REFUSED, ["10.0.0.5", "5439"], ["Connection refused"]),
        (NO_HBA, ["db.internal", "10.0.0.5", "10.0.0.7", "5439"], ['user "reader"']),
        (
            "Access denied for user 'reader'@'10.0.0.7' (using password: YES)",
            ["10.0.0.7", "@"],
            ["Access denied for user 'reader'"],
        ),
        (GRPC_REFUSED, ["10.0.0.5", "15002"], ["Connection refused"]),
        (
            'could not translate host name "db.internal" to address: Name or service not known',
            ["db.internal"],
            ["Name or service not known"],
        ),
        (
            'connection to server at "fe80::1%eth0", port 5432 failed: timeout expired',
            ["fe80::1", "eth0", "5432"],
            ["timeout expired"],
        ),
        (
            "Can't connect to local server through socket '/run/mysqld/mysqld.sock' (2)",
            ["/run/mysqld", "mysqld.sock"],
            ["through socket"],
        ),
        (
            "HTTPConnectionPool: http://trino.internal:8080/v1/statement refused",
            ["trino.internal", "8080"],
            ["refused"],
        ),
    ],
)
def test_the_place_is_taken_out_of_a_library_message(
    said: str, gone: list[str], kept: list[str]
) -> None:
    """Paths, host names, IPv4 and IPv6 addresses, ports, sockets, PIDs and a MySQL
    account's host are replaced; the words saying what happened stay."""
    told = without_layout(said)
    for part in gone:
        assert part not in told, (part, told)
    for part in kept:
        assert part in told, (part, told)


def _in_lake(path: str) -> bool:
    return path.startswith("/data/lake/")


def test_ordinary_words_and_a_lake_path_stay() -> None:
    """A path of the source's lake is its queries' to read and stays (a missing file the
    query named); any other goes; read/write, a time of day or a version are no place."""
    said = 'IO Error: No files found that match the pattern "/data/lake/2024-*.csv"'
    assert without_layout(said, shown=_in_lake) == said
    assert "/data/lake" not in without_layout(said)
    elsewhere = 'IO Error: Could not read file "/srv/shop.duckdb" or /srv/other.duckdb'
    assert "/srv" not in without_layout(elsewhere, shown=_in_lake)
    plain = "read/write at 12:30:45 with 1/2 of DuckDB 1.2.3 and /"
    assert without_layout(plain) == plain


def _psycopg(message: str) -> psycopg.OperationalError:
    return psycopg.OperationalError(message)


def _sqlalchemy(message: str) -> sa.exc.OperationalError:
    return sa.exc.OperationalError("SELECT 1", {}, Exception(message))


class _Unreachable(grpc.RpcError):
    """A bare gRPC error, as the channel raises it when nothing answers."""

    def __init__(self, details: str) -> None:
        self._details = details

    def details(self) -> str:
        return self._details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


def _mysql_connect_error(number: int, message: str) -> QExportError:
    """The MySQL source's translation of mysqlclient's error; skipped without mysqlclient (a
    build that needs libmariadb-dev), failed in CI."""
    require_mysqlclient()
    import MySQLdb

    from qexport.sources.mysql import errors as mysql_errors

    return mysql_errors.connect_error(
        "maria", MySQLdb.OperationalError(number, message), [PASSWORD]
    )


# (kind, fail, error, told, where); a pytest.param, marked, for a case that needs mysqlclient
CASES: list[Any] = [
    (
        "duckdb",
        lambda: duckdb_errors.connect_error("shop", duckdb.IOException(LOCKED)),
        SourceUnavailableError,
        "DuckDB source 'shop' cannot be opened: another process holds its file",
        ["/srv/data/shop.duckdb", "PID 23243", "/root/.pyenv"],
    ),
    (
        "duckdb",
        lambda: duckdb_errors.connect_error(
            "shop",
            duckdb.IOException(
                'IO Error: Cannot open database "/srv/data/shop.duckdb" in read-only mode:'
                " database does not exist"
            ),
        ),
        SourceUnavailableError,
        "DuckDB source 'shop' cannot be opened: its file does not exist; ask the operator",
        ["/srv/data/shop.duckdb"],
    ),
    (
        "duckdb",
        lambda: duckdb_errors.connect_error(
            "shop_b",
            duckdb_errors.FileAlreadyOpenError(
                "the file /srv/data/shop.duckdb is already open in this process through"
                " another source"
            ),
        ),
        SourceUnavailableError,
        "its file is already open in this process through another source",
        ["/srv/data/shop.duckdb"],
    ),
    (
        "postgresql",
        lambda: postgres_errors.connect_error("pg", _psycopg(REFUSED), [PASSWORD]),
        SourceUnavailableError,
        "PostgreSQL source 'pg' cannot be reached: connection refused; if that lasts, ask the"
        " operator",
        ['"10.0.0.5", port 5439'],
    ),
    (
        "postgresql",
        lambda: postgres_errors.connect_error("pg", _psycopg(NO_HBA), [PASSWORD]),
        SourceLoginError,
        "PostgreSQL source 'pg' refused qexport's login (authentication failed: no pg_hba.conf"
        ' entry for host …, user "reader", database "sales"',
        ["db.internal", "10.0.0.7", "port 5439"],
    ),
    (
        "postgresql",
        lambda: postgres_errors.connect_error(
            "pg",
            _psycopg("failed to resolve host 'db.internal': [Errno -2] Name or service not known"),
            [PASSWORD],
        ),
        SourceUnavailableError,
        "PostgreSQL source 'pg' cannot be reached: its server's name does not resolve",
        ["db.internal"],
    ),
    pytest.param(
        "mysql",
        lambda: _mysql_connect_error(2002, "Can't connect to server on '10.0.0.5' (115)"),
        SourceUnavailableError,
        "MySQL source 'maria' cannot be reached: connection refused",
        ["'10.0.0.5'"],
        marks=pytest.mark.mysql,
    ),
    pytest.param(
        "mysql",
        lambda: _mysql_connect_error(
            1045, f"Access denied for user 'reader'@'10.0.0.7' (using password: {PASSWORD})"
        ),
        SourceLoginError,
        "MySQL source 'maria' refused qexport's login (Access denied for user 'reader'"
        " (using password: ***))",
        ["'reader'@'10.0.0.7'"],
        marks=pytest.mark.mysql,
    ),
    (
        "sqlalchemy",
        lambda: generic_errors.connect_error(
            "warehouse",
            _sqlalchemy("(2003, \"Can't connect to MySQL server on 'db.internal:3306' (111)\")"),
            Rules(),
            [PASSWORD],
        ),
        SourceUnavailableError,
        "the data source 'warehouse' cannot be reached: connection refused",
        ["db.internal:3306"],
    ),
    (
        "spark",
        lambda: spark_errors.unreachable("lakehouse", _Unreachable(GRPC_REFUSED)),
        SourceUnavailableError,
        "the data source 'lakehouse' cannot be reached: connection refused",
        ["ipv4:10.0.0.5:15002"],
    ),
]


@pytest.mark.parametrize(("kind", "fail", "error", "told", "where"), CASES)
def test_a_source_that_cannot_be_opened_says_what_and_logs_where(
    kind: str, fail: Any, error: type[QExportError], told: str, where: list[str]
) -> None:
    """Each kind of source: its members read what is wrong (the code kept: retried when it
    is an outage, access_lost for a refused login) and whom to ask, without the place; the
    log's `source_connect_failed` names the source and has the library's words whole (the
    place among them), never the password."""
    with capture_logs() as logs:
        failure = fail()
    assert type(failure) is error
    assert failure.code is (
        FailureCode.ACCESS_LOST if error is SourceLoginError else FailureCode.SOURCE_UNAVAILABLE
    )
    assert told in failure.detail
    for part in (*where, "10.0.0.", "PID", PASSWORD):
        assert part not in failure.detail, (part, failure.detail)
    [line] = [entry for entry in logs if entry["event"] == "source_connect_failed"]
    assert line["log_level"] == "warning"
    assert line["kind"] == kind
    assert f"source {line['source']!r}" in failure.detail
    for part in where:
        assert part in line["reason"], (part, line["reason"])
    assert PASSWORD not in line["reason"]


def test_a_file_duckdb_fails_on_mid_query_is_named_only_in_the_lake() -> None:
    """An IO error while the statement runs: the source's own files (its pipes, its spill)
    are not named to members, even when the query writes the path out, and the log has them,
    with the source; a lake file is named, and nothing is logged for it."""
    pipe = duckdb.IOException(f'IO Error: Could not write file "{PIPE}": Broken pipe')
    with capture_logs() as logs:
        failure = duckdb_errors.translate_error(
            pipe,
            timed_out=False,
            timeout_seconds=30,
            sql=f"SELECT '{PIPE}' AS guessed",
            source="shop",
            shown=_in_lake,
        )
    assert isinstance(failure, SourceUnavailableError)
    assert "qexport-x1" not in failure.detail
    assert "Broken pipe" in failure.detail
    [line] = logs
    assert (line["event"], line["source"]) == ("source_failed", "shop")
    assert PIPE in line["reason"]

    missing = duckdb.IOException(
        'IO Error: No files found that match the pattern "/data/lake/2024-*.csv"'
    )
    sql = "SELECT * FROM read_csv('/data/lake/2024-*.csv')"
    with capture_logs() as logs:
        failure = duckdb_errors.translate_error(
            missing, timed_out=False, timeout_seconds=30, sql=sql, source="shop", shown=_in_lake
        )
    assert '"/data/lake/2024-*.csv"' in failure.detail
    assert logs == []
