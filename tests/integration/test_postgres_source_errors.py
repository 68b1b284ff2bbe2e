"""How the PostgreSQL source fails: unreachable server, refused login, a connection killed
mid-export, rejected queries; each with its code and a detail that holds no secret."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from qexport.bootstrap import source_from_url
from qexport.config import Settings
from qexport.domain.failures import (
    FailureCode,
    QExportError,
    QueryInvalidError,
    SourceLoginError,
    SourceUnavailableError,
)
from qexport.sources.postgres.source import PostgresSource
from tests.integration.test_postgres_source import (
    ALICE,
    Database,
    MemorySink,
    csv_of,
    database,
    rows_of,
    url_for,
)

__all__ = ["database"]  # the module's fixture, shared with test_postgres_source

PASSWORD = "S3cret-Pa55word"  # noqa: S105 - a made-up password, to show it never leaks


def _copy(source: PostgresSource, sql: str) -> int:
    return source.copy(
        sql,
        {},
        ALICE,
        fmt="csv",
        neutralize_formulas=True,
        sink=MemorySink(),
        timeout_seconds=0,
        max_rows=10,
    )


@pytest.mark.parametrize("run", [rows_of, csv_of])
def test_an_unreachable_server_is_source_unavailable(database: Database, run: Any) -> None:
    """Nothing listens on port 1: source_unavailable, which the worker retries with backoff."""
    url = url_for(database.url, port="1", password=PASSWORD)
    with pytest.raises(SourceUnavailableError) as caught:
        run(PostgresSource("warehouse", url), "SELECT 1")
    assert caught.value.code.retryable
    assert caught.value.detail.startswith("PostgreSQL source 'warehouse' cannot be reached:")
    assert "connection refused" in caught.value.detail
    assert PASSWORD not in caught.value.detail
    assert str(sa.make_url(url).host) not in caught.value.detail


@pytest.mark.parametrize(
    ("part", "value", "reason"),
    [
        ("username", "nobody_at_all", 'role "nobody_at_all" does not exist'),
        ("database", "no_such_database", 'database "no_such_database" does not exist'),
    ],
)
def test_a_refused_login_is_a_clear_permanent_error(
    database: Database, part: str, value: str, reason: str
) -> None:
    """The server is there but refuses the URL's role or database (the test server trusts
    every password, so an unknown role or database stands in for a wrong password): not
    retried (access_lost), and the detail says the login failed and why, never the password
    or the URL."""
    url = url_for(database.url, **{part: value}, password=PASSWORD)
    with pytest.raises(SourceLoginError) as caught:
        rows_of(PostgresSource("warehouse", url), "SELECT 1")
    error = caught.value
    assert error.code is FailureCode.ACCESS_LOST
    assert not error.code.retryable
    assert error.detail.startswith("PostgreSQL source 'warehouse' refused qexport's login")
    assert "authentication failed" in error.detail
    assert reason in error.detail
    assert "check the user, password and database in the source URL" in error.detail
    assert PASSWORD not in error.detail
    assert url not in error.detail
    host, port = sa.make_url(url).host, sa.make_url(url).port
    assert f'"{host}", port {port}' not in error.detail  # where the server is: the log's
    assert str(host) not in error.detail


def test_a_connection_killed_mid_export_is_source_unavailable(database: Database) -> None:
    """An administrator terminates the session while the statement runs: source_unavailable,
    so that another attempt runs the export again."""
    source = database.source()

    def terminate_when_running() -> None:
        while not database.scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND state = 'active'"
            " AND query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()"
        ):
            time.sleep(0.05)

    killer = threading.Thread(target=terminate_when_running, daemon=True)
    killer.start()
    with pytest.raises(SourceUnavailableError) as caught:
        _copy(source, "SELECT pg_sleep(600)")
    killer.join()
    assert "PostgreSQL source 'warehouse'" in caught.value.detail


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT 1 + * 2", 'syntax error at or near "*"'),
        ("SELECT nope FROM docs", 'column "nope" does not exist'),
        ("SELECT * FROM missing_table", 'relation "missing_table" does not exist'),
        ("SELECT * FROM secrets", "permission denied for table secrets"),
        ("SELECT 1 / 0", "division by zero"),
        ("SELECT", "the query returns no columns"),
    ],
)
def test_rejected_queries_are_query_invalid(database: Database, sql: str, message: str) -> None:
    """The server's reason, as it gives it, for query_invalid (not retried)."""
    for run in (rows_of, csv_of):
        with pytest.raises(QueryInvalidError) as caught:
            run(database.source(), sql)
        assert message in caught.value.detail


def test_values_in_errors_stay_out_of_the_detail(database: Database) -> None:
    """A conversion error names the problem but not the value from the row."""
    sql = "SELECT body::int FROM docs"
    with pytest.raises(QueryInvalidError) as caught:
        rows_of(database.source(), sql)
    assert "invalid input syntax for type integer" in caught.value.detail
    assert "alice" not in caught.value.detail


def test_an_invalid_url_is_refused_at_start_up_without_its_password() -> None:
    """A malformed URL fails when the source is configured, and the message hides secrets."""
    url = f"postgresql://reader:{PASSWORD}@localhost:5432/db?nonsense_option=1"
    with pytest.raises(ValueError, match="invalid PostgreSQL URL for source 'warehouse'") as caught:
        PostgresSource("warehouse", url)
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls_configure_a_postgres_source(scheme: str) -> None:
    """QEXPORT_SOURCE_<NAME>=postgresql://... (or postgres://) is a PostgreSQL source; its
    repr does not show the URL."""
    source = source_from_url("warehouse", f"{scheme}://reader:{PASSWORD}@db/sales", Settings())
    assert isinstance(source, PostgresSource)
    assert source.name == "warehouse"
    assert PASSWORD not in repr(source)


def test_an_unknown_scheme_is_refused_without_echoing_the_url() -> None:
    """A typo in the scheme names the scheme, not the URL and its password."""
    with pytest.raises(ValueError, match="unsupported source URL scheme 'postgresq'") as caught:
        source_from_url("warehouse", f"postgresq://reader:{PASSWORD}@db/sales", Settings())
    assert PASSWORD not in str(caught.value)


def test_an_interrupt_before_the_statement_starts_stops_it(database: Database) -> None:
    """Stopped while still connecting: nothing runs, and the call says it was interrupted."""

    def stop_at_once(stop: Any) -> None:
        stop()

    with pytest.raises(QExportError, match="interrupted"):
        database.source().copy(
            "SELECT 1",
            {},
            ALICE,
            fmt="csv",
            neutralize_formulas=True,
            sink=MemorySink(),
            timeout_seconds=30,
            max_rows=10,
            on_interrupt=stop_at_once,
        )
    assert (
        database.scalar(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'qexport'"
        )
        == 0
    )
