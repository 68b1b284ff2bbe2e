"""Engines for the metadata database, and the migrations that bring it to the schema.

No engine is used on an event loop that serves requests: a checkout there raises
(`_refuse_on_an_event_loop`), so that a slow or locked database can hold the requests that
wait for it, each on its thread, and never the loop that answers every other request
(qexport.http.one_hop). A server marks its loop as it starts (`serve_on_this_loop`); any
other loop is none of the server's (a browser driver in the tests keeps one running on the
thread that also sets up their data). A server's
engine also has a deadline (QEXPORT_DATABASE_TIMEOUT_SECONDS, `create_engine(deadline=)`):
no statement, lock wait, new connection or wait for a pooled one takes longer, and the
database is reported unavailable instead (on PostgreSQL `statement_timeout` and
`lock_timeout`, set once per connection when it opens: a SET per statement or per
transaction would be a round trip each; on SQLite the busy timeout, the writers' turns and
a progress handler that interrupts a statement past it). Migrations are not bound by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import math
import os
import select
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from qexport.domain.failures import MetadataUnavailableError
from qexport.private_files import make_private_dirs, make_private_file, tighten

MIGRATIONS = Path(__file__).parent / "migrations"
_SQLITE_BUSY_MS = 30_000
# Connections kept open per engine, and opened beyond that for a burst. The default (5 kept)
# made a server under 20 clients open and close a connection for most requests (on SQLite
# each one a file open and four PRAGMAs): 252 requests/s, against 543 with enough kept
# (bench/api_load.py). A server's threads (qexport.http.one_hop: API_THREADS for the
# requests, APART_THREADS for previews and sign-ins) are together no more than what is kept.
POOL_SIZE = 16
_POOL: dict[str, Any] = {"pool_size": POOL_SIZE, "max_overflow": POOL_SIZE}
# A pooled PostgreSQL connection idle for longer than this is pinged before it is used.
_PING_AFTER_IDLE_SECONDS = 1.0


# Per SQLite engine: the turns its writing transactions take (WriterTurns).
_WRITE_TURNS: weakref.WeakKeyDictionary[sa.Engine, WriterTurns] = weakref.WeakKeyDictionary()

# The execution option that marks a connection's transaction as one that only reads.
_READS_ONLY = "qexport_reads_only"
# The execution option that marks a SQLite connection whose statements begin no transaction.
_ALONE = "qexport_statements_alone"
# single_statements' options, on PostgreSQL (True) and on SQLite. (SQLAlchemy's AUTOCOMMIT on
# SQLite would turn the driver's own transactions back on when the connection goes back to
# the pool.)
_SINGLE_STATEMENTS: dict[bool, dict[str, Any]] = {
    True: {"isolation_level": "AUTOCOMMIT"},
    False: {_ALONE: True},
}


@contextlib.contextmanager
def transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A transaction that may write (on SQLite it takes the write lock when it begins);
    database outages and lock timeouts become MetadataUnavailableError."""
    with _begin(engine, reads_only=False) as conn:
        yield conn


@contextlib.contextmanager
def read_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A transaction that only reads: on SQLite it takes no lock and waits for no writer.
    It must not write: on PostgreSQL it is READ ONLY and a write is refused; on SQLite a write
    in it can fail with SQLITE_BUSY, whatever the busy timeout, when another writer holds the
    lock (see `_sqlite_engine`)."""
    with _begin(engine, reads_only=True) as conn:
        yield conn


class OnEngine:
    """A store over one engine: its write and read transactions."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def _tx(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return transaction(self._engine)

    def _read(self) -> contextlib.AbstractContextManager[sa.Connection]:
        return read_transaction(self._engine)


