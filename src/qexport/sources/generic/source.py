"""Any database SQLAlchemy has a dialect for, as a source: `sqlalchemy+<dialect>[+driver]://...`
(`sqlalchemy+sqlite:////srv/shop.db`, `sqlalchemy+mysql+pymysql://reader:pw@host/shop`, MSSQL,
Oracle, Snowflake, Trino, ... with their dialect installed by the operator).

On SQLAlchemy Core: the query checked as one SELECT (postgres_statements.parse_query), its
`$name` placeholders bound as `:name` with `sqlalchemy.text` (never written into the text),
run with `stream_results=True` and read with `fetchmany`, so memory stays flat whatever the
row count, and typed in Arrow exactly or refused (generic/arrow.py). What each dialect offers
for read-only and the timeout is in generic/dialects.py. One connection per export, closed
after it (`NullPool`): a connection carries the session settings of the export that used it.

The driver executes one statement per call (sqlite3 and the MySQL drivers refuse a second one
unless told otherwise), which backs up the statement check: it reads the query with
PostgreSQL's lexical rules, so a MySQL string with backslash-escaped quotes, a `#` comment or
a quote in a backtick name may be refused as unterminated.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from qexport.domain.failures import QExportError, bounded_detail
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import CANNOT_SAY, Relation
from qexport.sources.deadline import Deadline
from qexport.sources.describe_preview import (
    Asked,
    DescribeAndPreview,
    PreviewCaps,
    PreviewRead,
    weighed,
)
from qexport.sources.duckdb.statements import bound_values
from qexport.sources.generic.arrow import BatchBuilder, Described, type_from_values
from qexport.sources.generic.dialects import Rules, rules_for
from qexport.sources.generic.errors import (
    connect_error,
    missing_dialect,
    missing_driver,
    query_error,
    timeout_error,
)
from qexport.sources.postgres.statements import ParsedQuery, parse_query

if TYPE_CHECKING:
    from qexport.config import Settings
    from qexport.domain.exports import Requester

PREFIX = "sqlalchemy+"
# Rows fetched (and batched) at a time. Small on purpose: the rows of a batch are Python
# objects until converted, and the more of them live at once the more the garbage collector
# scans. 1M SQLite rows took 4.6-5.0 s in batches of 10,000, 1.6-1.9 s in batches of 500
# (sqlite3's bare fetch loop: 1.3 s; bench/generic_export.py, 2 busy cores). Writers gather
# batches into row groups themselves.
BATCH_ROWS = 500
# Rows the column types are chosen from (generic/arrow.py): the first fetch only.
SAMPLE_ROWS = 10_000
PREVIEW_BATCH_ROWS = 10


def from_url(
    name: str,
    url: str,
    settings: Settings,
    *,
    allow_privileged_role: bool = False,  # no dialect-independent way to judge a login
) -> GenericSource:
    """The source over `sqlalchemy+<SQLAlchemy URL>` (the `qexport.sources` entry point);
    ValueError, never echoing the URL, when it cannot be used or its dialect or driver is
    not installed (naming the package to install)."""
    return GenericSource(name, engine_for(url))


def engine_for(url: str) -> sa.Engine:
    """An engine that connects only when asked; ValueError for an unusable URL."""
    if not url.startswith(PREFIX):
        raise ValueError(f"a generic source URL starts with {PREFIX}: {PREFIX}sqlite:////path.db")
    try:
        parsed = sa.make_url(url.removeprefix(PREFIX))
    except sa.exc.ArgumentError:
        raise ValueError("the SQLAlchemy URL cannot be parsed") from None
    try:
        dialect = parsed.get_dialect()
    except sa.exc.NoSuchModuleError as exc:
        raise missing_dialect(exc) from None
    if getattr(dialect, "is_async", False):
        raise ValueError(f"the driver {parsed.drivername!r} is asynchronous: name a DB-API one")
    try:
        if dialect.name == "sqlite":
            return _sqlite_engine(parsed)
        return sa.create_engine(parsed, poolclass=NullPool)
    except ImportError as exc:
        raise missing_driver(exc) from None
    except sa.exc.ArgumentError as exc:
        raise ValueError(f"the SQLAlchemy URL is not usable: {bounded_detail(str(exc))}") from None


def _sqlite_engine(url: sa.URL) -> sa.Engine:
    """A SQLite file opened read-only (`mode=ro`): a missing file is not created."""
    database = url.database or ""
    if not database or database == ":memory:" or not Path(database).is_absolute():
        raise ValueError(
            f"a SQLite source names an absolute file: {PREFIX}sqlite:////absolute/path.db"
        )
    import sqlite3

    target = f"file:{quote(database)}?mode=ro"

    def connect() -> sqlite3.Connection:
        # The deadline's interrupt comes from another thread, and so may the stream's reads.
        return sqlite3.connect(target, uri=True, check_same_thread=False)

    return sa.create_engine("sqlite://", creator=connect, poolclass=NullPool)


class _Session:
    """One statement's connection: read-only where the dialect can be told so, under the
    timeout, stoppable from another thread; closed once with `close()`."""

    def __init__(
        self,
        source: GenericSource,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None,
    ) -> None:
        Deadline.validate(timeout_seconds)
        self._source = source
        self.timeout_seconds = timeout_seconds
        self._interrupted = False
        self.checking = False  # describing: see Rules.checked_error
        self._lock = threading.Lock()
        try:
            self.conn = source.engine.connect()
        except sa.exc.SQLAlchemyError as exc:
            raise connect_error(source.name, exc, source.rules, source.secrets) from None
        self.deadline = Deadline(0, lambda: None)
        try:
            source.rules.begin(self.conn, timeout_seconds)
            self._stop = source.rules.interrupter(self.conn, source.engine)
            self.deadline = Deadline(timeout_seconds, self.interrupt)
            if on_interrupt is not None:
                on_interrupt(self.interrupt)
        except BaseException as exc:
            error = self.error_for(exc)
            self.close()
            raise error from exc

    def interrupt(self) -> None:
        """Stop the statement (the driver's way, where it has one); the next read stops."""
        with self._lock:
            self._interrupted = True
        if self._stop is not None:
            with contextlib.suppress(Exception):  # the statement may just have ended
                self._stop()

    def check(self) -> None:
        """Between batches: stop reading once interrupted or past the deadline."""
        with self._lock:
            interrupted = self._interrupted
        if self.deadline.expired:
            raise timeout_error(self.timeout_seconds)
        if interrupted:
            raise QExportError("the statement was interrupted")

    def execute(self, statement: sa.Executable) -> sa.CursorResult[Any]:
        self.check()
        return self.conn.execution_options(stream_results=True).execute(statement)

    def error_for(self, exc: BaseException) -> QExportError:
        with self._lock:
            interrupted = self._interrupted
        if interrupted and not self.deadline.expired:
            return QExportError("the statement was interrupted")
        source = self._source
        return query_error(
            source.name,
            exc,
            source.rules,
            source.secrets,
            timed_out=self.deadline.expired,
            timeout_seconds=self.timeout_seconds,
            checking=self.checking,
        )

    def close(self) -> None:
        self.deadline.cancel()
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            self.conn.close()  # rolls the read-only transaction back


def _described(result: sa.CursorResult[Any]) -> list[Described]:
    description = result.cursor.description if result.cursor is not None else None
    return [Described.of(item) for item in description or ()]


class GenericResultStream:
    """The batches of one running statement; read once, then closed."""

    def __init__(
        self,
        session: _Session,
        result: sa.CursorResult[Any],
        builder: BatchBuilder,
        first: list[Any],
        batch_rows: int,
    ) -> None:
        self.schema: pa.Schema = builder.schema
        self._session = session
        self._result = result
        self._builder = builder
        # The sampled rows, handed out a batch at a time.
        self._pending = [first[i : i + batch_rows] for i in range(0, len(first), batch_rows)]
        self._batch_rows = batch_rows
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._closed:
            raise QExportError("the result stream was already closed")
        try:
            while True:
                rows = self._pending.pop(0) if self._pending else self._fetch()
                if not rows:
                    break
                yield self._builder.batch(rows)
        except Exception as exc:
            error = self._session.error_for(exc)
            self.close()
            raise error from exc
        self.close()

    def _fetch(self) -> list[Any]:
        self._session.check()
        return list(self._result.fetchmany(self._batch_rows))

    def close(self) -> None:
        """Stop the clock and release the connection; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            self._result.close()
        self._session.close()


@dataclass
class _Run:
    """The checked query, its values bound to `:name` placeholders, and its session."""

    session: _Session
    query: sa.TextClause

    def error_for(self, exc: BaseException) -> QExportError:
        return self.session.error_for(exc)

    def close(self) -> None:
        self.session.close()


class GenericSource(DescribeAndPreview[_Run]):
    """A Source over a SQLAlchemy engine: one connection per statement."""

    translated = (BaseException,)
    native_copy = None  # every format through qexport's writers

    # Any SQLAlchemy dialect: no planner output qexport knows how to read, so it cannot say
    # what a statement reads; a policy's sensitive table of it covers every query on it.
    reads_reporting = CANNOT_SAY

    def __init__(self, name: str, engine: sa.Engine, *, batch_rows: int = BATCH_ROWS) -> None:
        self.name = name
        self.engine = engine
        self.rules: Rules = rules_for(engine.dialect)
        self.batch_rows = batch_rows
        password = engine.url.password
        self.secrets = (str(password),) if password else ()

    def __repr__(self) -> str:
        return f"GenericSource({self.name!r}, {self.engine.url.render_as_string()!r})"

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> GenericResultStream:
        """Start `sql` with bound parameters; the rows arrive as the stream is read."""
        statement = self._statement(sql, parameters, requester)
        size = min(batch_rows or self.batch_rows, self.batch_rows)
        session = _Session(self, timeout_seconds, on_interrupt)
        try:
            result = session.execute(statement)
            described = _described(result)  # before any fetch: a drained result lets go of it
            first = list(result.fetchmany(max(size, SAMPLE_ROWS)))
            builder = self._builder(described, first)
        except BaseException as exc:
            error = session.error_for(exc)
            session.close()
            raise error from exc
        return GenericResultStream(session, result, builder, first, size)

    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> _Run:
        query = self._statement(asked.sql, asked.parameters, asked.requester)
        session = _Session(self, asked.timeout_seconds, None)
        # A describe: the server may evaluate parts of the query all the same.
        session.checking = caps is None
        return _Run(session, query)

    def _describe_in(self, run: _Run, asked: Asked) -> list[ResultColumn]:
        """The columns, from the cursor of the query wrapped to return no row."""
        result = run.session.execute(_around(run.query).where(sa.false()))
        columns = _described(result)
        result.close()
        return [ResultColumn(c.name, self.rules.type_name(c)) for c in columns]

    def relations(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """None: this source cannot say what a statement reads (once the statement passed
        the check every other path makes)."""
        self._checked(sql)
        return None

    def check_role(self) -> list[str]:
        """Not judged: a login of another engine is the operator's to restrict (DESIGN 7)."""
        return []

    def catalogue(self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float) -> Catalogue:
        """The identity of the data, for the dialects qexport knows how to ask (PostgreSQL
        and MySQL/MariaDB as their own sources say it, a SQLite file by its path), so that
        the rules on another source over the same data cover this one; no table is looked
        up (`tables` is not checked: this source cannot say what a query reads, and every
        query on it reads, for the policy, every marked table of it)."""
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            return Catalogue(f"sqlite:{os.path.realpath(self.engine.url.database or '')}")
        if dialect not in ("postgresql", "mysql", "mariadb"):
            return Catalogue(None)
        from qexport.sources.mysql import catalogue as mysql_catalogue
        from qexport.sources.postgres import catalogue as postgres_catalogue

        session = _Session(self, timeout_seconds, None)
        try:

            def rows(statement: str) -> Sequence[tuple[Any, ...]]:
                return [tuple(r) for r in session.conn.exec_driver_sql(statement).fetchall()]

            if dialect == "postgresql":
                return Catalogue(postgres_catalogue.data_identity(rows))
            database = (self.engine.url.database or "").lower() or None
            return Catalogue(mysql_catalogue.data_identity(rows, database))
        except Exception as exc:
            raise session.error_for(exc) from exc
        finally:
            session.close()

    def _preview_in(self, run: _Run, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        """The query under a LIMIT of one row more (written in the dialect's own way), read a
        few rows at a time; long texts and binaries come whole (cut by the template)."""
        result = run.session.execute(_around(run.query).limit(caps.limit))
        described = _described(result)
        first = list(result.fetchmany(PREVIEW_BATCH_ROWS))
        builder = self._builder(described, first)
        columns = tuple(ResultColumn(c.name, self.rules.type_name(c)) for c in described)
        batches = weighed(_preview_batches(run.session, result, builder, first))
        return PreviewRead(columns, builder.schema, batches, cut_here=True, result=result)

    def _statement(
        self, sql: str, parameters: Mapping[str, Any], requester: Requester
    ) -> sa.TextClause:
        """The checked query as a `text()` with its values bound to `:name` placeholders."""
        parsed = self._checked(sql)
        values = bound_values(set(parsed.names), parameters, requester)
        # The query's own colons are escaped, so that text() takes none of them (a time
        # literal, a PostgreSQL cast) for a placeholder of its own.
        pieces = [parsed.segments[0].replace(":", "\\:")]
        for name, segment in zip(parsed.names, parsed.segments[1:], strict=True):
            pieces += [f":{name}", segment.replace(":", "\\:")]
        # On lines of their own, so that a trailing comment cannot swallow what wraps it.
        return sa.text("\n" + "".join(pieces) + "\n").bindparams(**values)

    def _checked(self, sql: str) -> ParsedQuery:
        """`sql` as one query, and not one the dialect refuses (other sessions' SQL)."""
        parsed = parse_query(sql)
        self.rules.check_statement(sql, self.engine.url.database)
        return parsed

    def _builder(self, columns: list[Described], first: list[Any]) -> BatchBuilder:
        types = []
        for index, column in enumerate(columns):
            told = self.rules.arrow_type(column)
            types.append(told or type_from_values(column, [row[index] for row in first]))
        return BatchBuilder(columns, types)


def _around(statement: sa.TextClause) -> sa.Select[Any]:
    """`SELECT * FROM (<query>) AS qexport_result`, for the dialect to add a LIMIT or WHERE."""
    return sa.select(sa.literal_column("*")).select_from(
        statement.columns().subquery("qexport_result")
    )


def _preview_batches(
    session: _Session, result: sa.CursorResult[Any], builder: BatchBuilder, first: list[Any]
) -> Iterator[pa.RecordBatch]:
    """The sampled rows, then a few rows a fetch, the deadline checked before each fetch."""
    fetched = first
    while fetched:
        yield builder.batch(fetched)
        session.check()
        fetched = list(result.fetchmany(PREVIEW_BATCH_ROWS))
