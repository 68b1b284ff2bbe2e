"""The API's hottest reads: one statement each, built once, run on the driver's own cursor.

A read through a SQLAlchemy Connection pays for the Connection, its execution context and its
Result on top of the driver. The token check, which every API request runs, took 0.26-0.29 ms
of CPU that way on PostgreSQL, against 0.07 ms for the same SQL on a psycopg cursor and 0.16
ms as an OneRead (on SQLite: 0.09 ms, against 0.03); an API request runs two to four such
reads. Measured on the whole request, in one process: GET /api/v1/exports/{id} took 1.44 ms of
CPU on PostgreSQL before, 0.95 ms after; under 40 clients (bench/api_load.py) PostgreSQL went
from 450-550 requests/s to 666, SQLite from 800-1,017 to 1,514.

An OneRead compiles its statement once per dialect and runs it outside any transaction: on
PostgreSQL in autocommit, one round trip; on SQLite, whose driver runs each statement on its
own (see qexport.store.engine). On an event loop it reads on the loop's own connection
(`_LoopConnections`); elsewhere on a connection of the engine's pool, pinged on checkout as
every checkout is and handed back as it came. Parameters and values go through the type
processors SQLAlchemy would apply to them (UTC datetimes, JSON, SQLite's booleans), so a row
holds what a Connection's row would; its values are read by column key as attributes, or
through `_mapping`.

Only for a statement whose parameters are plain bound values (no expanding IN lists) and that
need not agree with another statement: each sees a snapshot of its own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler

from qexport.domain.failures import MetadataUnavailableError
from qexport.store.engine import may_have_died

_Processor = Callable[[Any], Any] | None


class OneRead:
    """One SELECT, built once (at import, or cached), read by `all`, `first` or `scalar`."""

    __slots__ = ("_lock", "_plans", "statement")

    def __init__(self, statement: sa.Select[Any]) -> None:
        self.statement = statement
        self._plans: dict[str, _Plan] = {}  # by dialect name
        self._lock = threading.Lock()

    def all(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> list[Any]:
        return self._run(engine, params, one=False)

    def first(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> Any | None:
        rows = self._run(engine, params, one=True)
        return rows[0] if rows else None

    def scalar(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row; None when there is no row."""
        row = self.first(engine, params)
        return None if row is None else row[0]

    def _plan(self, dialect: sa.Dialect) -> _Plan:
        plan = self._plans.get(dialect.name)
        if plan is None:
            with self._lock:
                plan = self._plans.get(dialect.name) or _Plan.build(self.statement, dialect)
                self._plans[dialect.name] = plan
        return plan

    def _run(self, engine: sa.Engine, params: Mapping[str, Any] | None, *, one: bool) -> list[Any]:
        plan = self._plan(engine.dialect)
        arguments = plan.arguments(params or {})
        loop = _running_loop()
        if loop is not None:
            rows = _loop_connections(engine).read(engine, loop, plan, arguments, one=one)
        else:
            rows = _read_pooled(engine, plan, arguments, one=one)
        return plan.rows(rows)


class OneWrite(OneRead):
    """A write that is one statement (on PostgreSQL, a SELECT of a function that writes),
    run as an OneRead is off an event loop: on a connection of the pool, in autocommit on
    PostgreSQL, so that it commits on its own in one round trip. Never on an event loop,
    where it could wait for a lock; nor on SQLite, where writers take turns in
    transactions (qexport.store.engine)."""

    __slots__ = ()

    def _run(self, engine: sa.Engine, params: Mapping[str, Any] | None, *, one: bool) -> list[Any]:
        if engine.dialect.name != "postgresql":
            raise ValueError("an OneWrite is for PostgreSQL; SQLite writes in transactions")
        if _running_loop() is not None:
            raise RuntimeError("an OneWrite may wait for a lock: not on an event loop")
        plan = self._plan(engine.dialect)
        return plan.rows(_read_pooled(engine, plan, plan.arguments(params or {}), one=one))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a thread of the pool, the worker's, the command line's
        return None


def _checkout(engine: sa.Engine) -> PoolProxiedConnection:
    try:
        return engine.raw_connection()
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise _unavailable(exc.orig) from exc
    except engine.dialect.loaded_dbapi.Error as exc:  # the pool's connect passes it on unwrapped
        raise _unavailable(exc) from exc


