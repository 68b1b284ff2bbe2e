"""The API's hottest reads: each run alone, outside any transaction, on a SQLAlchemy
Connection of the pool; never on an event loop.

A read that needs no other statement to agree with it (a token's holder, an export, its
events, the query lists, a workspace's policy) takes no transaction: on PostgreSQL it runs in
autocommit, one round trip where BEGIN, the statement and COMMIT are three; on SQLite, whose
driver runs each statement on its own, in a transaction that only reads (deferred, so it
waits for no writer: qexport.store.engine).

They go through SQLAlchemy's Connection, its compiled cache and its type processors, like
every other statement of the store. They used to run on the driver's cursor with a plan of
their own made from the compiler's internals (`positiontup`, `literal_execute_params`), and
on the event loop's own connection: 0.011 ms of CPU a read on SQLite and 0.038 ms on
PostgreSQL, against 0.056 and 0.13 ms now (one process, a read of an export by id, 4,000
times, best of three). The difference, 0.1-0.2 ms of a request that reads twice or three
times, is about half of what the API's requests cost more now that none reads on the loop
(qexport.http.one_hop has the figures); reading on the loop could not stay: a read that
waited for a lock held the loop, and every request of the process with it.

Every read here is subject to the engine's deadline when it has one (a server's:
`create_engine(deadline=)`); past it, or when the database cannot be reached, it fails with
MetadataUnavailableError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from qexport.store.engine import single_statements


def _all(result: sa.CursorResult[Any]) -> list[sa.Row[Any]]:
    return list(result.all())


class OneRead:
    """One SELECT, built once (at import), read alone by `all`, `first` or `scalar`."""

    __slots__ = ("statement",)

    def __init__(self, statement: sa.Select[Any]) -> None:
        self.statement = statement

    def all(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> list[Any]:
        rows: list[Any] = self._run(engine, params, _all)
        return rows

    def first(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> Any | None:
        return self._run(engine, params, sa.CursorResult.first)

    def scalar(self, engine: sa.Engine, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row; None when there is no row."""
        return self._run(engine, params, sa.CursorResult.scalar)

    def _run(
        self,
        engine: sa.Engine,
        params: Mapping[str, Any] | None,
        take: Callable[[sa.CursorResult[Any]], Any],
    ) -> Any:
        with single_statements(engine) as conn:
            return take(conn.execute(self.statement, params or {}))
