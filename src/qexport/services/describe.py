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

A check is a look at the source's data too: MySQL and MariaDB evaluate constant subqueries as
they describe and plan, so `IF((SELECT ascii(salary) FROM salaries LIMIT 1) > 50, (SELECT 1
UNION SELECT 2), 1)` is refused or not by what the table holds. So a save is
rationed as a preview is (services/looks.py): it takes one of the member's previews of the
minute before the source is asked (429 with a Retry-After when none is left, the source not
asked), given back when the source accepts the statement and the save is refused for nothing
else; and a statement the source refuses is on the record, the save's `query.created` or
`query.changed` event with outcome `failed`: who, the source, the query's name, the
statement, which step refused it and where, never the source's message.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from qexport.domain.audit import MAX_SQL_CHARS, Action, Actor, Outcome
from qexport.domain.failures import (
    AccessLostError,
    InvalidRequestError,
    LimitExceededError,
    MetadataUnavailableError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceUnavailableError,
    StatementRefusedError,
    TextPosition,
    TooManyRequestsError,
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
from qexport.services.audit import actor_for, event
from qexport.services.looks import Looks, admit_look, give_back_look

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.domain.sensitivity import Relation
    from qexport.ports import AuditLog, PreviewRunner, SourceCatalog
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


@dataclass(frozen=True)
class Saving:
    """The save a statement is checked for, as a refusal of it is recorded."""

    name: str | None = None  # the query's name, when it has one
    query_id: str | None = None  # the query changed; None: a new one
    # The save is refused for another of its fields: an accepted statement counts as a look.
    refused_anyway: bool = False


@dataclass(frozen=True)
class Ration:
    """What checks on save are rationed and recorded with: the member's looks a minute
    (shared with previews) and the audit trail."""

    looks: Looks
    audit: AuditLog
    actor: Actor | None = None  # who the events name; None: the requester (actor_for)


class Describe(Protocol):
    """Asks a query's source about its statement: (source name, SQL, declared parameters),
    for `saving`."""

    def __call__(
        self,
        source: str,
        sql: str,
        parameters: Sequence[Parameter],
        /,
        saving: Saving = ...,
    ) -> Described: ...


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


def describe_statement(  # noqa: PLR0913 - keyword-only: the one check and what it is rationed by
    sources: SourceCatalog,
    runner: PreviewRunner,
    requester: Requester,
    *,
    source: str,
    sql: str,
    parameters: Sequence[Parameter],
    timeout_seconds: float,
    slots: SourceSlots | None = None,
    ration: Ration | None = None,
    saving: Saving = Saving(),
) -> Described:
    """The columns of `sql` on `source` and the tables it reads, described and planned with
    `requester`'s rights by a preview process (`runner`), holding one of `slots` meanwhile
    (TooManyRequestsError when none is free).

    With a `ration`, the check takes one of the requester's looks of the minute first
    (TooManyRequestsError when none is left, the source not asked), given back when the
    source accepts the statement unless `saving` is refused anyway; a refusal is recorded.

    StatementRefusedError (field `sql`) for a statement the source refuses; an
    InvalidRequestError on `source` for a source the workspace may not use;
    SourceUnavailableError when the source cannot be asked; MetadataUnavailableError when
    a refusal could not be recorded.
    """
    try:
        sources.source_for(source, requester.workspace_id)
    except (AccessLostError, SourceUnavailableError):
        raise InvalidRequestError(f"unknown source {source!r}", field="source") from None
    taken = _take_look(ration, requester)
    job = DescribeJob(source, sql, describe_values(parameters), requester, timeout_seconds)
    step = "describe"
    try:
        with slots.hold(requester) if slots is not None else contextlib.nullcontext():
            columns = runner.describe(job)
            step = "plan"
            reads = runner.relations(PlanJob(source, sql, job.values, requester, timeout_seconds))
    except TooManyRequestsError:
        if ration is not None and taken is not None:  # no slot: the source was not asked
            give_back_look(ration.looks, requester, taken)
        raise
    except (QueryInvalidError, QueryTimeoutError, LimitExceededError) as exc:
        refusal = _refusal(exc, timeout_seconds)
        if ration is not None:
            _record_refusal(ration, requester, source, sql, saving, exc, step, refusal)
        raise refusal from exc
    except (SourceUnavailableError, AccessLostError) as exc:
        # AccessLostError here: the source refused qexport's login, or its role is refused.
        # The look is kept: the statement may be what the source could not answer.
        raise SourceUnavailableError(
            f"{exc.detail}. The query was not saved: its SQL is checked by its source when it"
            " is saved; try again once the source answers"
        ) from exc
    if ration is not None and taken is not None and not saving.refused_anyway:
        give_back_look(ration.looks, requester, taken)
    return Described(tuple(columns), reads)


def _refusal(exc: QExportError, timeout_seconds: float) -> StatementRefusedError:
    """What the member reads of the source's refusal."""
    if isinstance(exc, QueryInvalidError):
        # Said as people read it (no caret art, no engine-internal suggestion); the position
        # stays, as words in the text and as line/column for the form and the API.
        return StatementRefusedError(readable_detail(exc.detail), position=exc.position)
    if isinstance(exc, QueryTimeoutError):
        return StatementRefusedError(
            f"the source took longer than {timeout_seconds:g} s to describe the query"
        )
    return StatementRefusedError(f"{exc.detail}; the query was not saved")


def _record_refusal(
    ration: Ration,
    requester: Requester,
    source: str,
    sql: str,
    saving: Saving,
    exc: QExportError,
    step: str,
    refusal: StatementRefusedError,
) -> None:
    """The save's event, failed: who, the source, the query's name, the statement, the
    refusal's code, step and position; never the source's message, which may be made of the
    data. MetadataUnavailableError when it could not be written: the refusal is not told."""
    details: dict[str, Any] = {
        "name": saving.name,
        "source": source,
        "sql": sql[:MAX_SQL_CHARS],
        "sql_sha256": hashlib.sha256(sql.encode()).hexdigest(),
        "code": exc.code.value,
        "step": step,
    }
    position: TextPosition | None = refusal.position
    if position is not None:
        details["position"] = {"line": position.line, "column": position.column}
    action = Action.QUERY_CREATED if saving.query_id is None else Action.QUERY_CHANGED
    recorded = ration.audit.record(
        event(
            ration.looks.clock,
            ration.actor or actor_for(requester.user_id),
            action,
            workspace_id=requester.workspace_id,
            target=("query", saving.query_id),
            outcome=Outcome.FAILED,
            details=details,
        )
    )
    if not recorded:
        raise MetadataUnavailableError(
            "the query's check could not be recorded in the audit trail, so the query was not"
            " saved; try again in a moment"
        )


def _take_look(ration: Ration | None, requester: Requester) -> dt.datetime | None:
    """When the check took one of the requester's looks of the minute (to give it back), or
    TooManyRequestsError when none is left; None without a ration."""
    if ration is None:
        return None
    return admit_look(
        ration.looks,
        requester,
        refused=f"you ran {ration.looks.per_minute} previews (or checks of queries that"
        " were not saved) in the last minute, as many as allowed; the query was not saved;"
        " try again in {seconds} s",
    )


def describer(
    sources: SourceCatalog,
    runner: PreviewRunner,
    requester: Requester,
    timeout_seconds: float,
    slots: SourceSlots | None = None,
    ration: Ration | None = None,
) -> Describe:
    """`describe_statement` for one requester, as the query services take it."""

    def describe(
        source: str, sql: str, parameters: Sequence[Parameter], /, saving: Saving = Saving()
    ) -> Described:
        return describe_statement(
            sources,
            runner,
            requester,
            source=source,
            sql=sql,
            parameters=parameters,
            timeout_seconds=timeout_seconds,
            slots=slots,
            ration=ration,
            saving=saving,
        )

    return describe