@contextlib.contextmanager
def single_statements(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection whose statements each stand alone, outside any transaction (store/
    reads.py): on PostgreSQL in autocommit, so that each is one round trip and commits on its
    own; on SQLite in the driver's autocommit (see "begin" in `_sqlite_engine`), for reads
    only, each read in a snapshot of its own."""
    options = _SINGLE_STATEMENTS[engine.dialect.name == "postgresql"]
    with unavailable_when_down(), engine.connect() as conn:
        yield conn.execution_options(**options)


@contextlib.contextmanager
def unavailable_when_down() -> Iterator[None]:
    """The database's outages, its deadline passing (a statement cancelled, a lock or a
    connection not had in time) and a broken connection, as MetadataUnavailableError."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise MetadataUnavailableError(
            f"the metadata database is unavailable: {type(exc.orig).__name__}"
        ) from exc
    except sa.exc.TimeoutError as exc:  # no pooled connection came free in time
        raise MetadataUnavailableError(
            "the metadata database is unavailable: every connection is busy"
        ) from exc


@contextlib.contextmanager
def _begin(engine: sa.Engine, *, reads_only: bool) -> Iterator[sa.Connection]:
    with (
        unavailable_when_down(),
        _writer_turn(engine, reads_only=reads_only),
        engine.connect() as conn,
    ):
        if reads_only:
            conn.execution_options(**_read_options(conn.dialect.name))
        with conn.begin():
            yield conn


@contextlib.contextmanager
def _writer_turn(engine: sa.Engine, *, reads_only: bool) -> Iterator[None]:
    turns = None if reads_only else _WRITE_TURNS.get(engine)
    if turns is None:
        yield
        return
    with turns.turn():
        yield


class WriterTurns:
    """On SQLite, the transactions that may write take turns before they ask SQLite for its
    write lock: this process's on a thread lock, processes on an flock of a file beside the
    database.

    SQLite's busy handler makes a writer that finds the lock taken sleep and try again, up
    to 100 ms between tries, so writers queued behind each other for up to a second: a
    download, which records an event, had a p99 of 0.97 s under 20 clients
    (bench/api_load.py). A thread lock hands over at once, in order; a writer waiting for
    the file's lock tries again every millisecond. Past the busy timeout the database is
    reported unavailable, as SQLite's own wait would have it.
    """

    _RETRY_SECONDS = 0.001

    def __init__(self, lock_file: Path | None, timeout: float) -> None:
        self._thread = threading.RLock()
        self._lock_file = lock_file
        self._timeout = timeout
        self._fd: int | None = None
        self._pid = 0
        self._depth = 0  # this process's nesting of turns (the thread lock is reentrant)

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        deadline = time.monotonic() + self._timeout
        if not self._thread.acquire(timeout=self._timeout):
            raise _lock_held()
        try:
            if self._depth == 0:
                self._take_file(deadline)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread.release()

    def _take_file(self, deadline: float) -> None:
        if self._lock_file is None:
            return
        if self._fd is None or self._pid != os.getpid():  # a forked child opens its own
            make_private_file(self._lock_file)
            self._fd, self._pid = os.open(self._lock_file, os.O_RDWR), os.getpid()
            weakref.finalize(self, os.close, self._fd)
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _lock_held() from None
                time.sleep(self._RETRY_SECONDS)
            else:
                return


def _lock_held() -> MetadataUnavailableError:
    return MetadataUnavailableError("the metadata database is unavailable: its lock is held")


def _read_options(dialect: str) -> dict[str, bool]:
    # PostgreSQL's READ ONLY costs nothing (psycopg sends it with the BEGIN: 0.71 vs 0.74 ms
    # a transaction measured) and refuses a write that was classified a read.
    if dialect == "postgresql":
        return {_READS_ONLY: True, "postgresql_readonly": True}
    return {_READS_ONLY: True}


