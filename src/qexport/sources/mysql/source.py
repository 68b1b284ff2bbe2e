"""The MySQL/MariaDB source itself (qexport.sources.mysql says what it does): its sessions'
result streams, describe, preview and the login's judgement."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

import MySQLdb
import pyarrow as pa

from qexport.domain.exports import NO_MEMBER
from qexport.domain.failures import QExportError
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import ReadsReported, ReadsReporting, Relation
from qexport.sources.describe_preview import (
    Asked,
    DescribeAndPreview,
    Piece,
    PreviewCaps,
    PreviewRead,
)
from qexport.sources.mysql.catalogue import catalogue_of
from qexport.sources.mysql.errors import connect_error, query_error
from qexport.sources.mysql.reads import ER_SPECIFIC_ACCESS_DENIED, planned_reads
from qexport.sources.mysql.role import refusal, role_findings
from qexport.sources.mysql.session import Session, connect, connect_options
from qexport.sources.mysql.statements import render
from qexport.sources.mysql.types import Column, RawBatches, columns_of
from qexport.sources.other_sessions import refuse_mysql_readers
from qexport.sources.role_judge import RoleJudge

if TYPE_CHECKING:
    from qexport.domain.exports import Requester


# Rows per batch, and per fetch_row call. 500 rows a call: a call makes its rows' tuples all
# at once, and past ~700 of them the garbage collector runs, over and over (5M rows fetched
# and made into arrays: 2.8 s of CPU in calls of 500 rows, 3.8 s in calls of 1,000, 7.1 s in
# calls of 10,000).
BATCH_ROWS = 10_000
FETCH_ROWS = 500
# Of values per batch, and per fetch_row call, for rows wide enough to reach them (TEXT, BLOB):
# cut by what their values really weigh.
BATCH_BYTES = 32 * 1024 * 1024
FETCH_BYTES = 4 * 1024 * 1024
PREVIEW_FETCH_ROWS = 10

OnInterrupt = Callable[[Callable[[], None]], None]


class _Reader:
    """Batches of at most `batch_rows` rows of an unbuffered result, in calls that stay under
    the garbage collector's threshold and, for wide rows, the byte bounds."""

    def __init__(self, result: Any, columns: list[Column], batch_rows: int) -> None:
        self.builder = RawBatches(columns)
        self._result = result
        self._batch_rows = max(1, batch_rows)
        # Rows whose declared width (TEXT, BLOB, JSON: up to 4 GiB a value) could reach the
        # byte bounds have their values weighed, and are fetched one at a time at first;
        # narrow rows (numbers, dates, short strings) are not weighed at all.
        row_width = sum(max(c.length, 1) for c in columns)
        self._weigh = row_width * FETCH_ROWS > FETCH_BYTES
        self._fetch = _FIRST_WIDE_FETCH if self._weigh else FETCH_ROWS
        self._row_bytes = 1  # what a row weighs, as the last fetch found
        self.done = False

    def next_batch(self, limit: int | None = None) -> pa.RecordBatch | None:
        """The next batch (at most `limit` rows); None once the result is read."""
        if self.done:
            return None
        wanted = min(self._batch_rows, limit) if limit is not None else self._batch_rows
        cells: list[Any] = []
        rows = size = 0
        while rows < wanted and size < BATCH_BYTES:
            count = min(self._fetch, wanted - rows)
            if self._weigh:  # no further past BATCH_BYTES than one row
                count = max(1, min(count, (BATCH_BYTES - size) // self._row_bytes))
            fetched = self._result.fetch_row(count, 0)
            if not fetched:
                self.done = True
                break
            if self._weigh:
                weight = sum(len(v) for row in fetched for v in row if v is not None)
                size += weight
                # As many rows as FETCH_BYTES holds, going by the rows just read.
                self._row_bytes = max(1, weight // len(fetched))
                self._fetch = max(1, min(FETCH_ROWS, FETCH_BYTES // self._row_bytes))
            cells.extend(chain.from_iterable(fetched))
            rows += len(fetched)
        if rows == 0:
            return None
        return self.builder.batch(cells, rows)


_FIRST_WIDE_FETCH = 1


class MySQLResultStream:
    """The batches of one running statement; read once, then closed."""

    def __init__(self, session: Session, reader: _Reader) -> None:
        self.schema: pa.Schema = reader.builder.schema
        self._session = session
        self._reader = reader
        self._closed = False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._closed:
            raise QExportError("the result stream was already closed")
        try:
            while True:
                self._session.check()
                batch = self._reader.next_batch()
                if batch is None:
                    break
                yield batch
        except (MySQLdb.Error, QExportError) as exc:
            error = self._session.error_for(exc)
            self.close()
            raise error from exc
        self.close()

    def close(self) -> None:
        """Stop the clock and close the connection; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._session.close()


class MySQLSource(DescribeAndPreview[Session]):
    """A Source over a MySQL or MariaDB database; nothing connects until used."""

    translated = (BaseException,)
    native_copy = None  # every format through qexport's writers

    def __init__(self, name: str, url: str, *, allow_privileged_role: bool = False) -> None:
        self.name = name
        self.allow_privileged_role = allow_privileged_role
        self._options = connect_options(url)
        # Tables, not columns (mysql/reads.py); names fold case; a name without a database
        # is in the URL's (none: a rule must name it).
        database = self._options.get("database") or self._options.get("db")
        self.reads_reporting = ReadsReporting(
            ReadsReported.TABLES, default_schema=str(database).lower() if database else None
        )
        password = str(self._options["password"])
        self._secrets = tuple(s for s in (url, password) if s)
        self._role = RoleJudge(
            name,
            self._secrets,
            allow_privileged=allow_privileged_role,
            refusal=refusal,
            driver_error=MySQLdb.Error,
            connect_error=connect_error,
            query_error=query_error,
        )

    def __repr__(self) -> str:
        return f"MySQLSource(name={self.name!r})"

    def _session(self, timeout_seconds: float, on_interrupt: OnInterrupt | None = None) -> Session:
        return Session(
            self.name,
            self._options,
            self._secrets,
            timeout_seconds=timeout_seconds,
            on_interrupt=on_interrupt,
        )

    def _render(
        self, sql: str, parameters: Mapping[str, Any], requester: Requester, session: Session
    ) -> str:
        """The checked query with its values, as it is sent: one SELECT that reads no other
        session's statements (other_sessions.py)."""
        text = render(sql, parameters, requester, session.literal)
        refuse_mysql_readers(sql, self.reads_reporting.default_schema)
        return text

    def _open(
        self, session: Session, requester: Requester, *, select_limit: int | None = None
    ) -> None:
        try:
            session.open(requester, select_limit=select_limit)
            self._judge_role(session.conn)
        except BaseException:
            session.close()
            raise

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: OnInterrupt | None = None,
        batch_rows: int | None = None,
    ) -> MySQLResultStream:
        """Start `sql` with bound parameters; the rows arrive as the stream is read."""
        session = self._session(timeout_seconds, on_interrupt)
        self._open(session, requester)
        try:
            text = self._render(sql, parameters, requester, session)
            result = session.query(text)
            reader = _Reader(result, columns_of(result), batch_rows or BATCH_ROWS)
        except BaseException as exc:
            error = session.error_for(exc)
            session.close()
            raise error from exc
        return MySQLResultStream(session, reader)

    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> Session:
        """A session whose statement returns at most `caps.limit` rows (`sql_select_limit`),
        or none at all for a describe, whose errors are then told by their number only."""
        session = self._session(asked.timeout_seconds)
        self._open(session, asked.requester, select_limit=0 if caps is None else caps.limit)
        session.checking = caps is None
        return session

    def _describe_in(self, session: Session, asked: Asked) -> list[ResultColumn]:
        """The columns, from the result's metadata under `sql_select_limit = 0`: no row read.
        The server still evaluates constant parts of the statement: most of its errors are
        told by their number only (mysql/checking.py)."""
        text = self._render(asked.sql, asked.parameters, asked.requester, session)
        columns = columns_of(session.query(text))
        for column in columns:
            column.arrow_type()  # a type qexport cannot export is refused here already
        return [ResultColumn(c.name, c.type_name) for c in columns]

    def relations(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """The tables the query reads, from `EXPLAIN FORMAT=JSON` and the server's rewriting
        of the statement, in the export's read-only session (mysql/reads.py); nothing runs.
        None when they cannot be told (a view qexport's login may not SHOW, a stored
        function). Errors as for `describe`: EXPLAIN evaluates constant subqueries too."""
        session = self._session(timeout_seconds)
        self._open(session, requester)
        session.checking = True
        try:
            text = self._render(sql, parameters, requester, session)

            def rows(statement: str) -> Sequence[tuple[Any, ...]]:
                result = session.query(statement)
                fetched = () if result is None else result.fetch_row(maxrows=0)
                return [tuple(_text(value) for value in row) for row in fetched]

            return planned_reads(rows, text, session.literal)
        except MySQLdb.Error as exc:
            raise session.error_for(exc) from exc
        except QExportError as exc:
            cause = exc.__cause__
            if isinstance(cause, MySQLdb.Error) and cause.args[:1] == (ER_SPECIFIC_ACCESS_DENIED,):
                return None  # EXPLAIN over a view the login may not SHOW: it cannot say
            raise
        finally:
            session.close()

    def catalogue(self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float) -> Catalogue:
        """What the server's catalogue holds of each `(database, table)`, and the identity
        of its data (mysql/catalogue.py), in a read-only session of the source's login with
        no member's context (the login judged first, as for any session)."""
        session = self._session(timeout_seconds)
        self._open(session, NO_MEMBER)
        try:

            def rows(statement: str) -> Sequence[tuple[Any, ...]]:
                result = session.query(statement)
                fetched = () if result is None else result.fetch_row(maxrows=0)
                return [tuple(_text(value) for value in row) for row in fetched]

            database = self.reads_reporting.default_schema
            return catalogue_of(rows, session.literal, tables, database)
        except MySQLdb.Error as exc:
            raise session.error_for(exc) from exc
        finally:
            session.close()

    def _preview_in(self, session: Session, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        """The query as written, under `sql_select_limit` of one row more, read a few rows at
        a time; long values come whole (cut by the template)."""
        text = self._render(asked.sql, asked.parameters, asked.requester, session)
        result = session.query(text)
        columns = columns_of(result)
        reader = _Reader(result, columns, PREVIEW_FETCH_ROWS)
        described = tuple(ResultColumn(c.name, c.type_name) for c in columns)
        pieces = _pieces(session, reader, caps.limit)
        return PreviewRead(described, reader.builder.schema, pieces, cut_here=True, result=result)

    def check_role(self) -> list[str]:
        """Connect and judge the login as a worker will: SourceRefusedError for a privileged
        one (unless allowed); the findings, for a warning, when it is allowed."""
        return self._role.check(lambda: connect(self._options), self._judge_role)

    def _judge_role(self, conn: Any) -> list[str]:
        """Refuse the session unless its login may only read (sources/role_judge.py); at
        every session, as PostgresSource does (postgres/source.py says why)."""
        return self._role.judge(str(self._options["user"]), lambda: role_findings(conn))


def _text(value: Any) -> Any:
    """A value of a result read undecoded (the connection hands over bytes), as text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _pieces(session: Session, reader: _Reader, limit: int) -> Generator[Piece, None, None]:
    """Batches of at most `limit` rows in all, the deadline and the interrupt checked first."""
    rows = 0
    while True:
        session.check()
        batch = reader.next_batch(limit - rows)
        if batch is None:
            return
        rows += batch.num_rows
        yield (batch,), batch.num_rows, batch.nbytes
