"""Previewing a query: its first rows, run with the requester's rights exactly as an export of
it would run, but small.

The same checks as a request (a query the requester may read, parameters bound as a request
binds them) and as the worker's run (the workspace may still use the source; read-only, the
requester context `$user_id`/`$workspace_id`, the statement timeout), then `Source.preview`,
which reads at most one row past the limit and stops at a byte bound, and cells that a page
can show (writers/cells.py): at most 100 rows, about 256 KiB of cell text, long texts cut
with a visible mark; `truncated` says when any of that happened.

The timeout is the statement timeout, at most PREVIEW_TIMEOUT_SECONDS: a person (or a
request thread) waits for the answer. A preview holds a source connection, so each takes one
of the process's SourceSlots, which describing a saved query shares.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query, ResultColumn, to_json_value
from qexport.services.requests import bind_query_values, find_readable_query
from qexport.services.sensitivity import preview_sensitivity
from qexport.writers.cells import Cell, preview_cells

if TYPE_CHECKING:
    from qexport.domain.exports import Requester
    from qexport.ports import Catalog, SourceCatalog
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
    limit: int
    more_rows: bool  # the result goes on past the rows shown
    cut_cells: int  # texts cut at MAX_CELL_CHARS

    @property
    def truncated(self) -> bool:
        """Whether a cap was hit: rows left out, or a text cut."""
        return self.more_rows or self.cut_cells > 0


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
    catalog: Catalog,
    sources: SourceCatalog,
    slots: SourceSlots,
    requester: Requester,
    *,
    query_ref: str,
    parameters: dict[str, Any] | None = None,
    statement_timeout_seconds: float,
    policy: WorkspacePolicy,
    limit: int = MAX_ROWS,
    match_name: bool = False,
) -> Preview:
    """The first `limit` rows of the query `query_ref` with `parameters`, as `requester`.

    NotFoundError for a query they may not read; InvalidRequestError for a bad parameter or
    limit; AccessLostError when the workspace may no longer use the source; then what the
    source raises (QueryInvalidError, QueryTimeoutError, SourceUnavailableError), and
    TooManyRequestsError when the requester (or this process) has no slot free.
    A query the workspace's `policy` marks sensitive is not previewed (ForbiddenError): its
    rows leave only through an approved export.
    """
    limit = check_limit(limit)
    query = find_readable_query(catalog, requester, query_ref, match_name=match_name)
    if why := preview_sensitivity(
        policy,
        sources,
        catalog,
        requester,
        query,
        parameters,
        statement_timeout_seconds=statement_timeout_seconds,
        slots=slots,
    ):
        raise ForbiddenError(
            f"{why}: it is not previewed, and its exports need an admin's approval"
        )
    values = bind_query_values(query, parameters or {})
    source = sources.source_for(query.source, requester.workspace_id)
    started = time.monotonic()
    with slots.hold(requester):
        read = source.preview(
            query.sql,
            values,
            requester,
            timeout_seconds=preview_timeout(statement_timeout_seconds),
            max_rows=limit,
            max_cell_chars=MAX_CELL_CHARS,
            max_bytes=MAX_BYTES,
        )
    cells = preview_cells(read.table, max_chars=MAX_CELL_CHARS, max_bytes=MAX_BYTES)
    log.info(
        "query_previewed",
        query_id=query.id,
        source=query.source,
        rows=len(cells.rows),
        more_rows=read.more or cells.dropped,
        cut_cells=cells.cut,
        duration_s=round(time.monotonic() - started, 3),
    )
    return Preview(
        query=query,
        parameters={k: to_json_value(v) for k, v in values.items()},
        columns=read.columns,
        rows=cells.rows,
        limit=limit,
        more_rows=read.more or cells.dropped,
        cut_cells=cells.cut,
    )
