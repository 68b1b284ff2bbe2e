"""Previewing a query: its first rows, run with the requester's rights exactly as an export of
it would run, but small, where its memory is bounded, and on the record.

The same checks as a request (a query the requester may read, parameters bound as a request
binds them) and as the worker's run (the workspace may still use the source; read-only, the
requester context `$user_id`/`$workspace_id`, the statement timeout), then `Source.preview`,
which reads at most one row past the limit and stops at a byte bound, and cells that a page
can show (writers/cells.py): at most 100 rows, about 256 KiB of cell text, long texts cut
with a visible mark; `truncated` says when any of that happened.

Where it runs: never in the process that asks (an API server, the CLI). The statement goes to
the PreviewRunner (previews/processes.py: a process of its own whose memory is bounded by
QEXPORT_PREVIEW_MAX_MEMORY), which answers the cells or the source's refusal; a preview that
needs more memory than that fails `limit_exceeded`, naming the limit. `SELECT
length(repeat('x', 1000000000))` grew an API process from 218 to 2,126 MiB when it ran there.

The timeout is the statement timeout, at most PREVIEW_TIMEOUT_SECONDS: a person (or a
request thread) waits for the answer. A preview holds a source connection, so each takes one
of the process's SourceSlots, which describing a saved query shares.

On the record, and rationed, as every row that leaves is: each preview that runs is an audit
event, `query.previewed` (who, which query, the parameters' values, since a preview leaves no
other record of them, and the rows shown, or the failure's code), written before the rows are
shown: a preview whose event cannot be written is refused (503), its rows unaccounted for. A
member runs at most QEXPORT_PREVIEW_PER_MINUTE previews in any minute, through the API, the
pages and the CLI together, whichever process runs them (RateLimits, in the metadata
database; services/looks.py), which saves whose statement the source refuses share; the
next is 429 with a Retry-After. Paging a table through `OFFSET $off` previews went at 10,000
rows a second, unrecorded; now 30 pages a minute, each on the record. The
workspace's policy applies to a preview's rows as to an export's: a sensitive query is not
previewed (refused, on the record), and its `max_rows` caps the rows shown; its formats rule
does not apply, since a preview makes no file.

A preview whose plan fails (the policy asks the source which tables it reads, and the source
refuses the statement) is on the record too, as failed with `"step": "plan"`, and counts
against the rate: MySQL and MariaDB evaluate parts of a statement while planning it, and
their error may be made of the data (mysql/checking.py, where its text is withheld).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from qexport.domain.audit import Action, AuditEvent, Outcome, bounded
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    MetadataUnavailableError,
    QExportError,
    TooManyRequestsError,
)
from qexport.domain.queries import Query, ResultColumn, to_json_value
from qexport.ports import Cell, PreviewJob
from qexport.services.audit import actor_for, event
from qexport.services.looks import Looks, admit_look
from qexport.services.sensitivity import preview_sensitivity
from qexport.services.subjects import find_readable_query, query_subject

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.domain.policies import WorkspacePolicy
    from qexport.ports import (
        AccountStore,
        AuditLog,
        Catalog,
        Clock,
        PreviewCells,
        PreviewRunner,
        RateLimits,
        SourceCatalog,
    )
    from qexport.services.slots import SourceSlots

log = structlog.get_logger()

MAX_ROWS = 100
MAX_CELL_CHARS = 1_000
MAX_BYTES = 256 * 1024
PREVIEW_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Preview:
    """The first rows of a query's result as cells, and what was left out."""

    query: Query
    parameters: dict[str, Any]  # the values bound, as an export records them
    columns: tuple[ResultColumn, ...]
    rows: list[list[Cell]]
    limit: int  # the rows asked for, at most what the workspace's policy allows
    more_rows: bool  # the result goes on past the rows shown
    cut_cells: int  # texts cut at MAX_CELL_CHARS
    policy_rows: int | None = None  # the policy's max_rows, when it is below the limit asked

    @property
    def truncated(self) -> bool:
        """Whether a cap was hit: rows left out, or a text cut."""
        return self.more_rows or self.cut_cells > 0