def _read_pooled(engine: sa.Engine, plan: _Plan, arguments: Any, *, one: bool) -> list[Any]:
    """The rows, read on a connection of the pool given back at once, in autocommit for the
    statement on PostgreSQL (the pool's other users expect it off)."""
    pooled = _checkout(engine)
    postgresql = engine.dialect.name == "postgresql"
    driver: Any = pooled.driver_connection
    try:
        if postgresql:
            driver.autocommit = True
        return _execute(pooled, engine.dialect, plan, arguments, one=one)
    finally:
        if postgresql and pooled.is_valid and not driver.closed:
            driver.autocommit = False
        pooled.close()


def _execute(
    pooled: PoolProxiedConnection, dialect: sa.Dialect, plan: _Plan, arguments: Any, *, one: bool
) -> list[Any]:
    """The statement's raw rows. A broken connection is invalidated (the pool then opens a new
    one) and the database reported unavailable, as `qexport.store.engine` reports it."""
    dbapi = dialect.loaded_dbapi
    cursor = None
    try:
        cursor = pooled.cursor()
        cursor.execute(plan.sql, arguments)
        if one:
            row = cursor.fetchone()
            rows = [] if row is None else [row]
        else:
            rows = list(cursor.fetchall())
        if plan.results is None:  # psycopg builds a new description each time it is asked
            plan.describe(cursor.description)
        # Closed, never kept: on SQLite a statement left open holds its snapshot, and with it
        # the WAL from being checkpointed.
        cursor.close()
    except dbapi.Error as exc:
        if dialect.is_disconnect(exc, pooled.driver_connection, cursor):
            pooled.invalidate(exc)
        if isinstance(exc, dbapi.OperationalError | dbapi.InterfaceError):
            raise _unavailable(exc) from exc
        raise
    return rows


@dataclass
class _Held:
    pooled: PoolProxiedConnection
    idle_since: float
    released: weakref.finalize[Any, Any]