def create_engine(url: str, *, deadline: float | None = None) -> sa.Engine:
    """An engine for `url`; nothing connects until first use. With a `deadline` in seconds
    (a server's), no statement, lock wait, connection or wait for a pooled connection takes
    longer: it fails, reported as MetadataUnavailableError."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(parsed, deadline)
    else:
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        if parsed.get_backend_name() == "postgresql":
            engine = _postgres_engine(parsed, deadline)
        else:
            engine = sa.create_engine(parsed, pool_pre_ping=True)
    # First among the checkout listeners: before a ping, which would block too.
    event.listen(engine, "checkout", _refuse_on_an_event_loop, insert=True)
    return engine


# The event loops that serve qexport's requests (serve_on_this_loop); a loop that ends goes.
_SERVING_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def serve_on_this_loop() -> None:
    """Mark the running event loop as one that answers requests: no engine may be used on it."""
    _SERVING_LOOPS.add(asyncio.get_running_loop())


def _refuse_on_an_event_loop(_dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """A connection taken on a thread that runs a serving event loop would make the loop, and
    every request it serves, wait for the database: a mistake, refused where it is made."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop on this thread: a thread of the pool, a worker's, the CLI's
        return
    if loop not in _SERVING_LOOPS:
        return
    raise RuntimeError("the metadata database was called on an event loop, which it would block")


def _postgres_engine(url: sa.URL, deadline: float | None) -> sa.Engine:
    """Pooled connections are checked before use, but only those that may have died.

    A ping before every transaction (pool_pre_ping) was one more round trip per transaction,
    about 0.1 ms of CPU each and two per export. A connection is pinged only when it sat idle in
    the pool for over a second, or when the server wrote to it while it sat there: a backend
    that is terminated, or a server that shuts down, says so before closing the socket.

    With a `deadline`, each connection opens with `statement_timeout` and `lock_timeout` set
    to it (one SET of both and its COMMIT, once per connection), connecting gives up after it
    (libpq counts whole seconds, at least 2) and so does waiting for a pooled connection.
    """
    pool: dict[str, Any] = dict(_POOL)
    connect_args: dict[str, Any] = {}
    if deadline is not None:
        pool["pool_timeout"] = deadline
        connect_args["connect_timeout"] = max(2, math.ceil(deadline))
    engine = sa.create_engine(url, connect_args=connect_args, **pool)

    if deadline is not None:
        milliseconds = max(1, round(deadline * 1000))

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute(
                f"SET statement_timeout = {milliseconds}; SET lock_timeout = {milliseconds}"
            )
            dbapi_connection.commit()

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or not may_have_died(dbapi_connection, idle_since):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool then discards this connection and checks out another.
            raise sa.exc.DisconnectionError(f"pooled connection is dead: {exc}") from exc

    return engine


def may_have_died(dbapi_connection: Any, idle_since: float) -> bool:
    """Whether a PostgreSQL connection unused since `idle_since` (time.monotonic) is to be
    pinged before use: it sat idle for over a second, or the server wrote to it meanwhile."""
    idle = time.monotonic() - idle_since
    return idle >= _PING_AFTER_IDLE_SECONDS or _has_input(dbapi_connection)


