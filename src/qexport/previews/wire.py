"""What crosses between a preview process and the process that asked: the answer, and a
refusal rebuilt as the qexport error it was.

A refusal travels as plain values (its class's name, message, code, and the position or field
it names) rather than a pickled exception: errors whose constructors take keyword arguments
do not unpickle, and only qexport's own errors, never a library's, may cross.
"""

from __future__ import annotations

from dataclasses import dataclass

from qexport.domain.failures import (
    AccessLostError,
    FailureCode,
    ForbiddenError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceLoginError,
    SourceOutOfMemoryError,
    SourceUnavailableError,
    TextPosition,
)
from qexport.domain.queries import ResultColumn
from qexport.domain.rule_check import Catalogue
from qexport.domain.sensitivity import Relation
from qexport.ports import PreviewCells

# The errors a preview may end with, by name; any other crosses as its nearest of these.
_KINDS: dict[str, type[QExportError]] = {
    cls.__name__: cls
    for cls in (
        AccessLostError,
        SourceLoginError,
        SourceUnavailableError,
        SourceOutOfMemoryError,
        QueryInvalidError,
        QueryTimeoutError,
        LimitExceededError,
        InvalidRequestError,
        NotFoundError,
        ForbiddenError,
    )
}


@dataclass(frozen=True)
class Refusal:
    """A qexport error as plain values."""

    kind: str  # the name of its class, or of the nearest in _KINDS ("QExportError": none)
    message: str
    code: str
    position: tuple[int, int] | None = None  # a QueryInvalidError's (line, column)
    field: str | None = None  # an InvalidRequestError's

    @classmethod
    def of(cls, exc: QExportError) -> Refusal:
        kind = next((k.__name__ for k in type(exc).__mro__ if k.__name__ in _KINDS), "")
        position = getattr(exc, "position", None)
        return cls(
            kind=kind or QExportError.__name__,
            message=str(exc),
            code=exc.code.value,
            position=(position.line, position.column) if position is not None else None,
            field=exc.field if isinstance(exc, InvalidRequestError) else None,
        )

    def error(self) -> QExportError:
        """The error again, in the process that asked."""
        kind = _KINDS.get(self.kind)
        if kind is QueryInvalidError:
            at = TextPosition(*self.position) if self.position is not None else None
            return QueryInvalidError(self.message, position=at)
        if kind is InvalidRequestError:
            return InvalidRequestError(self.message, field=self.field)
        if kind is not None:
            return kind(self.message)
        return QExportError(self.message, code=FailureCode(self.code))


@dataclass(frozen=True)
class Answer:
    """A preview process's answer to one job: the cells (or a describe's columns), or the
    refusal."""

    cells: PreviewCells | None = None
    columns: tuple[ResultColumn, ...] | None = None  # a describe's
    planned: bool = False  # a plan's: `reads` is its answer (None: the source cannot say)
    reads: frozenset[Relation] | None = None
    # A catalogue job's: `catalogue` is its answer (None: the source cannot say).
    catalogued: bool = False
    catalogue: Catalogue | None = None
    refusal: Refusal | None = None
    # The process should be replaced (it met its memory limit: what it holds is suspect).
    retire: bool = False
