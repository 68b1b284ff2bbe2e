"""Data sources: running, describing, previewing and planning a statement."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from qexport.domain.exports import Requester
    from qexport.domain.queries import ResultColumn
    from qexport.domain.rule_check import Catalogue
    from qexport.domain.sensitivity import ReadsReporting, Relation
    from qexport.ports.writers import Sink


class ResultStream(Protocol):
    """A query result being read: its schema and its record batches, read once."""

    schema: pa.Schema

    def __iter__(self) -> Iterator[pa.RecordBatch]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class PreviewRows:
    """The first rows of a result, as a source read them for a preview."""

    columns: tuple[ResultColumn, ...]  # names and the engine's own type names
    table: pa.Table  # at most the rows asked for, in the result's order
    more: bool  # the result goes on past these rows (or reading stopped at the byte bound)


class Source(Protocol):
    """A data source. What it can do beyond running, describing, previewing and planning a
    statement it declares: `native_copy` (formats it writes itself) and `catalogue` (what
    its catalogue holds), each None when it cannot."""

    name: str
    # How much its planner says of what a statement reads, and how its engine compares names
    # (domain/sensitivity.py).
    reads_reporting: ReadsReporting

    @property
    def native_copy(self) -> NativeCopy | None:
        """Its own writer of some formats (DuckDB's, PostgreSQL's COPY), faster than batches
        and a writer; None: its results go through qexport's writers."""
        ...

    def execute(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        on_interrupt: Callable[[Callable[[], None]], None] | None = None,
        batch_rows: int | None = None,
    ) -> ResultStream:
        """Run `sql` read-only with bound parameters and the requester context.

        `on_interrupt` receives, before the statement starts, a function that stops it from
        any thread. `batch_rows`: at most this many rows a batch, for a reader that keeps
        few rows (a source whose batches are bounded by bytes may ignore it). Raises
        QueryInvalidError, QueryTimeoutError or SourceUnavailableError.
        """
        ...

    def describe(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> list[ResultColumn]:
        """The columns `sql` returns (names, the engine's type names), without running it.

        The same checks and binding as `execute`, with the requester's rights; nothing is read
        but the catalogue. Raises QueryInvalidError (with the position in `sql` when the
        engine gives one), QueryTimeoutError or SourceUnavailableError.
        """
        ...

    def preview(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
        max_rows: int,
        max_cell_chars: int,
        max_bytes: int,
    ) -> PreviewRows:
        """The first `max_rows` rows of `sql` and its columns, run as `execute` runs it (the
        same checks and binding, the requester's context, read-only, the timeout), reading
        no more than it shows: the statement is cut after `max_rows` + 1 rows, and reading
        stops once about `max_bytes` of values came (`more` then says so). A text or binary
        value longer than `max_cell_chars` may come cut to `max_cell_chars` + 1 characters
        (bytes): the caller still sees it was longer. Raises as `execute` does.
        """
        ...

    def relations(
        self,
        sql: str,
        parameters: dict[str, Any],
        requester: Requester,
        *,
        timeout_seconds: float,
    ) -> frozenset[Relation] | None:
        """The tables `sql` reads (and the columns, where `reads_reporting` says so), as the
        engine's planner reports them, views, CTEs and subqueries resolved to the tables they
        scan; None when the source cannot say. Planned as `execute` would run it (the same
        checks, binding and rights), nothing run. Raises as `describe` does.
        """
        ...

    def check_role(self) -> list[str]:
        """Judge the login the source connects as, connecting where its kind can (PostgreSQL,
        MySQL): SourceRefusedError for one that could reach more than its grants (a
        superuser, a role it may become...) and is not allowed to; the allowed findings
        otherwise. A kind that has no login to judge returns [] without connecting."""
        ...

    def catalogue(
        self, tables: Sequence[tuple[str, str]], *, timeout_seconds: float
    ) -> Catalogue | None:
        """What the catalogue says of each `(schema, table)` (names as the engine holds
        them), in that order, and the identity of the data the source reaches, for the
        policy's sensitive tables (domain/rule_check.py); read as the source's own login,
        with no member's context (nothing is run but catalogue reads and plans). Raises
        SourceUnavailableError (or the source's errors) when it cannot be asked; with no
        tables, asks only the identity. None for a kind that cannot say (Spark Connect)."""
        ...


class SourceCatalog(Protocol):
    """The sources by name, and which workspaces may use each."""

    def source_for(self, name: str, workspace_id: str) -> Source:
        """The source `name` means in the workspace (names are per workspace); AccessLostError
        if it means none there, SourceUnavailableError for a name known nowhere."""
        ...

    def names_for(self, workspace_id: str) -> list[str]:
        """The names of the sources the workspace may use, sorted."""
        ...


class NativeCopy(Protocol):
    """A source's own writer of some formats, faster than batches + a writer
    (Source.native_copy)."""

    native_formats: frozenset[str]

    def copy(  # noqa: PLR0913 - the native copy's contract: the statement, its values and options
        self,
        sql: str,
        parameters: dict[str, Any],
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
        """Write the result as `fmt` into `sink`, same contract as the writers; return rows.

        `on_interrupt` receives a function that stops the running statement from any thread.
        """
        ...
