"""The API's hottest reads: one statement each, built once, run on the driver's own cursor.

A read through a SQLAlchemy Connection pays for the Connection, its execution context and its
Result on top of the driver. The token check, which every API request runs, took 0.26-0.29 ms
of CPU that way on PostgreSQL, against 0.07 ms for the same SQL on a psycopg cursor and 0.16
ms as an OneRead (on SQLite: 0.09 ms, against 0.03); an API request runs two to four such
reads. Measured on the whole request, in one process: GET /api/v1/exports/{id} took 1.44 ms of
CPU on PostgreSQL before, 0.95 ms after; under 40 clients (bench/api_load.py) PostgreSQL went
from 450-550 requests/s to 666, SQLite from 800-1,017 to 1,514.

An OneRead compiles its statement once per dialect and runs it on a connection of the
engine's pool (pinged on checkout as every checkout is) outside any transaction: on
PostgreSQL in autocommit, one round trip, the connection handed back as it came; on SQLite,
whose driver runs each statement on its own (see qexport.store.engine). Parameters and values
go through the type processors SQLAlchemy would apply to them (UTC datetimes, JSON, SQLite's
booleans), so a row holds what a Connection's row would; its values are read by column key as
attributes, or through `_mapping`.

Only for a statement whose parameters are plain bound values (no expanding IN lists) and that
need not agree with another statement: each sees a snapshot of its own.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler

from qexport.domain.failures import MetadataUnavailableError

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
        dialect = engine.dialect
        plan = self._plan(dialect)
        arguments = plan.arguments(params or {})
        try:
            pooled = engine.raw_connection()
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            raise _unavailable(exc.orig) from exc
        except dialect.loaded_dbapi.Error as exc:  # the pool's connect passes it on unwrapped
            raise _unavailable(exc) from exc
        try:
            rows = _execute(pooled, dialect, plan, arguments, one=one)
        finally:
            pooled.close()
        return plan.rows(rows)


def _execute(
    pooled: PoolProxiedConnection, dialect: sa.Dialect, plan: _Plan, arguments: Any, *, one: bool
) -> list[Any]:
    """The statement's raw rows, run on `pooled` outside any transaction. A broken connection
    is invalidated (the pool then opens a new one) and the database reported unavailable, as
    `qexport.store.engine` reports it."""
    dbapi = dialect.loaded_dbapi
    driver: Any = pooled.driver_connection
    autocommit = dialect.name == "postgresql"  # SQLite's driver runs without (see engine)
    cursor = None
    try:
        if autocommit:
            driver.autocommit = True
        cursor = pooled.cursor()
        cursor.execute(plan.sql, arguments)
        if one:
            row = cursor.fetchone()
            rows = [] if row is None else [row]
        else:
            rows = list(cursor.fetchall())
        if plan.results is None:  # psycopg builds a new description each time it is asked
            plan.describe(cursor.description)
        cursor.close()
    except dbapi.Error as exc:
        if dialect.is_disconnect(exc, driver, cursor):
            pooled.invalidate(exc)
        if isinstance(exc, dbapi.OperationalError | dbapi.InterfaceError):
            raise _unavailable(exc) from exc
        raise
    else:
        return rows
    finally:
        if autocommit and pooled.is_valid and not driver.closed:
            driver.autocommit = False  # as the pool's other users expect it


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
