"""The DuckDB source: one read-only, sandboxed database file queried by many exports at once."""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from qexport.domain.failures import QExportError, QueryInvalidError
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import ReadsReported, ReadsReporting, Relation
from qexport.sources.describe_preview import (
    Asked,
    DescribeAndPreview,
    PreviewCaps,
    PreviewRead,
    weighed,
)
from qexport.sources.duckdb.catalogue import catalogue_of, file_identity
from qexport.sources.duckdb.copy import NATIVE_FORMATS, copy_to_sink
from qexport.sources.duckdb.errors import FileAlreadyOpenError, connect_error
from qexport.sources.duckdb.lake import Lake, duckdb_location
from qexport.sources.duckdb.preview import preview_sql
from qexport.sources.duckdb.reads import planned_reads, with_values
from qexport.sources.duckdb.statements import PathCheck, bound_values, single_select
from qexport.sources.duckdb.stream import DuckDBDeadline, DuckDBResultStream
from qexport.sources.scratch import Scratch, make_scratch

if TYPE_CHECKING:
    from qexport.config import Settings
    from qexport.domain.exports import Requester
    from qexport.ports import Sink

BATCH_ROWS = 131_072
# A preview reads in small batches, so that it stops soon after its byte bound.
PREVIEW_BATCH_ROWS = 10

# Read-only is not enough: without these a SELECT could read any file the process can
# (read_csv('/etc/passwd')), write one (COPY ... TO), ATTACH another database, or fetch and load
# an extension. The configuration is then locked so no statement can turn them back on.
SANDBOX_CONFIG: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,
}


@dataclass
class _ThisProcess:
    """How every database this process opens is set up, beyond the source's own settings."""

    # Threads a database runs statements on (None: DuckDB's default, one per core).
    threads: int | None = None


_THIS_PROCESS = _ThisProcess()


def limit_threads(threads: int) -> None:
    """Open every later database of this process with `threads` threads. A preview process
    does (previews/child.py): each thread's stack, 8 MiB, counts against its memory limit
    (RLIMIT_DATA), and DuckDB starts its threads when a database opens: 64 of them, 512 MiB,
    on a 64-core machine."""
    if threads < 1:
        raise ValueError("a DuckDB database needs at least one thread")
    _THIS_PROCESS.threads = threads


def process_config() -> dict[str, Any]:
    """The settings of this process (`limit_threads`) for `duckdb.connect`'s config."""
    return {} if _THIS_PROCESS.threads is None else {"threads": _THIS_PROCESS.threads}


_MEMORY = re.compile(r"^\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$", re.IGNORECASE)
DEFAULT_MEMORY_LIMIT = "256MB"
DEFAULT_TEMP_LIMIT = "10GiB"


def check_size(value: str, what: str) -> str:
    """A DuckDB size setting (256MB, 10GiB), checked before it is put into a statement."""
    if not _MEMORY.match(value):
        raise ValueError(f"invalid DuckDB {what} {value!r} (examples: 256MB, 2GB, 10GiB)")
    return value