class _LoopConnections:
    """The connection each event loop reads on, per engine: taken from the pool at the loop's
    first read and kept (in autocommit on PostgreSQL), since a loop runs one read at a time.

    A read then costs no checkout, no checkin and no switching autocommit on and off: on
    PostgreSQL GET /api/v1/exports/{id} took 0.55-0.62 ms of the server's CPU instead of
    0.65-0.79, and 40 clients (bench/api_load.py) were served 931-971 requests/s instead of
    712-739 (measured with a first form of this, one connection per engine for the loop's
    thread). As the pool does at checkout, a connection idle for over a second, or that the
    server wrote to meanwhile, is pinged first and replaced if dead. It goes back to the pool
    when its loop is collected, or when the engine is disposed.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Held] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._postgresql = engine.dialect.name == "postgresql"
        sa.event.listen(engine, "engine_disposed", self._release_all)

    def read(
        self,
        engine: sa.Engine,
        loop: asyncio.AbstractEventLoop,
        plan: _Plan,
        arguments: Any,
        *,
        one: bool,
    ) -> list[Any]:
        held = self._held.get(loop)
        if held is not None and self._postgresql and not self._alive(engine, held):
            self._release(loop)
            held = None
        if held is None:
            held = self._hold(engine, loop)
        try:
            rows = _execute(held.pooled, engine.dialect, plan, arguments, one=one)
        finally:
            if not held.pooled.is_valid:  # invalidated: it went on the spot
                self._release(loop)
        held.idle_since = time.monotonic()
        return rows

    def _alive(self, engine: sa.Engine, held: _Held) -> bool:
        driver = held.pooled.driver_connection
        if not may_have_died(driver, held.idle_since):
            return True
        try:
            engine.dialect.do_ping(driver)  # type: ignore[arg-type]
        except Exception as exc:
            held.pooled.invalidate(exc)
            return False
        return True

    def _hold(self, engine: sa.Engine, loop: asyncio.AbstractEventLoop) -> _Held:
        pooled = _checkout(engine)
        if self._postgresql:
            pooled.driver_connection.autocommit = True  # type: ignore[union-attr]
        released = weakref.finalize(loop, _give_back, pooled, postgresql=self._postgresql)
        held = _Held(pooled, time.monotonic(), released)
        with self._lock:
            self._held[loop] = held
        return held

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            held = self._held.pop(loop, None)
        if held is not None:
            held.released()  # runs _give_back once, now

    def _release_all(self, _engine: sa.Engine) -> None:
        """The engine was disposed: its pool is a new one, so the held connections are closed
        (given back, they would go to the old pool, which closes nothing any more)."""
        with self._lock:
            held, self._held = list(self._held.values()), weakref.WeakKeyDictionary()
        for one in held:
            if one.released.detach() is not None:
                one.pooled.invalidate()  # closes the driver's connection
                one.pooled.close()


def _give_back(pooled: PoolProxiedConnection, *, postgresql: bool) -> None:
    """Return a held connection to its pool as the pool's other users expect it: out of
    autocommit (an invalidated one is just dropped)."""
    driver: Any = pooled.driver_connection
    if postgresql and pooled.is_valid and driver is not None:
        with contextlib.suppress(Exception):  # a broken one: closing it is all that is left
            driver.autocommit = False
    pooled.close()


_LOOP_CONNECTIONS: weakref.WeakKeyDictionary[sa.Engine, _LoopConnections] = (
    weakref.WeakKeyDictionary()
)
_LOOP_CONNECTIONS_MADE = threading.Lock()


def _loop_connections(engine: sa.Engine) -> _LoopConnections:
    found = _LOOP_CONNECTIONS.get(engine)
    if found is None:
        with _LOOP_CONNECTIONS_MADE:
            found = _LOOP_CONNECTIONS.get(engine) or _LoopConnections(engine)
            _LOOP_CONNECTIONS[engine] = found
    return found


def _unavailable(exc: BaseException | None) -> MetadataUnavailableError:
    return MetadataUnavailableError(f"the metadata database is unavailable: {type(exc).__name__}")


@dataclass
class _Plan:
    """A statement compiled for one dialect, with the type processors of its parameters
    and of its columns (these known once the driver has described them)."""

    dialect: sa.Dialect
    compiled: SQLCompiler
    sql: str
    positional: tuple[str, ...] | None
    binds: Mapping[str, Callable[[Any], Any]]
    columns: tuple[Any, ...]  # the columns' types
    row_type: type
    results: tuple[_Processor, ...] | None = None

    @classmethod
    def build(cls, statement: sa.Select[Any], dialect: sa.Dialect) -> _Plan:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if getattr(compiled, "literal_execute_params", None) or getattr(
            compiled, "post_compile_params", None
        ):
            raise ValueError("an OneRead's parameters must be plain bound values")
        binds = {}
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                binds[name] = processor
        positional = getattr(compiled, "positiontup", None)
        keys = tuple(statement.selected_columns.keys())
        return cls(
            dialect=dialect,
            compiled=compiled,
            sql=str(compiled),
            positional=tuple(positional) if compiled.positional and positional else None,
            binds=binds,
            columns=tuple(c.type for c in statement.selected_columns),
            row_type=_row_type(keys),
        )

    def arguments(self, params: Mapping[str, Any]) -> Any:
        values = self.compiled.construct_params(dict(params)) or {}
        for name, processor in self.binds.items():
            if name in values:
                values[name] = processor(values[name])
        if self.positional is not None:
            return tuple(values[name] for name in self.positional)
        return values

    def describe(self, description: Any) -> None:
        """The columns' result processors, which depend on the types the driver reports."""
        self.results = tuple(
            t.dialect_impl(self.dialect).result_processor(self.dialect, d[1])
            for t, d in zip(self.columns, description, strict=True)
        )

    def rows(self, rows: list[Any]) -> list[Any]:
        results = self.results or ()
        make = self.row_type._make  # type: ignore[attr-defined]
        if not any(results):
            return [make(r) for r in rows]
        return [
            make(v if p is None else p(v) for p, v in zip(results, r, strict=True)) for r in rows
        ]


def _row_type(keys: tuple[str, ...]) -> type:
    """A tuple type whose values are read by key as attributes, or through `_mapping` (as a
    SQLAlchemy Row's are)."""
    base = collections.namedtuple("Row", keys, rename=True)  # type: ignore[misc]

    def mapping(row: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(keys, row, strict=True))

    return type("Row", (base,), {"__slots__": (), "_mapping": property(mapping)})