@dataclass(frozen=True)
class PreviewDesk:
    """What a preview needs, from the container (`Container.preview_desk`)."""

    catalog: Catalog
    accounts: AccountStore  # the workspace's policy, read at each preview
    sources: SourceCatalog  # whether the workspace may use the source, asked here first
    runner: PreviewRunner
    slots: SourceSlots
    audit: AuditLog
    rates: RateLimits
    clock: Clock
    per_minute: int  # QEXPORT_PREVIEW_PER_MINUTE
    statement_timeout_seconds: float

    def looks(self) -> Looks:
        """The member's looks a minute, which previews and refused query checks share."""
        return Looks(self.rates, self.clock, self.per_minute)


_DECIMAL_TYPE = re.compile(r"^(decimal|numeric)\b", re.IGNORECASE)
_DECIMAL_TEXT = re.compile(r"^-?\d+(\.\d+)?$")


def is_number_column(type_name: str, cells: Sequence[Cell]) -> bool:
    """Whether a column's cells are numbers to line up on the right: every one that is not
    NULL a JSON number, or, in a decimal column, a decimal's exact text."""
    values = [c for c in cells if c is not None]
    if not values:
        return False
    if all(isinstance(c, int | float) and not isinstance(c, bool) for c in values):
        return True
    return bool(_DECIMAL_TYPE.match(type_name)) and all(
        isinstance(c, str) and _DECIMAL_TEXT.match(c) for c in values
    )


def preview_json(found: Preview) -> dict[str, Any]:
    """The preview as the API answers it (and `qexport queries preview --json` prints it)."""
    return {
        "query_id": found.query.id,
        "query_name": found.query.name,
        "parameters": found.parameters,
        "columns": [c.to_json() for c in found.columns],
        "rows": found.rows,
        "row_count": len(found.rows),
        "truncated": found.truncated,
        "more_rows": found.more_rows,
        "cut_cells": found.cut_cells,
        "limits": {"rows": found.limit, "cell_chars": MAX_CELL_CHARS, "bytes": MAX_BYTES},
    }


def preview_timeout(statement_timeout_seconds: float) -> float:
    """How long a preview may run: the statement timeout (0: none), at most 30 s."""
    if statement_timeout_seconds <= 0:
        return PREVIEW_TIMEOUT_SECONDS
    return min(statement_timeout_seconds, PREVIEW_TIMEOUT_SECONDS)


def check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ROWS:
        raise InvalidRequestError(
            f"limit must be a whole number from 1 to {MAX_ROWS}", field="limit"
        )
    return limit


def preview_query(
    desk: PreviewDesk,
    requester: Requester,
    *,
    query_ref: str,
    parameters: dict[str, Any] | None = None,
    limit: int = MAX_ROWS,
    match_name: bool = False,
) -> Preview:
    """The first `limit` rows of the query `query_ref` with `parameters`, as `requester`.

    NotFoundError for a query they may not read; InvalidRequestError for a bad parameter or
    limit; TooManyRequestsError past QEXPORT_PREVIEW_PER_MINUTE, or when the requester (or
    this process) has no source slot free; AccessLostError when the workspace may no longer
    use the source; then what the runner raises (QueryInvalidError, QueryTimeoutError,
    SourceUnavailableError, LimitExceededError); MetadataUnavailableError when the preview
    could not be put on the record. A query the workspace's policy marks sensitive is not
    previewed (ForbiddenError): its rows leave only through an approved export.
    """
    limit = check_limit(limit)
    query = find_readable_query(desk.catalog, requester, query_ref, match_name=match_name)
    values = query_subject(query).bind(parameters or {})
    shown_values = {k: to_json_value(v) for k, v in values.items()}
    _admit(desk, requester)
    policy = desk.accounts.workspace_policy(requester.workspace_id)
    _refuse_sensitive(desk, requester, query, values, shown_values, policy)
    rows = policy.row_limit(limit)
    started = time.monotonic()
    cells = _run(desk, requester, query, values, shown_values, rows)
    found = Preview(
        query=query,
        parameters=shown_values,
        columns=cells.columns,
        rows=cells.rows,
        limit=rows,
        more_rows=cells.more,
        cut_cells=cells.cut,
        policy_rows=rows if rows < limit else None,
    )
    if not desk.audit.record(_previewed(desk, requester, query, shown_values, shown=found)):
        raise MetadataUnavailableError(
            "the preview could not be recorded in the audit trail, so its rows are not shown;"
            " try again in a moment"
        )
    log.info(
        "query_previewed",
        query_id=query.id,
        source=query.source,
        rows=len(found.rows),
        more_rows=found.more_rows,
        cut_cells=found.cut_cells,
        duration_s=round(time.monotonic() - started, 3),
    )
    return found