def _has_input(dbapi_connection: Any) -> bool:
    """Whether the server sent something to an idle connection (usually: it is closing)."""
    try:
        fd = dbapi_connection.fileno()
    except Exception:  # closed or broken: let the ping find out
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def _sqlite_engine(url: sa.URL, deadline: float | None) -> sa.Engine:
    """With a `deadline`, SQLite's busy timeout, the writers' turns and the wait for a pooled
    connection are that long instead of 30 s, and a statement that runs longer is interrupted
    (a progress handler, called every 10,000 steps of SQLite's machine, compares the time
    with the statement's start). A reader that SQLite itself makes wait, in WAL recovery or
    behind a lock no writer takes, tries again for about 10 s whatever the busy timeout; the
    request's own deadline ends its wait (qexport.http.one_hop)."""
    on_disk = bool(
        url.database and url.database != ":memory:" and not url.database.startswith("file:")
    )
    if on_disk:
        _private_database_file(Path(str(url.database)))
    busy_ms = _SQLITE_BUSY_MS if deadline is None else max(1, round(deadline * 1000))
    pool: dict[str, Any] = dict(_POOL)
    if deadline is not None and on_disk:  # (in memory, one connection per thread: no waiting)
        pool["pool_timeout"] = deadline
    engine = sa.create_engine(url, connect_args={"timeout": busy_ms / 1000}, **pool)
    _WRITE_TURNS[engine] = WriterTurns(
        Path(f"{url.database}-writer") if on_disk else None, busy_ms / 1000
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide where transactions begin (see "begin").
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        if deadline is not None:
            _interrupt_after(dbapi_connection, record.info, deadline)

    if deadline is not None:

        @event.listens_for(engine, "before_cursor_execute")
        def _statement_begins(conn: sa.Connection, *_args: Any) -> None:
            conn.info[_STATEMENT_BEGAN] = time.monotonic()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        options = connection.get_execution_options()
        if options.get(_ALONE):
            # single_statements: the driver is in autocommit (isolation_level None), so each
            # statement is its own transaction and SQLAlchemy's commit or rollback does
            # nothing. A BEGIN and a COMMIT around one read cost 0.017 ms of 0.075.
            return
        # A transaction that may write takes the write lock up front (IMMEDIATE): a deferred
        # one that reads and then writes can fail with SQLITE_BUSY_SNAPSHOT in WAL mode without
        # waiting for the lock. One that only reads begins deferred and so never waits: in WAL
        # mode it reads its snapshot beside the writer. Taking the lock for reads too made every
        # API request queue behind every other (half the server's busy time under 40 clients,
        # 130 requests/s at most; bench/api_load.py).
        if options.get(_READS_ONLY):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


# Where a SQLite connection (its pool record's `info`) keeps when its statement began.
_STATEMENT_BEGAN = "qexport_statement_began"
_PROGRESS_STEPS = 10_000


def _interrupt_after(dbapi_connection: Any, info: dict[str, float], deadline: float) -> None:
    """Interrupt a statement of this connection once it has run for `deadline` seconds."""
    info[_STATEMENT_BEGAN] = time.monotonic()

    def past_the_deadline() -> bool:
        return time.monotonic() - info[_STATEMENT_BEGAN] > deadline

    dbapi_connection.set_progress_handler(past_the_deadline, _PROGRESS_STEPS)


def _private_database_file(path: Path) -> None:
    """The database file (and so its -wal and -shm, which SQLite creates with the database's
    mode) readable by this user only, in a directory created 0700: it holds everyone's
    exports and, on the embedded default, the master secret."""
    make_private_dirs(path.parent)
    make_private_file(path)
    for companion in ("-wal", "-shm"):  # left by a version that did not set modes
        tighten(path.with_name(path.name + companion))


def migrate(engine: sa.Engine) -> None:
    """Upgrade the database to the newest schema (safe to run from several processes)."""
    if _at_head(engine):
        return  # nothing to do, and Alembic left unloaded (a CLI command's start)
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # A server's deadline is no migration's: one may rewrite a large table, or wait
            # for another process's upgrade.
            connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
            connection.exec_driver_sql("SET LOCAL lock_timeout = 0")
            # Serialise concurrent upgrades from several workers starting at once.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(727274)")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def newest_revision_by_name() -> str:
    """The newest migration's revision as its file name says ("0025_....py" is 0025): the
    migrations are named so (tests/unit/test_migration_names.py holds them to it), which
    lets a process at the newest schema start without loading Alembic (0.3 s of a CLI
    command's start on a 2-core machine)."""
    return max(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def _at_head(engine: sa.Engine) -> bool:
    """Whether the database is at the newest schema (False for a new one, with no table)."""
    with read_transaction(engine) as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return False
        found = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
        return list(found.scalars()) == [newest_revision_by_name()]


def current_revision(engine: sa.Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with read_transaction(engine) as connection:
        return MigrationContext.configure(connection).get_current_revision()


@functools.cache
def head_revision() -> str | None:
    """The newest migration's revision: the schema this code needs."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config).get_current_head()


def schema_mismatch(engine: sa.Engine) -> str | None:
    """Why the database's schema is not the one this code needs, or None when it is."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return None
    return (
        f"the database's schema is at revision {current or 'none'}, this server's is at"
        f" {head}: run `qexport db upgrade` with the newer of the two"
    )
