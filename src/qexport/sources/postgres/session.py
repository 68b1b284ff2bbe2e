"""One export's session on a PostgreSQL source: a connection, a read-only transaction, the
requester context, and the error translation that knows how the statement ended."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from qexport.domain.failures import QExportError, QueryInvalidError, TextPosition
from qexport.sources.duckdb.statements import bound_values
from qexport.sources.other_sessions import refuse_postgres_readers
from qexport.sources.postgres.catalog_path import catalog_path
from qexport.sources.postgres.errors import connect_error, query_error
from qexport.sources.postgres.statements import Rendered, parse_query
from qexport.sources.postgres.types import Column, positional_names

if TYPE_CHECKING:
    from qexport.domain.exports import Requester

_CANCEL_TIMEOUT_SECONDS = 5.0
# What the query is described inside: on a line of its own, so a trailing comment cannot
# swallow the ")"; the server's error positions count from the start of this.
_DESCRIBED = "SELECT * FROM (\n"

# Everything the statement depends on is fixed for the transaction only (SET LOCAL): the
# read-only mode, the timeout, how values print (COPY writes PostgreSQL's text, so dates,
# timestamps and intervals must not depend on the server's or the role's defaults: ISO dates,
# UTC, ISO 8601 durations, floats in their shortest exact form, bytea in hex), and the
# requester context that row-level security policies read with current_setting(...).
# SET LOCAL, not set_config(): a deployment can then revoke EXECUTE on set_config from the
# source's role, so that no query can overwrite the requester context it runs under.
_SETUP = sql.SQL(
    "BEGIN TRANSACTION READ ONLY;"
    " SET LOCAL statement_timeout = {timeout};"
    " SET LOCAL TIME ZONE 'UTC';"
    " SET LOCAL datestyle = 'ISO';"
    " SET LOCAL intervalstyle = 'iso_8601';"
    " SET LOCAL extra_float_digits = 1;"
    " SET LOCAL bytea_output = 'hex';"
    " SET LOCAL standard_conforming_strings = on;"
    " SET LOCAL qexport.user_id = {user_id};"
    " SET LOCAL qexport.workspace_id = {workspace_id}"
)

# Each result column's type as PostgreSQL writes it, from its oid and modifier (catalog names
# with their schema, run with search_path pinned: postgres/catalog_path.py).
TYPE_NAMES = (
    "SELECT pg_catalog.format_type(t, m)"
    " FROM ROWS FROM (pg_catalog.unnest(%s::pg_catalog.oid[]),"
    " pg_catalog.unnest(%s::pg_catalog.int4[]))"
    " WITH ORDINALITY AS c(t, m, n) ORDER BY n"
)


def validate_timeout(seconds: float) -> None:
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"timeout_seconds must be >= 0, got {seconds}")


def _timeout_ms(seconds: float) -> int:
    """statement_timeout in milliseconds; 0 (no limit) for 0 or infinity."""
    if seconds == 0 or math.isinf(seconds):
        return 0
    return max(1, round(seconds * 1000))


class Session:
    """A connection in a read-only transaction, for one statement; closed by `close()`."""

    def __init__(
        self,
        name: str,
        conninfo: str,
        options: Mapping[str, Any],
        secrets: Iterable[str],
        *,
        timeout_seconds: float,
    ) -> None:
        self.name = name
        self.timeout_seconds = timeout_seconds
        self._conninfo = conninfo
        self._options = options
        self._secrets = tuple(secrets)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._interrupted = False
        self._started = time.monotonic()

    @property
    def conn(self) -> psycopg.Connection[Any]:
        assert self._conn is not None  # set by open()
        return self._conn

    def open(self, requester: Requester) -> None:
        """Connect and begin the transaction; raises the qexport error for a failure."""
        self._check_interrupted()
        try:
            conn = psycopg.connect(self._conninfo, **self._options)
        except psycopg.Error as exc:
            raise connect_error(self.name, exc, self._secrets) from None
        with self._lock:
            self._conn = conn
        try:
            conn.execute(
                _SETUP.format(
                    timeout=sql.Literal(_timeout_ms(self.timeout_seconds)),
                    user_id=sql.Literal(requester.user_id),
                    workspace_id=sql.Literal(requester.workspace_id),
                )
            )
        except psycopg.Error as exc:
            raise self.error_for(exc) from exc

    def render(self, text: str, parameters: Mapping[str, Any], requester: Requester) -> str:
        """The query with every `$name` replaced by its value, quoted by psycopg."""
        return self.render_mapped(text, parameters, requester).text

    def render_mapped(
        self, text: str, parameters: Mapping[str, Any], requester: Requester
    ) -> Rendered:
        """`render`, keeping where the query's own text went (to place the server's errors)."""
        parsed = parse_query(text)
        refuse_postgres_readers(text)
        values = bound_values(set(parsed.names), parameters, requester)
        try:
            return parsed.render_mapped(
                values, lambda value: sql.Literal(value).as_string(self.conn)
            )
        except psycopg.Error as exc:
            raise self.error_for(exc) from exc

    def type_names(self, written: str, rendered: Rendered) -> list[tuple[str, str]]:
        """Each result column's name and type as PostgreSQL writes it (`numeric(10,2)`), from
        planning the query (`written` as the user wrote it, `rendered` with its values)
        without running it to any row; a refusal carries its position in `written`."""
        return [(column.name, name) for column, name in self.typed_columns(written, rendered)]

    def typed_columns(self, written: str, rendered: Rendered) -> list[tuple[Column, str]]:
        """`type_names`, with each column as `describe` gives it (its type's oid, precision
        and scale): one planning of the query for both."""
        self.start_statement()
        try:
            with self.conn.cursor() as cursor:
                # binary=True: the extended protocol, which refuses more than one statement
                # (the simple one would run a second statement parse_query missed, COMMIT
                # included, outside the read-only transaction).
                cursor.execute(
                    f"{_DESCRIBED}{rendered.text}\n) AS qexport_result LIMIT 0", binary=True
                )
                result = cursor.pgresult
                if result is None or not cursor.description:
                    raise QueryInvalidError("the query returns no columns")
                described = [
                    Column(c.name, c.type_code, c.precision, c.scale) for c in cursor.description
                ]
                names = [c.name for c in described]
                oids = [result.ftype(i) for i in range(len(names))]
                mods = [result.fmod(i) for i in range(len(names))]
                with catalog_path(self.conn):  # the type names, whatever the login's path
                    types = cursor.execute(TYPE_NAMES, [oids, mods]).fetchall()
        except psycopg.Error as exc:
            error = self.error_for(exc)
            at = exc.diag.statement_position
            if isinstance(error, QueryInvalidError) and at and at.isdigit():
                offset = rendered.original_offset(int(at) - 1 - len(_DESCRIBED))
                position = TextPosition.at(written, offset)
                error = QueryInvalidError(f"{error} ({position.words()})", position=position)
            raise error from exc
        return [(column, str(row[0])) for column, row in zip(described, types, strict=True)]

    def describe(self, query: str) -> list[Column]:
        """The result's columns, from planning the query without running it to any row.

        Sent with the extended protocol, which refuses more than one statement: a second line
        of defence behind parse_query before the text goes into a COPY.
        """
        self.start_statement()
        try:
            with self.conn.cursor() as cursor:
                cursor.execute(
                    f"SELECT * FROM (\n{query}\n) AS qexport_result LIMIT 0", binary=True
                )
                description = cursor.description or []
        except psycopg.Error as exc:
            raise self.error_for(exc) from exc
        if not description:
            raise QueryInvalidError("the query returns no columns")
        return [Column(c.name, c.type_code, c.precision, c.scale) for c in description]

    def start_statement(self) -> None:
        self._check_interrupted()
        self._started = time.monotonic()

    def interrupt(self) -> None:
        """Cancel the running statement; callable from any thread, at any time."""
        with self._lock:
            self._interrupted = True
            conn = self._conn
            if conn is None or conn.closed:
                return
            with contextlib.suppress(psycopg.Error):
                conn.cancel_safe(timeout=_CANCEL_TIMEOUT_SECONDS)

    def error_for(self, exc: psycopg.Error) -> QExportError:
        elapsed = time.monotonic() - self._started
        return query_error(
            self.name,
            exc,
            self._secrets,
            interrupted=self._interrupted,
            timed_out=0 < self.timeout_seconds <= elapsed,
            timeout_seconds=self.timeout_seconds,
        )

    def close(self) -> None:
        """Cancel what still runs and close the connection (which ends the transaction)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE:
            with contextlib.suppress(psycopg.Error):
                conn.cancel_safe(timeout=_CANCEL_TIMEOUT_SECONDS)
        conn.close()

    def _check_interrupted(self) -> None:
        if self._interrupted:
            raise QExportError("the statement was interrupted")


def wrapped(query: str, select: list[str], *, limit: int | None) -> str:
    """`select` (one expression per column) over the query, whose columns are renamed c1..cn,
    so that names that repeat, or that PostgreSQL made up (`?column?`), cannot clash."""
    aliases = ", ".join(positional_names(len(select)))
    # The query on lines of its own, so a trailing comment cannot swallow the ")".
    text = f"SELECT {', '.join(select)} FROM (\n{query}\n) AS qexport_result({aliases})"
    if limit is not None:
        text += f" LIMIT {int(limit)}"
    return text
