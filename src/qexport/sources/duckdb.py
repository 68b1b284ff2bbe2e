"""The DuckDB source: one read-only, sandboxed database file queried by many exports at once."""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from qexport.sources.duckdb_copy import NATIVE_FORMATS, copy_to_sink
from qexport.sources.duckdb_errors import connect_error
from qexport.sources.duckdb_statements import bound_values, single_select
from qexport.sources.duckdb_stream import Deadline, DuckDBResultStream

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.ports import Sink

BATCH_ROWS = 131_072

# Read-only is not enough: without these a SELECT could read any file the process can
# (read_csv('/etc/passwd')), write one (COPY ... TO), ATTACH another database, or fetch and load
# an extension. The configuration is then locked so no statement can turn them back on.
SANDBOX_CONFIG: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,
}


_MEMORY = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$", re.IGNORECASE)
DEFAULT_MEMORY_LIMIT = "256MB"


def connect_sandboxed(
    path: Path, pipe_dir: Path | None = None, *, memory_limit: str = DEFAULT_MEMORY_LIMIT
) -> duckdb.DuckDBPyConnection:
    """Open `path` read-only inside the sandbox, with the configuration locked.

    `pipe_dir`, a private directory of this process, is the one place COPY may write: the
    named pipes of duckdb_copy. User SQL cannot use it (a query is a single SELECT).
    """
    if not _MEMORY.match(memory_limit):
        raise ValueError(f"invalid DuckDB memory limit {memory_limit!r} (examples: 256MB, 2GB)")
    con = duckdb.connect(str(path), read_only=True, config=SANDBOX_CONFIG)
    try:
        # DuckDB caches table blocks up to its limit (80% of RAM by default): unbounded, a
        # worker's memory grew with the table it read (850 MiB for 10M rows, 490 for 1M).
        # Bounded, larger sorts and joins spill to disk instead.
        con.execute(f"SET memory_limit = '{memory_limit}'")
        if pipe_dir is not None:
            con.execute("SET allowed_directories = $dirs", {"dirs": [f"{pipe_dir}/"]})
        con.execute("SET enable_external_access = false")
        # DuckDB would otherwise draw its progress bar on stdout.
        con.execute("SET enable_progress_bar = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


class DuckDBSource:
    """A Source over a DuckDB file; connects on first use, one cursor per export."""

    def __init__(
        self,
        name: str,
        path: Path,
        *,
        batch_rows: int = BATCH_ROWS,
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
    ) -> None:
        self.name = name
        self.path = path
        self.batch_rows = batch_rows
        self.memory_limit = memory_limit
        self._lock = threading.Lock()
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._pipe_dir: Path | None = None

    native_formats = NATIVE_FORMATS

    def copy(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        fmt: str,
        neutralize_formulas: bool,
        sink: Sink,
        timeout_seconds: float,
        max_rows: int,
        on_progress: Callable[[int], None] | None = None,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
    ) -> int:
        """Write the result as `fmt` with DuckDB's own writer into `sink`; return the rows."""
        cursor, statement, values = self._prepare(
            sql, parameters, requester, timeout_seconds, on_interrupt
        )
        try:
            deadline = Deadline(timeout_seconds, cursor.interrupt)
            try:
                assert self._pipe_dir is not None  # made with the connection
                return copy_to_sink(
                    cursor,
                    statement,
                    values,
                    fmt=fmt,
                    neutralize=neutralize_formulas,
                    sink=sink,
                    fifo_dir=self._pipe_dir,
                    deadline=deadline,
                    max_rows=max_rows,
                    on_progress=on_progress,
                )
            except duckdb.Error as exc:
                raise deadline.error_for(exc) from exc
            finally:
                deadline.cancel()
        finally:
            cursor.close()

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
    ) -> DuckDBResultStream:
        """Start `sql` with bound parameters; the rows arrive as the stream is read.

        `timeout_seconds` covers running and reading the statement; 0 means no limit.
        """
        cursor, statement, values = self._prepare(
            sql, parameters, requester, timeout_seconds, on_interrupt
        )
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

    def _prepare(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None,
    ) -> tuple[duckdb.DuckDBPyConnection, Any, dict[str, Any]]:
        """A cursor, the checked statement and its bound values; the interrupt handed out
        before anything runs (a blocking query runs inside the Arrow reader's set-up)."""
        Deadline.validate(timeout_seconds)
        cursor = self._cursor()
        try:
            statement = single_select(cursor, sql)
            values = bound_values(set(statement.named_parameters), parameters, requester)
            if on_interrupt is not None:
                on_interrupt(cursor.interrupt)
        except BaseException:
            cursor.close()
            raise
        return cursor, statement, values

    def close(self) -> None:
        """Close the shared connection (streams still open keep their own cursors)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            if self._pipe_dir is not None:
                shutil.rmtree(self._pipe_dir, ignore_errors=True)
                self._pipe_dir = None

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._connection is None:
                try:
                    self._pipe_dir = Path(tempfile.mkdtemp(prefix="qexport-pipes-"))
                    # Removed at exit too: the CLI and the worker never close their sources.
                    weakref.finalize(self, shutil.rmtree, self._pipe_dir, ignore_errors=True)
                    self._connection = connect_sandboxed(
                        self.path, self._pipe_dir, memory_limit=self.memory_limit
                    )
                except duckdb.Error as exc:
                    raise connect_error(self.name, exc) from exc
            return self._connection.cursor()
