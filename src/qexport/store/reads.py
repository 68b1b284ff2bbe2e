"""The API's hottest reads: each run alone, outside any transaction, on a connection of the
pool; never on an event loop.

A read that needs no other statement to agree with it (a token's holder, an export, its
events, the query lists, a workspace's policy) takes no transaction: on PostgreSQL it runs in
autocommit, one round trip where BEGIN, the statement and COMMIT are three; on SQLite, whose
driver runs each statement on its own, in a transaction that only reads (deferred, so it
waits for no writer: qexport.store.engine).

On SQLite they go through SQLAlchemy's Connection, its compiled cache and its type processors,
like every other statement of the store: 0.06 ms of CPU a read.

On PostgreSQL that cost 0.45 ms of CPU a read of an export by id (one process, 3,000 reads),
against 0.09 ms for the same SQL on a psycopg cursor: SQLAlchemy switched the connection into
autocommit and back at each checkout, built its execution context and Result, and asked
psycopg for the cursor's description, which psycopg builds anew each time (29 column objects
for an export). An API request reads two or three times, so this was a third of its CPU
(GET /api/v1/exports/{id} in one process: 2.1 ms of CPU; 1.2-1.4 ms now). Now the read
costs 0.18 ms there. A read is a `_Plan`: the statement compiled once for the dialect (psycopg's
placeholders are named, so the compiled SQL takes the parameters as a dict), the type
processors SQLAlchemy would apply to its parameters and columns (taken from the types, through
their public `bind_processor` and `result_processor`), and a row type whose values are read by
key as attributes or through `_mapping`, as a Row's are. It runs on the pool's own connection
(`engine.raw_connection()`: the same checkout, ping and deadline as any other use) put in
autocommit for the statement. Only a statement whose parameters are plain bound values (no
expanding IN lists) takes that path; any other takes the Connection's.

Every read here is subject to the engine's deadline when it has one (a server's:
`create_engine(deadline=)`); past it, or when the database cannot be reached, it fails with
MetadataUnavailableError.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import PoolProxiedConnection

from qexport.domain.failures import MetadataUnavailableError
from qexport.store.engine import single_statements, unavailable_when_down

_Processor = Callable[[Any], Any] | None


def _all(result: sa.CursorResult[Any]) -> list[sa.Row[Any]]:
    return list(result.all())


class OneRead:
    """One SELECT, built once (at import), read alone by `all`, `first` or `scalar`."""

    __slots__ = ("_lock", "_plan", "statement")

    def __init__(self, statement: sa.Select[Any]) -> None:
        self.statement = statement
        self._plan: _Plan | None = None  # PostgreSQL's, made at the first read there
        self._lock = threading.Lock()

    def all(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> list[Any]:
        if engine.dialect.name == "postgresql":
            return self._on_the_driver(engine, params, one=False)
        rows: list[Any] = self._run(engine, params, _all)
        return rows

    def first(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> Any | None:
        if engine.dialect.name == "postgresql":
            rows = self._on_the_driver(engine, params, one=True)
            return rows[0] if rows else None
        return self._run(engine, params, sa.CursorResult.first)

    def scalar(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row; None when there is no row."""
        row = self.first(engine, params)
        return None if row is None else row[0]

    def _run(
        self,
        engine: sa.Engine,
        params: Mapping[str, Any] | None,
        take: Callable[[sa.CursorResult[Any]], Any],
    ) -> Any:
        with single_statements(engine) as conn:
            return take(conn.execute(self.statement, params or {}))

    def _on_the_driver(
        self, engine: sa.Engine, params: Mapping[str, Any] | None, *, one: bool
    ) -> list[Any]:
        plan = self._plan_for(engine.dialect)
        if plan is None:  # expanding parameters: the Connection's path
            rows: list[Any] = self._run(engine, params, _all)
            return rows[:1] if one else rows
        arguments = plan.arguments(params or {})
        try:
            with unavailable_when_down():
                pooled = engine.raw_connection()
        except engine.dialect.loaded_dbapi.Error as exc:  # the pool's connect passes it on
            raise _unavailable(exc) from exc
        return plan.rows(_read(pooled, engine.dialect, plan, arguments, one=one))

    def _plan_for(self, dialect: sa.Dialect) -> _Plan | None:
        if self._plan is None:
            with self._lock:
                if self._plan is None:
                    self._plan = _Plan.build(self.statement, dialect)
        return self._plan if self._plan.sql else None


def _read(
    pooled: PoolProxiedConnection, dialect: sa.Dialect, plan: _Plan, arguments: Any, *, one: bool
) -> list[Any]:
    """The statement's raw rows, read in autocommit on `pooled`, which goes back to the pool
    out of autocommit, as the pool's other users expect it. A broken connection is
    invalidated (the pool then opens a new one) and the database reported unavailable."""
    dbapi = dialect.loaded_dbapi
    driver: Any = pooled.driver_connection
    cursor = None
    try:
        driver.autocommit = True
        cursor = pooled.cursor()
        cursor.execute(plan.sql, arguments)
        if one:
            row = cursor.fetchone()
            rows = [] if row is None else [row]
        else:
            rows = list(cursor.fetchall())
        if plan.results is None:
            plan.describe(cursor.description)
        cursor.close()
    except dbapi.Error as exc:
        if dialect.is_disconnect(exc, driver, cursor):
            pooled.invalidate(exc)
        if isinstance(exc, dbapi.OperationalError | dbapi.InterfaceError):
            raise _unavailable(exc) from exc
        raise
    finally:
        if pooled.is_valid and not driver.closed:
            driver.autocommit = False
        pooled.close()
    return rows


def _unavailable(exc: BaseException) -> MetadataUnavailableError:
    return MetadataUnavailableError(f"the metadata database is unavailable: {type(exc).__name__}")


@dataclass
class _Plan:
    """A statement compiled for one dialect whose placeholders are named, with the type
    processors of its parameters and of its columns (these known once the driver has
    described them). `sql` is empty when the statement cannot be run this way."""

    dialect: sa.Dialect
    compiled: sa.engine.Compiled
    sql: str
    binds: Mapping[str, Callable[[Any], Any]]
    columns: tuple[Any, ...]  # the columns' types
    row_type: type
    results: tuple[_Processor, ...] | None = None

    @classmethod
    def build(cls, statement: sa.Select[Any], dialect: sa.Dialect) -> _Plan:
        compiled = statement.compile(dialect=dialect)
        parameters: dict[str, Any] = compiled.binds
        plain = not compiled.positional and not any(
            bind.expanding or bind.literal_execute for bind in parameters.values()
        )
        binds = {}
        for name, bind in parameters.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                binds[name] = processor
        keys = tuple(statement.selected_columns.keys())
        return cls(
            dialect=dialect,
            compiled=compiled,
            sql=str(compiled) if plain else "",
            binds=binds,
            columns=tuple(c.type for c in statement.selected_columns),
            row_type=_row_type(keys),
        )

    def arguments(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        values = self.compiled.construct_params(dict(params)) or {}
        for name, processor in self.binds.items():
            if name in values:
                values[name] = processor(values[name])
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