def connect_sandboxed(
    path: Path,
    pipe_dir: Path | None = None,
    *,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    spill_dir: Path | None = None,
    temp_limit: str = DEFAULT_TEMP_LIMIT,
    lake: Lake | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open `path` read-only inside the sandbox, with the configuration locked.

    `pipe_dir`, a private directory of this process, is the one place COPY may write: the
    named pipes of duckdb_copy. `spill_dir`, another, is where DuckDB spills what exceeds
    `memory_limit`, at most `temp_limit` of it. The sandbox alone does not keep a query out
    of either (the pipes are an allowed directory): duckdb_statements refuses, before a
    statement runs, every file reader and every way to learn their paths. A `lake`'s folders
    are allowed too: its queries may read files there (duckdb/lake.py).
    """
    check_size(memory_limit, "memory limit")
    check_size(temp_limit, "temp limit")
    con = duckdb.connect(str(path), read_only=True, config=SANDBOX_CONFIG | process_config())
    try:
        _refuse_locked(con, path)
        # DuckDB caches table blocks up to its limit (80% of RAM by default): unbounded, a
        # worker's memory grew with the table it read (850 MiB for 10M rows, 490 for 1M).
        # Bounded, larger sorts and joins spill to disk instead.
        con.execute(f"SET memory_limit = '{memory_limit}'")
        # Spill without a cap wrote 1.4 GB in 8 s for one sort; the default folder
        # (beside the database file, or the working directory) is shared by everyone.
        if spill_dir is not None:
            con.execute("SET temp_directory = $dir", {"dir": str(spill_dir / "duckdb")})
        con.execute(f"SET max_temp_directory_size = '{temp_limit}'")
        allowed = [f"{pipe_dir}/"] if pipe_dir is not None else []
        allowed += lake.duckdb_directories() if lake is not None else []
        if allowed:
            con.execute("SET allowed_directories = $dirs", {"dirs": allowed})
        con.execute("SET enable_external_access = false")
        # DuckDB would otherwise draw its progress bar on stdout.
        con.execute("SET enable_progress_bar = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _refuse_locked(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """DuckDB hands out the instance this process already has open on a file: another
    source's, its sandbox locked around that source's own folders. Said as such, rather than
    as the first SET's "the configuration has been locked"."""
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchone()
    if locked and locked[0]:
        raise FileAlreadyOpenError(
            f"the file {path} is already open in this process through another source; a"
            " DuckDB file backs one source (share that one with other workspaces:"
            " qexport sources share NAME WORKSPACE)"
        )


# What identifies the file a connection has open: (st_dev, st_ino, st_size, st_mtime_ns).
FileIdentity = tuple[int, int, int, int]


def _identity(path: Path) -> FileIdentity | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class _Opened:
    """The database file as opened once: its sandboxed connection, and the cursors on it."""

    connection: duckdb.DuckDBPyConnection
    identity: FileIdentity | None
    cursors: int = 0


def from_url(
    name: str,
    url: str,
    settings: Settings,
    *,
    allow_privileged_role: bool = False,  # a file has no roles
) -> DuckDBSource:
    """The source over `duckdb:///path.duckdb[?allow=/dir,...]` (the `qexport.sources` entry
    point): a relative path is under the data folder; `allow` lists the lake's folders."""
    path, lake = duckdb_location(url, data_dir=settings.data_dir)
    return DuckDBSource(
        name,
        path,
        memory_limit=settings.duckdb_memory_limit,
        temp_limit=settings.duckdb_temp_limit,
        lake=lake,
    )


@dataclass
class _Run:
    """A statement checked and bound on a cursor of its own, under its deadline."""

    cursor: duckdb.DuckDBPyConnection
    statement: Any  # as duckdb/statements.py checked it
    values: dict[str, Any]
    deadline: DuckDBDeadline
    release: Callable[[], None]  # called once the cursor is closed
    sql: str  # as written: a mistake's position is found in it

    def error_for(self, exc: BaseException) -> QExportError:
        return self.deadline.error_for(exc, self.sql)

    def close(self) -> None:
        self.deadline.cancel()
        self.cursor.close()
        self.release()


class DuckDBSource(DescribeAndPreview[_Run]):
    """A Source over a DuckDB file; opened once per process, one cursor per export.

    The file is opened (and sandboxed) on first use and kept open, since exports only read it;
    each export takes a cursor on it. When the file is replaced (the demo database rebuilt,
    a new version moved into place), the next export opens the new file, as soon as no export
    still reads the old one: until then DuckDB would hand out the instance already open on the
    path.
    """

    def __init__(
        self,
        name: str,
        path: Path,
        *,
        batch_rows: int = BATCH_ROWS,
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        temp_limit: str = DEFAULT_TEMP_LIMIT,
        lake: Lake | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.lake = lake
        self.batch_rows = batch_rows
        self.memory_limit = memory_limit
        self.temp_limit = temp_limit
        self._lock = threading.Lock()
        self._opened: _Opened | None = None
        self._scratch: Scratch | None = None

    native_formats = NATIVE_FORMATS
    # Its unoptimised plan names every table and column bound (duckdb/reads.py); DuckDB
    # compares names ignoring case, and a name without a schema is in `main`.
    reads_reporting = ReadsReporting(ReadsReported.COLUMNS, default_schema="main")

    @property
    def native_copy(self) -> DuckDBSource:
        """This source: DuckDB's own COPY writes csv, tsv and parquet (duckdb/copy.py)."""
        return self

    @property
    def scratch_root(self) -> Path | None:
        """This process's private folder for the source's pipes and spill, once opened."""
        return self._scratch.root if self._scratch is not None else None

    def copy(  # noqa: PLR0913 - NativeCopy.copy's signature
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
        run = self._start(Asked(sql, parameters, requester, timeout_seconds), on_interrupt)
        try:
            assert self._scratch is not None  # made with the connection
            return copy_to_sink(
                run.cursor,
                run.statement,
                run.values,
                fmt=fmt,
                neutralize=neutralize_formulas,
                sink=sink,
                fifo_dir=self._scratch.pipes,
                deadline=run.deadline,
                max_rows=max_rows,
                on_progress=on_progress,
            )
        except duckdb.Error as exc:
            raise run.error_for(exc) from exc
        finally:
            run.close()

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> DuckDBResultStream:
        """Start `sql` with bound parameters; the rows arrive as the stream is read.

        `timeout_seconds` covers running and reading the statement; 0 means no limit.
        """
        run = self._start(Asked(sql, parameters, requester, timeout_seconds), on_interrupt)
        try:
            relation = run.cursor.sql(run.statement, params=run.values or None)
            # A relation's reader streams as it is read; the DB-API result's reader copies.
            reader = relation.to_arrow_reader(min(batch_rows or self.batch_rows, self.batch_rows))
        except Exception as exc:
            run.close()
            raise run.error_for(exc) from exc
        return DuckDBResultStream(reader, run.cursor, run.deadline, on_close=run.release)

    def _describe_in(self, run: _Run, asked: Asked) -> list[ResultColumn]:
        """The result's columns, from binding the statement; no row is read or computed.

        The statement check of `_start` (one SELECT, no file readers) came first: binding
        a file reader would open the file. A relation is lazy: `sql()` parses and binds it
        against the catalogue, and nothing runs until it is read, which it never is here.
        """
        return _columns(run.cursor.sql(run.statement, params=run.values or None))

    def relations(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """The tables and columns the statement scans, from its unoptimised logical plan
        (duckdb/reads.py), checked as `execute` checks it first; nothing runs."""
        run = self._start(Asked(sql, parameters, requester, timeout_seconds))
        try:
            return planned_reads(run.cursor, with_values(run.statement.query, run.values))
        except duckdb.Error as exc:
            raise run.error_for(exc) from exc
        finally:
            run.close()

    def check_role(self) -> list[str]:
        """Nothing to judge: DuckDB has no logins (what a query may read is the sandbox's)."""
        return []

    def catalogue(self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float) -> Catalogue:
        """What the file's catalogue holds of each `(schema, table)` (duckdb/catalogue.py);
        with no tables, only the file's identity, without opening it."""
        identity = file_identity(self.path)
        if not tables:
            return Catalogue(identity)
        DuckDBDeadline.validate(timeout_seconds)
        cursor, release = self._cursor()
        deadline = DuckDBDeadline(timeout_seconds, cursor.interrupt)
        try:
            return catalogue_of(cursor, tables, identity)
        except duckdb.Error as exc:
            raise deadline.error_for(exc, "") from exc
        finally:
            deadline.cancel()
            cursor.close()
            release()

    def _preview_in(self, run: _Run, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        """The query, checked and bound as `execute` runs it, as a subquery with long values
        cut and a LIMIT of one row more (duckdb/preview.py), read a few rows at a time."""
        relation = run.cursor.sql(run.statement, params=run.values or None)
        wrapped = preview_sql(
            run.statement.query,
            [kind.id for kind in relation.types],
            keep=caps.keep,
            limit=caps.limit,
        )
        checked = single_select(run.cursor, wrapped, self._reads())  # the check, on what runs
        bound = bound_values(set(checked.named_parameters), asked.parameters, asked.requester)
        reader = run.cursor.sql(checked, params=bound or None).to_arrow_reader(PREVIEW_BATCH_ROWS)
        return PreviewRead(tuple(_columns(relation)), reader.schema, weighed(reader), result=reader)

    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> _Run:
        return self._start(asked)

    def _start(
        self, asked: Asked, on_interrupt: Callable[[Callable[[], None]], None] | None = None
    ) -> _Run:
        """The statement checked and bound on a cursor of its own, under its deadline (which
        also makes its errors: named after this source in the log, naming to members only
        the paths of its lake's files); the interrupt handed out before anything runs (a
        blocking query runs inside the Arrow reader's set-up)."""
        DuckDBDeadline.validate(asked.timeout_seconds)
        cursor, release = self._cursor()
        try:
            statement = single_select(cursor, asked.sql, self._reads())
            values = bound_values(
                set(statement.named_parameters), asked.parameters, asked.requester
            )
            if on_interrupt is not None:
                on_interrupt(cursor.interrupt)
        except BaseException:
            cursor.close()
            release()
            raise
        deadline = DuckDBDeadline(
            asked.timeout_seconds, cursor.interrupt, source=self.name, shown=self._shown
        )
        return _Run(cursor, statement, values, deadline, release, asked.sql)

    def _shown(self, path: str) -> bool:
        """Whether an error may name `path` to members: a file of the lake (theirs to read);
        never the database file, the pipes or the spill."""
        reads = self._reads()
        if reads is None:
            return False
        try:
            reads(path)
        except QueryInvalidError:
            return False
        return True

    def _reads(self) -> PathCheck | None:
        """What files a query may read: on a lake, those in its folders (never this
        process's own pipes and spill); otherwise none."""
        lake = self.lake
        if lake is None:
            return None
        private = self.scratch_root
        return lambda path: lake.check_path(path, private)

    def close(self) -> None:
        """Close the shared connection (streams still open keep their own cursors)."""
        with self._lock:
            if self._opened is not None:
                self._opened.connection.close()
                self._opened = None
            if self._scratch is not None:
                self._scratch.remove()
                self._scratch = None

    def _cursor(self) -> tuple[duckdb.DuckDBPyConnection, Callable[[], None]]:
        """A cursor on the file as it is now, and what to call once it is closed."""
        identity = _identity(self.path)  # a stat per export: microseconds
        with self._lock:
            opened = self._opened
            if (
                opened is not None
                and opened.cursors == 0
                and identity not in (None, opened.identity)
            ):
                opened.connection.close()  # replaced, and nobody reads the old file any more
                self._opened = opened = None
            if opened is None:
                opened = self._opened = _Opened(self._connect(), identity)
            cursor = opened.connection.cursor()
            opened.cursors += 1
        return cursor, functools.partial(self._release, opened)

    def _release(self, opened: _Opened) -> None:
        with self._lock:
            opened.cursors -= 1

    def _connect(self) -> duckdb.DuckDBPyConnection:
        try:
            if self._scratch is None:
                self._scratch = make_scratch()
                # Removed at exit too: the CLI and the worker never close their sources. A
                # process killed outright leaves it to the next worker start (scratch.py).
                weakref.finalize(self, self._scratch.remove)
            return connect_sandboxed(
                self.path,
                self._scratch.pipes,
                memory_limit=self.memory_limit,
                spill_dir=self._scratch.spill,
                temp_limit=self.temp_limit,
                lake=self.lake,
            )
        except (duckdb.Error, FileAlreadyOpenError) as exc:
            raise connect_error(self.name, exc) from exc


def _columns(relation: duckdb.DuckDBPyRelation) -> list[ResultColumn]:
    return [
        ResultColumn(name, str(kind))
        for name, kind in zip(relation.columns, relation.types, strict=True)
    ]
