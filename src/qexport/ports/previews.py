"""Where previews, describes and plans run: processes of bounded memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.domain.queries import ResultColumn
    from qexport.domain.rule_check import Catalogue
    from qexport.domain.sensitivity import Relation


# A value as a preview shows it: JSON-safe and exact (writers/cells.py makes them).
Cell = None | bool | int | float | str


@dataclass(frozen=True)
class PreviewJob:
    """One preview's statement, checked and bound by the service, for a PreviewRunner."""

    source: str  # the source's name, which the workspace was allowed to use
    sql: str
    values: dict[str, Any]  # the parameters, typed and bound as an export binds them
    requester: Requester
    timeout_seconds: float
    max_rows: int
    max_cell_chars: int
    max_bytes: int


@dataclass(frozen=True)
class DescribeJob:
    """A statement to describe (its columns, without running it), for a PreviewRunner."""

    source: str
    sql: str
    values: dict[str, Any]
    requester: Requester
    timeout_seconds: float


@dataclass(frozen=True)
class PlanJob:
    """A statement to plan (the tables and columns it reads, Source.relations, nothing run),
    for a PreviewRunner."""

    source: str
    sql: str
    values: dict[str, Any]
    requester: Requester
    timeout_seconds: float


@dataclass(frozen=True)
class CatalogueJob:
    """The tables sensitive-table rules name, to look up in `source`'s catalogue (and the
    identity of its data), for a PreviewRunner: no member's rights are involved."""

    source: str
    workspace_id: str  # the workspace whose policy names them (which may use the source)
    tables: tuple[tuple[str, str], ...]
    timeout_seconds: float


@dataclass(frozen=True)
class PreviewCells:
    """What a preview shows: the columns, at most `max_rows` rows of cells (texts cut at
    `max_cell_chars`, about `max_bytes` in all), and what was left out."""

    columns: tuple[ResultColumn, ...]
    rows: list[list[Cell]]
    more: bool  # rows were left out: the result goes on, or the byte bound was reached
    cut: int  # texts cut at max_cell_chars


class PreviewRunner(Protocol):
    """Runs previews, and the describes of queries being saved, away from the process that
    asks, where their memory is bounded."""

    def run(self, job: PreviewJob) -> PreviewCells:
        """The job's rows as cells, read by `job.source` with the requester's rights.

        Raises what the source raises (QueryInvalidError, QueryTimeoutError,
        SourceUnavailableError, AccessLostError), and LimitExceededError, naming the limit,
        when the preview needs more memory than a preview may use.
        """
        ...

    def describe(self, job: DescribeJob) -> tuple[ResultColumn, ...]:
        """The columns `job.sql` returns on `job.source` (Source.describe), with the
        requester's rights; raises as `run` does."""
        ...

    def relations(self, job: PlanJob) -> frozenset[Relation] | None:
        """What `job.sql` reads on `job.source` as its planner reports it (Source.relations;
        None: the source cannot say), with the requester's rights; raises as `run` does."""
        ...

    def catalogue(self, job: CatalogueJob) -> Catalogue | None:
        """What `job.source`'s catalogue says of `job.tables` (Source.catalogue);
        None for a source that cannot say. Raises as `run` does."""
        ...

    def prepare(self) -> None:
        """Begin starting what runs previews, without waiting for it: a server calls this as
        it starts, so that its first preview does not wait for it."""
        ...

    def close(self) -> None:
        """Stop what runs previews (their processes); the next `run` starts them again."""
        ...
