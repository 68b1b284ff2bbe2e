"""The DuckDB source: one read-only, sandboxed database file queried by many exports at once."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from qexport.sources.duckdb_errors import connect_error
from qexport.sources.duckdb_statements import bound_values, single_select
from qexport.sources.duckdb_stream import Deadline, DuckDBResultStream

if TYPE_CHECKING:
    from qexport.domain.exports import Requester

BATCH_ROWS = 131_072

# Read-only is not enough: without these a SELECT could read any file the process can
# (read_csv('/etc/passwd')), write one (COPY ... TO), ATTACH another database, or fetch and load
# an extension. The configuration is then locked so no statement can turn them back on.
SANDBOX_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,
}


def connect_sandboxed(path: Path) -> duckdb.DuckDBPyConnection:
    """Open `path` read-only inside the sandbox, with the configuration locked."""
    con = duckdb.connect(str(path), read_only=True, config=SANDBOX_CONFIG)
    try:
        # Session settings go before the lock; DuckDB would draw its progress bar on stdout.
        con.execute("SET enable_progress_bar = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


class DuckDBSource:
    """A Source over a DuckDB file; connects on first use, one cursor per export."""

    def __init__(self, name: str, path: Path, *, batch_rows: int = BATCH_ROWS) -> None:
        self.name = name
        self.path = path
        self.batch_rows = batch_rows
        self._lock = threading.Lock()
        self._connection: duckdb.DuckDBPyConnection | None = None

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> DuckDBResultStream:
        """Start `sql` with bound parameters; the rows arrive as the stream is read.

        `timeout_seconds` covers running and reading the statement; 0 means no limit.
        """
        Deadline.validate(timeout_seconds)
        cursor = self._cursor()
        try:
            statement = single_select(cursor, sql)
            values = bound_values(set(statement.named_parameters), parameters, requester)
        except BaseException:
            cursor.close()
            raise
        deadline = Deadline(timeout_seconds, cursor.interrupt)
        try:
            relation = cursor.sql(statement, params=values or None)
            # A relation's reader streams as it is read; the DB-API result's reader copies.
            reader = relation.to_arrow_reader(self.batch_rows)
        except Exception as exc:
            deadline.cancel()
            cursor.close()
            raise deadline.error_for(exc) from exc
        return DuckDBResultStream(reader, cursor, deadline)

    def close(self) -> None:
        """Close the shared connection (streams still open keep their own cursors)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._connection is None:
                try:
                    self._connection = connect_sandboxed(self.path)
                except duckdb.Error as exc:
                    raise connect_error(self.name, exc) from exc
            return self._connection.cursor()