def _refuse_sensitive(
    desk: PreviewDesk,
    requester: Requester,
    query: Query,
    values: dict[str, Any],
    shown_values: dict[str, Any],
    policy: WorkspacePolicy,
) -> None:
    """Refuse (ForbiddenError) a query that reads what the policy marks sensitive, as its
    source's planner reports it now; a refusal, or the planner's failure, goes on the record."""
    # The source's planner may refuse the statement (or not be asked): on the record, as a
    # run's failure is, and counted against the member's previews of the minute (_admit;
    # mysql/checking.py).
    with _failure_on_record(desk, requester, query, shown_values, planning=True):
        why = preview_sensitivity(
            policy,
            desk.sources,
            desk.catalog,
            desk.runner,
            requester,
            query,
            values,
            statement_timeout_seconds=desk.statement_timeout_seconds,
            slots=desk.slots,
        )
    if why:
        refusal = ForbiddenError(
            f"{why}: it is not previewed, and its exports need an admin's approval"
        )
        desk.audit.record(_previewed(desk, requester, query, shown_values, refusal=refusal))
        raise refusal


def _run(
    desk: PreviewDesk,
    requester: Requester,
    query: Query,
    values: dict[str, Any],
    shown_values: dict[str, Any],
    rows: int,
) -> PreviewCells:
    """The first `rows` rows, run in a preview process while the requester holds a source
    slot; a failure goes on the record."""
    with _failure_on_record(desk, requester, query, shown_values):
        desk.sources.source_for(query.source, requester.workspace_id)
        with desk.slots.hold(requester):
            return desk.runner.run(
                PreviewJob(
                    source=query.source,
                    sql=query.sql,
                    values=values,
                    requester=requester,
                    timeout_seconds=preview_timeout(desk.statement_timeout_seconds),
                    max_rows=rows,
                    max_cell_chars=MAX_CELL_CHARS,
                    max_bytes=MAX_BYTES,
                )
            )


@contextlib.contextmanager
def _failure_on_record(
    desk: PreviewDesk,
    requester: Requester,
    query: Query,
    shown_values: dict[str, Any],
    *,
    planning: bool = False,
) -> Iterator[None]:
    """Put a failure of the preview's plan or run on the record, then let it go on; not when
    no source slot was free (TooManyRequestsError): then nothing was planned or run."""
    try:
        yield
    except TooManyRequestsError:
        raise
    except QExportError as exc:
        refused = _previewed(desk, requester, query, shown_values, refusal=exc, planning=planning)
        desk.audit.record(refused)
        raise


def _admit(desk: PreviewDesk, requester: Requester) -> None:
    """One of the member's looks this minute (services/looks.py), or TooManyRequestsError
    saying when."""
    admit_look(
        desk.looks(),
        requester,
        refused=f"you ran {desk.per_minute} previews in the last minute, as many as allowed;"
        " try again in {seconds} s (an export holds every row at once)",
    )


def _previewed(
    desk: PreviewDesk,
    requester: Requester,
    query: Query,
    values: dict[str, Any],
    *,
    shown: Preview | None = None,
    refusal: QExportError | None = None,
    planning: bool = False,
) -> AuditEvent:
    """The preview's event: the query, the parameters' values (each cut to 200 characters),
    and the rows shown; or why it was refused (a policy) or failed (the source's code, and
    `"step": "plan"` when its plan failed, before any row was read)."""
    details: dict[str, Any] = {
        "query_name": query.name,
        "source": query.source,
        "parameters": {k: _bounded_value(v) for k, v in values.items()},
    }
    outcome = Outcome.OK
    if shown is not None:
        details |= {"rows": len(shown.rows), "more_rows": shown.more_rows, "limit": shown.limit}
    elif isinstance(refusal, ForbiddenError):
        outcome, details["reason"] = Outcome.REFUSED, "sensitive"
    elif refusal is not None:
        outcome, details["code"] = Outcome.FAILED, refusal.code.value
        if planning:
            details["step"] = "plan"
    return event(
        desk.clock,
        actor_for(requester.user_id),
        Action.QUERY_PREVIEWED,
        workspace_id=requester.workspace_id,
        target=("query", query.id),
        outcome=outcome,
        details=details,
    )


def _bounded_value(value: Any) -> Any:
    return bounded(value) if isinstance(value, str) else value
