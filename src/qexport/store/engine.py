"""Engines for the metadata database, and the migrations that bring it to the schema."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event

from qexport.domain.failures import MetadataUnavailableError
from qexport.private_files import make_private_dirs, make_private_file, tighten

MIGRATIONS = Path(__file__).parent / "migrations"
_SQLITE_BUSY_MS = 30_000
# Connections kept open per engine, and opened beyond that for a burst. The default (5 kept)
# made a server under 20 clients open and close a connection for most requests (on SQLite
# each one a file open and four PRAGMAs): 252 requests/s, against 543 with enough kept
# (bench/api_load.py). A server's thread pool (qexport.http.one_hop.API_THREADS) is no
# larger than what is kept.
POOL_SIZE = 16
_POOL: dict[str, Any] = {"pool_size": POOL_SIZE, "max_overflow": POOL_SIZE}
# A pooled PostgreSQL connection idle for longer than this is pinged before it is used.
_PING_AFTER_IDLE_SECONDS = 1.0


# Per SQLite engine: the turns its writing transactions take (WriterTurns).
_WRITE_TURNS: weakref.WeakKeyDictionary[sa.Engine, WriterTurns] = weakref.WeakKeyDictionary()

# The execution option that marks a connection's transaction as one that only reads.
_READS_ONLY = "qexport_reads_only"


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


@contextlib.contextmanager
def _begin(engine: sa.Engine, *, reads_only: bool) -> Iterator[sa.Connection]:
    try:
        with _writer_turn(engine, reads_only=reads_only), engine.connect() as conn:
            if reads_only:
                conn.execution_options(**_read_options(conn.dialect.name))
            with conn.begin():
                yield conn
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise MetadataUnavailableError(
            f"the metadata database is unavailable: {type(exc.orig).__name__}"
        ) from exc


@contextlib.contextmanager
def _writer_turn(engine: sa.Engine, *, reads_only: bool) -> Iterator[None]:
    turns = None if reads_only else _WRITE_TURNS.get(engine)
    if turns is None:
        yield
        return
    with turns.turn(_SQLITE_BUSY_MS / 1000):
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

    def __init__(self, lock_file: Path | None) -> None:
        self._thread = threading.RLock()
        self._lock_file = lock_file
        self._fd: int | None = None
        self._pid = 0
        self._depth = 0  # this process's nesting of turns (the thread lock is reentrant)

    @contextlib.contextmanager
    def turn(self, timeout: float) -> Iterator[None]:
        deadline = time.monotonic() + timeout
        if not self._thread.acquire(timeout=timeout):
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


def create_engine(url: str) -> sa.Engine:
    """An engine for `url`; nothing connects until first use."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "postgresql":
        return _postgres_engine(parsed)
    return sa.create_engine(parsed, pool_pre_ping=True)


def _postgres_engine(url: sa.URL) -> sa.Engine:
    """Pooled connections are checked before use, but only those that may have died.

    A ping before every transaction (pool_pre_ping) was one more round trip per transaction,
    about 0.1 ms of CPU each and two per export. A connection is pinged only when it sat idle in
    the pool for over a second, or when the server wrote to it while it sat there: a backend
    that is terminated, or a server that shuts down, says so before closing the socket.
    """
    engine = sa.create_engine(url, **_POOL)

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


def _sqlite_engine(url: sa.URL) -> sa.Engine:
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        _private_database_file(Path(url.database))
    engine = sa.create_engine(url, connect_args={"timeout": _SQLITE_BUSY_MS / 1000}, **_POOL)
    on_disk = url.database and url.database != ":memory:" and not url.database.startswith("file:")
    _WRITE_TURNS[engine] = WriterTurns(Path(f"{url.database}-writer") if on_disk else None)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide where transactions begin (see "begin").
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        # A transaction that may write takes the write lock up front (IMMEDIATE): a deferred
        # one that reads and then writes can fail with SQLITE_BUSY_SNAPSHOT in WAL mode without
        # waiting for the lock. One that only reads begins deferred and so never waits: in WAL
        # mode it reads its snapshot beside the writer. Taking the lock for reads too made every
        # API request queue behind every other (half the server's busy time under 40 clients,
        # 130 requests/s at most; bench/api_load.py).
        if connection.get_execution_options().get(_READS_ONLY):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


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
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Serialise concurrent upgrades from several workers starting at once.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(727274)")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def current_revision(engine: sa.Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
