"""Checking a query when it is saved: its source describes the statement (the columns and
their types) without running it, with the saver's rights, so that a syntax error, a missing
table or column, a statement other than one SELECT or a parameter the query does not declare
is refused then, with the source's message and where in the SQL it is, instead of failing
every export of it later as query_invalid.

A source that cannot be reached (or refuses qexport's login) when the query is saved refuses
the save (503, `source_unavailable`; the CLI exits 1) rather than saving it unchecked with its
columns unknown: a query saved unchecked could hold any of the mistakes this check is there
to catch, a warning beside a 201 is easy to miss in a script, and "saved means checked" stays
true of every query saved from now on. Saving again once the source answers costs nothing.

The source describes in a preview process (previews/processes.py), as a preview runs, not in
the process that asks: DuckDB folds constants as it plans, so describing `SELECT
length(repeat('x', 1000000000))` in the server took 7 s and 2 GiB there; within a preview
process's memory limit the folding fails, DuckDB keeps the expression unfolded, and the
columns come back at once. A describe that still meets the limit is refused on `sql`.

The source's planner also says then, in a preview process too, which tables (and columns) the
statement reads (`Source.relations`, domain/sensitivity.py): recorded with the query, it is
what a policy's sensitive tables are judged against when an export of it is requested.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from qexport.domain.failures import (
    AccessLostError,
    InvalidRequestError,
    LimitExceededError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
    StatementRefusedError,
    readable_detail,
)
from qexport.domain.queries import (
    Parameter,
    ParamType,
    Query,
    ResultColumn,
    bind_parameters,
)
from qexport.ports import DescribeJob, PlanJob

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.domain.sensitivity import Relation
    from qexport.ports import PreviewRunner, SourceCatalog
    from qexport.services.slots import SourceSlots

# Describing plans a statement and reads the catalogue: milliseconds. A save waits at most
# this long (or the statement timeout, if shorter) before it is refused.
DESCRIBE_TIMEOUT_SECONDS = 10.0

# A value of each type for a parameter that has no default: what the statement is described
# with, so that its columns get the types an export's values give them.
_PLACEHOLDERS: dict[ParamType, Any] = {
    ParamType.STRING: "",
    ParamType.INTEGER: 0,
    ParamType.NUMBER: Decimal(0),
    ParamType.DATE: dt.date(2000, 1, 1),
    ParamType.BOOLEAN: False,
}


@dataclass(frozen=True)
class Described:
    """What a query's source says of its statement when it is saved: the columns it returns
    and the tables (and columns) it reads (None: the source cannot say)."""

    columns: tuple[ResultColumn, ...]
    reads: frozenset[Relation] | None


# Asks a query's source about its statement: (source name, SQL, declared parameters).
Describe = Callable[[str, str, Sequence[Parameter]], Described]


def describe_values(parameters: Sequence[Parameter]) -> dict[str, Any]:
    """A typed value for each declared parameter, as an export binds them: the default,
    coerced like a request's value, or a placeholder of the parameter's type."""
    probe = Query("", "", "", "", "", parameters=tuple(parameters))
    given = {p.name: _PLACEHOLDERS[p.type] for p in parameters if p.default is None}
    return bind_parameters(probe, given)


def describe_timeout(statement_timeout_seconds: float) -> float:
    """How long a describe may take: the statement timeout (0: none), at most 10 s."""
    if statement_timeout_seconds <= 0:
        return DESCRIBE_TIMEOUT_SECONDS
    return min(statement_timeout_seconds, DESCRIBE_TIMEOUT_SECONDS)


def describe_statement(
    sources: SourceCatalog,
    runner: PreviewRunner,
    requester: Requester,
    *,
    source: str,
    sql: str,
    parameters: Sequence[Parameter],
    timeout_seconds: float,
    slots: SourceSlots | None = None,
) -> Described:
    """The columns of `sql` on `source` and the tables it reads, described and planned with
    `requester`'s rights by a preview process (`runner`), holding one of `slots` meanwhile
    (TooManyRequestsError when none is free).

    StatementRefusedError (field `sql`) for a statement the source refuses; an
    InvalidRequestError on `source` for a source the workspace may not use;
    SourceUnavailableError when the source cannot be asked.
    """
    try:
        sources.source_for(source, requester.workspace_id)
    except (AccessLostError, SourceUnavailableError):
        raise InvalidRequestError(f"unknown source {source!r}", field="source") from None
    job = DescribeJob(source, sql, describe_values(parameters), requester, timeout_seconds)
    try:
        with slots.hold(requester) if slots is not None else contextlib.nullcontext():
            columns = runner.describe(job)
            reads = runner.relations(PlanJob(source, sql, job.values, requester, timeout_seconds))
    except QueryInvalidError as exc:
        # Said as people read it (no caret art, no engine-internal suggestion); the position
        # stays, as words in the text and as line/column for the form and the API.
        raise StatementRefusedError(readable_detail(exc.detail), position=exc.position) from exc
    except QueryTimeoutError as exc:
        raise StatementRefusedError(
            f"the source took longer than {timeout_seconds:g} s to describe the query"
        ) from exc
    except LimitExceededError as exc:
        raise StatementRefusedError(f"{exc.detail}; the query was not saved") from exc
    except (SourceUnavailableError, AccessLostError) as exc:
        # AccessLostError here: the source refused qexport's login, or its role is refused.
        raise SourceUnavailableError(
            f"{exc.detail}. The query was not saved: its SQL is checked by its source when it"
            " is saved; try again once the source answers"
        ) from exc
    return Described(tuple(columns), reads)


def describer(
    sources: SourceCatalog,
    runner: PreviewRunner,
    requester: Requester,
    timeout_seconds: float,
    slots: SourceSlots | None = None,
) -> Describe:
    """`describe_statement` for one requester, as the query services take it."""

    def describe(source: str, sql: str, parameters: Sequence[Parameter]) -> Described:
        return describe_statement(
            sources,
            runner,
            requester,
            source=source,
            sql=sql,
            parameters=parameters,
            timeout_seconds=timeout_seconds,
            slots=slots,
        )

    return describe
