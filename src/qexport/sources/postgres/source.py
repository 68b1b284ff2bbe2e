"""The PostgreSQL source: each export on its own connection, in a read-only transaction.

Every run: connect, `BEGIN TRANSACTION READ ONLY`, `SET LOCAL statement_timeout`, the requester
context as `qexport.user_id` and `qexport.workspace_id` (for row-level security policies:
`USING (owner = current_setting('qexport.user_id'))`), then one `COPY (query) TO STDOUT`:
as csv/tsv straight into the export's file (formula-looking text neutralised in SQL), or as
csv parsed into the Arrow batches of the other formats (postgres/arrow.py). Nothing is held
in memory beyond a batch.

The source's role is judged at every session (describe, plan, preview, export), on the
connection that then runs the statement (postgres/role.py), not once per process: workers
and preview processes live for days, and a grant made after their first export (`GRANT admin
TO reader`), or row-level security turned on since (which makes set_config dangerous), went
unseen until they restarted. A new backend loads the catalogs the check reads, so it costs
about what opening the session does: a tiny export (one row, csv, through an in-process
worker) took 11.5 ms judged once per process and 23 ms judged each time (medians of 300, 2
cores under a load of 9); the copy alone, 5.9 and 9.8 ms under a load of 2. A verdict kept
for up to a minute would spare none of that, since every export and preview must be judged
anyway and an export opens one session (two when a sensitive table makes it plan first, the
one case it would spare), and it would judge a connection other than the one that runs.

Queries name parameters like DuckDB queries (`$customer_id`, `$user_id`, `$workspace_id`);
see postgres/statements.py for how their values are bound.

The source URL is a libpq URL (`postgresql://user:password@host:5432/db?sslmode=require`);
it never appears in a failure detail or a log line. Give the source a role that may only read
what exports should read: the read-only transaction refuses writes, not reading functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from qexport.domain.exports import NO_MEMBER
from qexport.domain.failures import LimitExceededError, QExportError
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import ReadsReported, ReadsReporting, Relation
from qexport.sources.describe_preview import Asked, DescribeAndPreview, PreviewCaps, PreviewRead
from qexport.sources.postgres.arrow import CsvBatches
from qexport.sources.postgres.catalogue import catalogue_of
from qexport.sources.postgres.copy import CopyOut, crlf_lines
from qexport.sources.postgres.errors import connect_error, query_error, scrub
from qexport.sources.postgres.reads import planned_reads
from qexport.sources.postgres.role import refusal, role_findings
from qexport.sources.postgres.session import Session, validate_timeout, wrapped
from qexport.sources.postgres.stream import PostgresResultStream
from qexport.sources.postgres.types import csv_select, positional_names, preview_select
from qexport.sources.role_judge import RoleJudge

if TYPE_CHECKING:
    from qexport.config import Settings
    from qexport.domain.exports import Requester
    from qexport.ports import Sink


# Of csv text per Arrow batch: some 40,000 rows of a typical ten-column result.
BATCH_BYTES = 4 * 1024 * 1024
NATIVE_FORMATS = frozenset({"csv", "tsv"})
_COPY_OPTIONS = {
    "csv": "FORMAT csv, HEADER true",
    "tsv": "FORMAT csv, HEADER true, DELIMITER E'\\t'",
}

# Connection options qexport needs, whatever the URL says.
_REQUIRED_OPTIONS: dict[str, Any] = {"autocommit": True, "client_encoding": "utf8"}
# Defaults the URL may override: a dead host or network must not hang an export for hours.
_DEFAULT_OPTIONS: dict[str, Any] = {
    "application_name": "qexport",
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}

OnInterrupt = Callable[[Callable[[], None]], None]


def from_url(
    name: str, url: str, settings: Settings, *, allow_privileged_role: bool = False
) -> PostgresSource:
    """The source over a libpq URL, `postgresql://` or `postgres://` (the `qexport.sources`
    entry point)."""
    return PostgresSource(name, url, allow_privileged_role=allow_privileged_role)


class _Run:
    """A session opened for one statement, and the cursor and COPY a preview started in it."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.exits = contextlib.ExitStack()

    def error_for(self, exc: BaseException) -> QExportError:
        assert isinstance(exc, psycopg.Error)  # the only errors it is given (translated)
        return self.session.error_for(exc)

    def close(self) -> None:
        self.session.close()  # before the COPY's exit: a COPY stopped early is cancelled
        with contextlib.suppress(psycopg.Error):
            self.exits.close()


