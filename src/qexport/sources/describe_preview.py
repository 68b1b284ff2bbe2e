"""Describe and preview, written once for every source that runs a statement in a session of
its own (DuckDB, PostgreSQL, MySQL/MariaDB, SQLAlchemy's dialects, Spark Connect).

The steps are the same on every engine: open the statement's session (a cursor or a
connection, checked and bound, with the deadline that stops it: the deadline lives as long as
the session), then for `describe` read the result's columns without running it, and for
`preview` read its columns and the statement cut at one row more than shown (`PreviewCaps`),
a few rows at a time, until that row or about `max_bytes` of values; long values come cut to
one character more than shown. An engine's own exception is translated once, by the session
(`error_for`), and the session is closed whatever happened.

What differs is each engine's, given by its hooks (`DescribeAndPreview`'s `_open_statement`,
`_describe_in`, `_preview_in` and `translated`): how a session opens (a MySQL describe opens
one with `sql_select_limit = 0`, a PostgreSQL one judges its role first), where the row cap
and the cut of long values happen (in the statement, or here for a server that sends values
whole), what a piece read weighs (Arrow bytes, or PostgreSQL's csv bytes), whether reading
stops at the capped row or runs to the statement's end (PostgreSQL's COPY, which would
otherwise be cancelled), and which exceptions the session's translation takes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from qexport.ports import PreviewRows

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.domain.failures import QExportError
    from qexport.domain.queries import ResultColumn


class StatementSession(Protocol):
    """One statement's hold on its engine (a cursor, a connection) and its deadline."""

    def error_for(self, exc: BaseException) -> QExportError:
        """The qexport error for an exception raised while the statement was checked, ran
        or was read."""
        ...

    def close(self) -> None:
        """Stop the deadline and let go of the engine, once, whether the statement ran or
        failed."""
        ...


S = TypeVar("S", bound=StatementSession)
T = TypeVar("T")


@dataclass(frozen=True)
class Asked:
    """A statement as it is asked for: the query, its values, who runs it, within how long."""

    sql: str
    parameters: Mapping[str, Any]
    requester: Requester
    timeout_seconds: float


@dataclass(frozen=True)
class PreviewCaps:
    """How much of a result a preview shows."""

    max_rows: int
    max_cell_chars: int
    max_bytes: int

    @property
    def limit(self) -> int:
        """The rows the statement is cut at: one more than shown tells that there are more."""
        return self.max_rows + 1

    @property
    def keep(self) -> int:
        """The characters (bytes) of a long value kept: one more than shown tells it was cut."""
        return self.max_cell_chars + 1


# What a preview reads at a time: record batches, the rows in them, what they weigh.
Piece = tuple[Iterable[pa.RecordBatch], int, int]


def weighed(batches: Iterable[pa.RecordBatch]) -> Generator[Piece, None, None]:
    """Each batch as a piece of its rows and its Arrow bytes."""
    for batch in batches:
        yield (batch,), batch.num_rows, batch.nbytes


@dataclass
class PreviewRead:
    """A preview's statement as its engine started it: the result's columns (named and typed
    as the engine says), the schema of its batches, and its pieces as they are read."""

    columns: tuple[ResultColumn, ...]
    schema: pa.Schema
    pieces: Generator[Piece, None, None]
    # The engine sends long values whole (MySQL, SQLAlchemy's dialects): cut them here.
    cut_here: bool = False
    # Read to the statement's end even past the capped row (its LIMIT ends it soon after):
    # PostgreSQL's COPY, which would otherwise be cancelled when the session closes.
    read_to_end: bool = False
    # What the pieces are read from, let go only after the session is closed: freeing an
    # unread result first would read the rows left (a MySQL result, a server-side cursor).
    result: object = None


class DescribeAndPreview(ABC, Generic[S]):
    """`describe` and `preview` of a Source, their steps written once; the engine supplies
    the hooks (the module's docstring says which differences they hold)."""

    # The exceptions its sessions' `error_for` translates; others propagate as they are.
    translated: ClassVar[tuple[type[BaseException], ...]] = (Exception,)

    def describe(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> list[ResultColumn]:
        """The result's columns (names, the engine's type names), without running it: the
        same checks, binding and rights as `execute`."""
        asked = Asked(sql, parameters, requester, timeout_seconds)
        return self._within(self._open_statement(asked, None), self._describe_in, asked)

    def preview(
        self,
        sql: str,
        parameters: Mapping[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        max_rows: int,
        max_cell_chars: int,
        max_bytes: int,
    ) -> PreviewRows:
        """The first `max_rows` rows and the columns, run as `execute` runs it, reading no
        more than it shows (Source.preview)."""
        asked = Asked(sql, parameters, requester, timeout_seconds)
        caps = PreviewCaps(max_rows, max_cell_chars, max_bytes)

        def read(session: S, asked: Asked) -> tuple[PreviewRead, pa.Table, bool]:
            started = self._preview_in(session, asked, caps)
            batches, stopped = _bounded(started, caps)
            return started, pa.Table.from_batches(batches, schema=started.schema), stopped

        started, table, stopped = self._within(self._open_statement(asked, caps), read, asked)
        shown = table.slice(0, max_rows).rename_columns([c.name for c in started.columns])
        if started.cut_here:
            shown = cut_values(shown, caps.keep)
        return PreviewRows(started.columns, shown, stopped or table.num_rows > max_rows)

    def _within(self, session: S, work: Callable[[S, Asked], T], asked: Asked) -> T:
        """`work` in `session`: the engine's exceptions translated by the session, which is
        closed (its deadline stopped) whatever happens."""
        try:
            return work(session, asked)
        except self.translated as exc:
            raise session.error_for(exc) from exc
        finally:
            session.close()

    @abstractmethod
    def _open_statement(self, asked: Asked, caps: PreviewCaps | None) -> S:
        """The session `asked` runs in, open, its statement checked and bound where the
        engine does that before running it; for a preview of `caps`, or a describe (None).
        Closed again when opening fails."""

    @abstractmethod
    def _describe_in(self, session: S, asked: Asked) -> list[ResultColumn]:
        """The columns of the statement, read in `session` without running it."""

    @abstractmethod
    def _preview_in(self, session: S, asked: Asked, caps: PreviewCaps) -> PreviewRead:
        """The preview's statement started in `session`: at most `caps.limit` rows, long
        values cut to `caps.keep` unless `cut_here` says they come whole."""


def _bounded(read: PreviewRead, caps: PreviewCaps) -> tuple[list[pa.RecordBatch], bool]:
    """Batches of up to `caps.limit` rows, and whether reading stopped at `caps.max_bytes`
    first (while fewer rows than shown had come)."""
    batches: list[pa.RecordBatch] = []
    rows = size = 0
    try:
        for piece, count, weight in read.pieces:
            batches.extend(piece)
            rows, size = rows + count, size + weight
            if size > caps.max_bytes and rows <= caps.max_rows:
                return batches, True
            if rows > caps.max_rows and not read.read_to_end:
                break
    finally:
        read.pieces.close()  # the engine's reading ends while its session is still open
    return batches, False


def cut_values(table: pa.Table, keep: int) -> pa.Table:
    """Texts to `keep` characters and binaries to `keep` bytes: the caller sees they were
    longer, and shows no more."""
    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type):
            columns.append(pc.utf8_slice_codeunits(column, 0, keep))
        elif pa.types.is_binary(column.type):
            columns.append(pc.binary_slice(column, 0, keep))
        else:
            columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)
