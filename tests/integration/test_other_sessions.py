"""Queries that read other sessions' statements are refused, on a real PostgreSQL and a real
MariaDB. Every export of a source runs on its one login, with its parameter values written
into the statement; the login sees its own other sessions' statements with no privilege (the
first test of each server shows it), so a member could read another's SQL and values. The
refusal is query_invalid, when a query is saved (described and planned), previewed and run,
on the PostgreSQL and MySQL sources and on the generic SQLAlchemy one over those servers."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import Requester, Status
from qexport.domain.failures import FailureCode, QueryInvalidError
from qexport.domain.queries import Query
from qexport.ports import Source
from qexport.services.requests import record_request
from qexport.sources.generic.source import GenericSource, engine_for
from qexport.sources.postgres.source import PostgresSource
from qexport.worker.loop import Worker
from tests.fakes import FixedSources, InMemoryMetadataStore, InMemoryObjectStore
from tests.support.containers import container_of
from tests.support.mariadb import MariaDBServer, mariadb_server
from tests.support.pg import server_url

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

ALICE = Requester("alice", "w1")
VICTIM_VALUE = "victim-secret@corp.test"
_SEEN_WITHIN_SECONDS = 30


class _Sink:
    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        return len(data)


def _every_path(source: Source) -> list[Callable[[str], Any]]:
    """What saving (describe, plan), previewing and running (execute, copy) a query asks of
    its source, as calls of the SQL alone."""
    paths: list[Callable[[str], Any]] = [
        lambda sql: source.describe(sql, {}, ALICE, timeout_seconds=10),
        lambda sql: source.relations(sql, {}, ALICE, timeout_seconds=10),
        lambda sql: source.preview(
            sql,
            {},
            ALICE,
            timeout_seconds=10,
            max_rows=10,
            max_cell_chars=100,
            max_bytes=10_000,
        ),
        lambda sql: source.execute(sql, {}, ALICE, timeout_seconds=10).close(),
    ]
    if isinstance(source, PostgresSource):
        paths.append(
            lambda sql: source.copy(
                sql,
                {},
                ALICE,
                fmt="csv",
                neutralize_formulas=True,
                sink=_Sink(),
                timeout_seconds=10,
                max_rows=10,
            )
        )
    return paths


def _refused_everywhere(source: Source, sql: str, name: str) -> None:
    for path in _every_path(source):
        with pytest.raises(QueryInvalidError, match=re.escape(f"may not read {name}")) as refused:
            path(sql)
        assert "other sessions' statements" in str(refused.value)


def _seen_by_another_session(watch: Callable[[], bool], run: Callable[[], None]) -> bool:
    """Whether `watch` (another session of the same login) sees the statement `run` is
    running, polled until it does or `run` ends."""
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + _SEEN_WITHIN_SECONDS
    try:
        while thread.is_alive() and time.monotonic() < deadline:
            if watch():
                return True
            time.sleep(0.05)
        return False
    finally:
        thread.join()


# ---------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class Database:
    admin_url: str
    url: str  # the reader's


@pytest.fixture(scope="module")
def pg(pg_template: str) -> Iterator[Database]:
    """A database with orders, pg_stat_statements, and a view over pg_stat_activity that its
    owner granted, and a reader role (dropped after)."""
    del pg_template  # only for its check that a server is there (skip, or fail under CI)
    suffix = uuid.uuid4().hex[:10]
    name, role = f"qexport_sessions_{suffix}", f"qexport_sessions_{suffix}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    admin_url = sa.make_url(server_url()).set(database=name)
    reader = admin_url.set(username=role).render_as_string(hide_password=False)
    try:
        with psycopg.connect(admin_url.render_as_string(hide_password=False)) as conn:
            conn.execute(
                "CREATE TABLE orders (id int, total numeric);"
                " INSERT INTO orders VALUES (1, 10), (2, 20);"
                " CREATE EXTENSION IF NOT EXISTS pg_stat_statements;"
                " CREATE VIEW sessions AS SELECT pid, query FROM pg_stat_activity;"
                f' GRANT SELECT ON orders, sessions TO "{role}"'
            )
        yield Database(admin_url.render_as_string(hide_password=False), reader)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_postgresql_refuses_reading_pg_stat_activity_and_its_kin(pg: Database) -> None:
    """A session of the source's login sees another's statement and the value written into
    it; through the source, every way of naming pg_stat_activity, its functions or
    pg_stat_statements is refused on every path, naming it and where it is written."""

    def watch() -> bool:
        with psycopg.connect(pg.url, autocommit=True) as spy:
            rows = spy.execute(
                "SELECT query FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND query LIKE %s",
                [f"%{VICTIM_VALUE}%"],
            ).fetchall()
        return bool(rows)

    def run() -> None:
        with psycopg.connect(pg.url, autocommit=True) as victim:
            victim.execute(f"SELECT pg_sleep(3), '{VICTIM_VALUE}'::text")

    assert _seen_by_another_session(watch, run)

    source = PostgresSource("warehouse", pg.url)
    for sql, name in (
        ("SELECT query FROM pg_stat_activity", "pg_stat_activity"),
        ("SELECT s.query FROM PG_CATALOG.pg_stat_activity AS s", "pg_stat_activity"),
        ('SELECT query FROM "pg_stat_activity"', "pg_stat_activity"),
        ("SELECT query FROM pg_stat_get_activity(NULL)", "pg_stat_get_activity"),
        ("SELECT pg_stat_get_backend_activity(1) AS q", "pg_stat_get_backend_activity"),
        ("SELECT query FROM pg_stat_statements", "pg_stat_statements"),
        (
            "SELECT query_to_xml('SELECT query FROM pg_stat_activity', true, false, '') AS x",
            "pg_stat_activity",
        ),
    ):
        _refused_everywhere(source, sql, name)
    with pytest.raises(QueryInvalidError) as refused:
        source.describe("SELECT query\n  FROM pg_stat_activity", {}, ALICE, timeout_seconds=10)
    assert "(line 2, column 8)" in str(refused.value)


def test_postgresql_refuses_them_through_a_view_or_escapes_when_planned(pg: Database) -> None:
    """A view over pg_stat_activity, the views beside it and a name written with Unicode
    escapes do not name it in the text: the plan, asked when a query is saved, calls
    pg_stat_get_activity, and the statement is refused then."""
    source = PostgresSource("warehouse", pg.url)
    for sql in (
        "SELECT query FROM sessions",
        "SELECT * FROM pg_stat_ssl",
        'SELECT query FROM U&"pg_stat_\\0061ctivity"',
    ):
        with pytest.raises(QueryInvalidError, match="may not read pg_stat_get_activity"):
            source.relations(sql, {}, ALICE, timeout_seconds=10)


def test_postgresql_queries_that_only_mention_them_run(pg: Database) -> None:
    """A comment naming pg_stat_activity refuses nothing: the query is described, planned
    and exported."""
    source = PostgresSource("warehouse", pg.url)
    sql = "SELECT count(*) AS n FROM orders -- not from pg_stat_activity"
    assert [c.name for c in source.describe(sql, {}, ALICE, timeout_seconds=10)] == ["n"]
    assert source.relations(sql, {}, ALICE, timeout_seconds=10) is not None
    stream = source.execute(sql, {}, ALICE, timeout_seconds=10)
    try:
        assert [b.to_pylist() for b in stream] == [[{"n": 2}]]
    finally:
        stream.close()


def test_a_postgresql_export_that_reads_them_fails_query_invalid(
    pg: Database, tmp_path: Path
) -> None:
    """A query saved before the check (nothing planned it) is refused when the worker runs
    it: the export fails query_invalid, saying why, and nothing is stored."""
    store = InMemoryMetadataStore()
    store.add_query(
        Query(
            str(uuid.uuid4()), ALICE.workspace_id, "spy", "SELECT query FROM pg_stat_activity", "wh"
        )
    )
    deps = container_of(
        store=store,
        objects=InMemoryObjectStore(),
        sources=FixedSources({"wh": PostgresSource("wh", pg.url)}),
        clock=SystemClock(),
        settings=Settings(data_dir=tmp_path),
    )
    record = record_request(
        deps.exports,
        deps.catalog,
        deps.clock,
        ALICE,
        RequestExport(SubjectRef("query", "spy", by_name=True), "csv"),
    )
    Worker(deps, worker_id="w").run_once()
    final = deps.exports.get_export(record.id)
    assert final is not None
    assert (final.status, final.failure_code) == (Status.FAILED, FailureCode.QUERY_INVALID)
    assert "may not read pg_stat_activity" in (final.failure_detail or "")
    assert deps.objects.head(record.storage_key) is None


def test_the_generic_source_over_postgresql_refuses_them_too(pg: Database) -> None:
    """`sqlalchemy+postgresql+psycopg://` runs on the same login: the same refusal."""
    url = sa.make_url(pg.url).set(drivername="postgresql+psycopg")
    source = GenericSource("wh", engine_for("sqlalchemy+" + url.render_as_string(False)))
    _refused_everywhere(source, "SELECT query FROM pg_stat_activity", "pg_stat_activity")


# ---------------------------------------------------------------- MariaDB
# mysqlclient is imported only by the tests that run on MariaDB: without it they skip (the
# server fixture says why; CI fails instead) and the PostgreSQL tests above still run.


def _mysql_source(url: str) -> Source:
    from qexport.sources.mysql.source import MySQLSource

    return MySQLSource("crm", url)


@dataclass(frozen=True)
class Maria:
    server: MariaDBServer
    db: str
    login: str

    def url(self, database: str | None = None, scheme: str = "mysql") -> str:
        where = f"{self.server.host}:{self.server.port}/{database or self.db}"
        return f"{scheme}://{self.login}:pw@{where}"


@pytest.fixture(scope="module")
def maria(mariadb_server: MariaDBServer) -> Iterator[Maria]:
    """A database with orders and a view over PROCESSLIST (its definer's: root), and a login
    that may read and SHOW VIEW it (dropped after, with the database)."""
    suffix = uuid.uuid4().hex[:8]
    db, login = f"sessions_{suffix}", f"spy_{suffix}"
    mariadb_server.execute(
        f"CREATE DATABASE {db}",
        f"CREATE TABLE {db}.orders (id INT, total DECIMAL(10, 2))",
        f"INSERT INTO {db}.orders VALUES (1, 10), (2, 20)",
        f"CREATE VIEW {db}.sessions AS SELECT id, info FROM information_schema.PROCESSLIST",
        f"CREATE USER '{login}'@'%' IDENTIFIED BY 'pw'",
        f"GRANT SELECT, SHOW VIEW ON {db}.* TO '{login}'@'%'",
    )
    try:
        yield Maria(mariadb_server, db, login)
    finally:
        mariadb_server.execute(
            f"DROP USER IF EXISTS '{login}'@'%'", f"DROP DATABASE IF EXISTS {db}"
        )


def test_mariadb_refuses_reading_processlist_and_its_kin(maria: Maria) -> None:
    """A session of the source's login sees another's statement in PROCESSLIST, the value
    written into it included; through the source, the tables and views of other sessions'
    statements are refused on every path, however they are written."""
    import MySQLdb

    options = {
        "host": maria.server.host,
        "port": maria.server.port,
        "user": maria.login,
        "password": "pw",
        "database": maria.db,
    }

    def watch() -> bool:
        spy = MySQLdb.connect(**options)
        try:
            cursor = spy.cursor()
            cursor.execute("SELECT info FROM information_schema.PROCESSLIST")
            return any(VICTIM_VALUE in str(row[0]) for row in cursor.fetchall())
        finally:
            spy.close()

    def run() -> None:
        victim = MySQLdb.connect(**options)
        try:
            victim.cursor().execute(f"SELECT SLEEP(3), '{VICTIM_VALUE}'")
        finally:
            victim.close()

    assert _seen_by_another_session(watch, run)

    source = _mysql_source(maria.url())
    for sql, name in (
        ("SELECT info FROM information_schema.PROCESSLIST", "information_schema.processlist"),
        (
            "SELECT info FROM `INFORMATION_SCHEMA` /* x */ . `processlist`",
            "information_schema.processlist",
        ),
        ("SELECT trx_query FROM information_schema.INNODB_TRX", "information_schema.innodb_trx"),
        ("SELECT * FROM performance_schema.threads", "performance_schema.threads"),
        (
            "SELECT sql_text FROM performance_schema.events_statements_history_long",
            "performance_schema.events_statements_history_long",
        ),
        ("SELECT * FROM sys.processlist", "sys.processlist"),
        ("SELECT * FROM sys.`x$session`", "sys.x$session"),
        ("SELECT argument FROM mysql.general_log", "mysql.general_log"),
    ):
        _refused_everywhere(source, sql, name)
    in_schema = _mysql_source(maria.url("information_schema"))
    _refused_everywhere(in_schema, "SELECT info FROM processlist", "information_schema.processlist")


def test_mariadb_refuses_a_view_over_them_when_planned(maria: Maria) -> None:
    """A view over PROCESSLIST (here its definer's, root's, which shows every session) does
    not name it in the text: the server's rewriting of the plan does, and the statement is
    refused when it is planned (saved)."""
    source = _mysql_source(maria.url())
    with pytest.raises(QueryInvalidError, match=r"may not read information_schema\.processlist"):
        source.relations("SELECT info FROM sessions", {}, ALICE, timeout_seconds=10)


def test_mariadb_queries_that_only_mention_them_run(maria: Maria) -> None:
    """A column called threads and a comment naming PROCESSLIST refuse nothing."""
    source = _mysql_source(maria.url())
    sql = "SELECT id AS threads FROM orders # information_schema.processlist"
    assert source.relations(sql, {}, ALICE, timeout_seconds=10) is not None
    stream = source.execute(sql, {}, ALICE, timeout_seconds=10)
    try:
        assert [row["threads"] for b in stream for row in b.to_pylist()] == [1, 2]
    finally:
        stream.close()


def test_the_generic_source_over_mariadb_refuses_them_too(maria: Maria) -> None:
    """`sqlalchemy+mysql+mysqldb://` writes values into the statement as well: the same
    refusal, read with MySQL's lexis."""
    source = GenericSource("crm", engine_for(maria.url(scheme="sqlalchemy+mysql+mysqldb")))
    _refused_everywhere(
        source, "SELECT info FROM information_schema.PROCESSLIST", "information_schema.processlist"
    )