class PostgresSource(DescribeAndPreview[_Run]):
    """A Source over a PostgreSQL database, named by a libpq URL; nothing connects until used."""

    translated = (psycopg.Error,)

    native_formats = NATIVE_FORMATS
    # EXPLAIN names the relations and, with VERBOSE, the columns of each scan; PostgreSQL
    # folds unquoted names to lower case, and a name without a schema is in `public`.
    reads_reporting = ReadsReporting(
        ReadsReported.COLUMNS, default_schema="public", case_sensitive=True
    )

    def __init__(
        self,
        name: str,
        url: str,
        *,
        batch_bytes: int = BATCH_BYTES,
        allow_privileged_role: bool = False,
    ) -> None:
        self.name = name
        self.batch_bytes = batch_bytes
        self.allow_privileged_role = allow_privileged_role
        self._url = url
        try:
            given = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise ValueError(
                f"invalid PostgreSQL URL for source {name!r}: {scrub(str(exc), [url])}"
            ) from None
        self._secrets = tuple(s for s in (url, str(given.get("password") or "")) if s)
        self._options = {
            **{k: v for k, v in _DEFAULT_OPTIONS.items() if k not in given},
            **_REQUIRED_OPTIONS,
        }
        self._role = RoleJudge(
            name,
            self._secrets,
            allow_privileged=allow_privileged_role,
            refusal=refusal,
            driver_error=psycopg.Error,
            connect_error=connect_error,
            query_error=query_error,
        )

    def __repr__(self) -> str:
        return f"PostgresSource(name={self.name!r})"

    @property
    def native_copy(self) -> PostgresSource:
        """This source: PostgreSQL's own COPY writes csv and tsv."""
        return self

    def execute(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: OnInterrupt | None = None,
        batch_rows: int | None = None,  # unused: the batches are bounded by bytes already
    ) -> PostgresResultStream:
        """Start `sql` with bound parameters; the rows arrive as the stream is read.

        `timeout_seconds` covers running and reading the statement; 0 means no limit.
        """
        session, query = self._start(sql, parameters, requester, timeout_seconds, on_interrupt)
        exits = contextlib.ExitStack()
        try:
            parser = CsvBatches(session.describe(query))
            statement = wrapped(query, positional_names(len(parser.schema)), limit=None)
            session.start_statement()
            cursor = exits.enter_context(session.conn.cursor())
            exits.enter_context(cursor.copy(f"COPY ({statement}) TO STDOUT (FORMAT csv)"))
        except BaseException as exc:
            session.close()
            with contextlib.suppress(psycopg.Error):
                exits.close()
            if isinstance(exc, psycopg.Error):
                raise session.error_for(exc) from exc
            raise
        return PostgresResultStream(session, parser, exits, batch_bytes=self.batch_bytes)

    def _describe_in(self, run: _Run, asked: Asked) -> list[ResultColumn]:
        """The result's columns, from planning the query in the export's read-only
        transaction (same role check, requester context and statement timeout); no row is
        produced: the query sits under `LIMIT 0`."""
        rendered = run.session.render_mapped(asked.sql, asked.parameters, asked.requester)
        return [ResultColumn(n, t) for n, t in run.session.type_names(asked.sql, rendered)]

    def relations(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """The relations and columns the query reads, from `EXPLAIN (VERBOSE, FORMAT JSON)`
        in the export's read-only transaction (same role check, requester context and
        statement timeout; postgres/reads.py); nothing runs."""
        session = self._opened(requester, timeout_seconds)
        try:
            rendered = session.render(sql, parameters, requester)
            session.start_statement()
            try:
                return planned_reads(session.conn, rendered)
            except psycopg.Error as exc:
                raise session.error_for(exc) from exc
        finally:
            session.close()

    def catalogue(self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float) -> Catalogue:
        """What the database's catalogue holds of each `(schema, table)`, and the identity
        of its data (postgres/catalogue.py), in a read-only transaction of the source's
        login with no member's context (the role check first, as for any session)."""
        session = self._opened(NO_MEMBER, timeout_seconds)
        try:
            session.start_statement()
            try:
                return catalogue_of(session.conn, tables)
            except psycopg.Error as exc:
                raise session.error_for(exc) from exc
        finally:
            session.close()

    def _preview_in(self, run: _Run, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        """In the export's read-only transaction (same role check, requester context and
        statement timeout): one COPY of the query under a LIMIT of one row more, long text
        cut in the server (postgres/types.py's preview_select), read a chunk at a time."""
        session = run.session
        rendered = session.render_mapped(asked.sql, asked.parameters, asked.requester)
        typed = session.typed_columns(asked.sql, rendered)
        described = [column for column, _ in typed]
        parser = CsvBatches(described)
        select = preview_select(described, max_chars=caps.max_cell_chars)
        statement = wrapped(rendered.text, select, limit=caps.limit)
        session.start_statement()
        cursor = run.exits.enter_context(session.conn.cursor())
        run.exits.enter_context(cursor.copy(f"COPY ({statement}) TO STDOUT (FORMAT csv)"))
        # Whole rows, weighed as csv; read to the COPY's end (its LIMIT ends it), so that it
        # finishes instead of being cancelled at close.
        chunks = CopyOut(session.conn).chunks(_PREVIEW_CHUNK_BYTES)
        pieces = ((parser.parse(chunk), count, len(chunk)) for chunk, count in chunks)
        columns = tuple(ResultColumn(column.name, name) for column, name in typed)
        return PreviewRead(columns, parser.schema, pieces, read_to_end=True)

    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> _Run:
        return _Run(self._opened(asked.requester, asked.timeout_seconds))

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
        on_interrupt: OnInterrupt | None = None,
    ) -> int:
        """Write the result as csv or tsv with PostgreSQL's own COPY into `sink`; return rows."""
        options = _COPY_OPTIONS[fmt]
        session, query = self._start(sql, parameters, requester, timeout_seconds, on_interrupt)
        try:
            columns = session.describe(query)
            select = csv_select(columns, neutralize=neutralize_formulas)
            # Cut at max_rows + 1: a result over the row limit stops early.
            statement = wrapped(query, select, limit=max_rows + 1)
            session.start_statement()
            with (
                session.conn.cursor() as cursor,
                cursor.copy(f"COPY ({statement}) TO STDOUT ({options})"),
            ):
                reader = CopyOut(session.conn)
                rows = _stream_text(reader, sink, crlf=fmt == "csv", on_progress=on_progress)
        except psycopg.Error as exc:
            raise session.error_for(exc) from exc
        finally:
            session.close()
        if rows > max_rows:
            raise LimitExceededError(f"the result has more than {max_rows:,} rows (the row limit)")
        return rows

    def _start(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        timeout_seconds: float,
        on_interrupt: OnInterrupt | None,
    ) -> tuple[Session, str]:
        """An open session and the query with its values; the interrupt handed out first."""
        session = self._opened(requester, timeout_seconds, on_interrupt)
        try:
            query = session.render(sql, parameters, requester)
        except BaseException:
            session.close()
            raise
        return session, query

    def _opened(
        self, requester: Requester, timeout_seconds: float, on_interrupt: OnInterrupt | None = None
    ) -> Session:
        """A session in its read-only transaction with `requester`'s context, its role judged;
        the interrupt handed out first. Closed again when that fails."""
        validate_timeout(timeout_seconds)
        session = Session(
            self.name, self._url, self._options, self._secrets, timeout_seconds=timeout_seconds
        )
        if on_interrupt is not None:
            on_interrupt(session.interrupt)
        try:
            session.open(requester)
            self._judge_role(session.conn)
        except BaseException:
            session.close()
            raise
        return session

    def check_role(self) -> list[str]:
        """Connect and judge the role as a worker will: SourceRefusedError for a privileged
        one (unless allowed); the findings, for a warning, when it is allowed."""
        return self._role.check(
            lambda: psycopg.connect(self._url, **self._options), self._judge_role
        )

    def _judge_role(self, conn: psycopg.Connection[Any]) -> list[str]:
        """Refuse the session unless its role may only read (sources/role_judge.py)."""
        return self._role.judge(conn.info.user, lambda: role_findings(conn))


# A preview reads the COPY in small chunks, so that it stops soon after its byte bound.
_PREVIEW_CHUNK_BYTES = 64 * 1024


def _stream_text(
    reader: CopyOut,
    sink: Sink,
    *,
    crlf: bool,
    on_progress: Callable[[int], None] | None,
) -> int:
    """Copy the COPY's text into `sink`; return the data rows (the header is not one)."""
    lines = 0
    for chunk, count in reader.chunks():
        sink.write(crlf_lines(chunk, count) if crlf else chunk)
        lines += count
        if on_progress is not None:
            on_progress(max(lines - 1, 0))
    return max(lines - 1, 0) if reader.rows_reported is None else reader.rows_reported
