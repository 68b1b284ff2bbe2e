"""Preview on the pages: the first rows of a query as a table, on the query's page and on the
new-export page before requesting.

Both are a POST with the CSRF field and the query's parameter inputs, answered with the same
page and the table in its "Preview" section (the form's action ends in `#preview`, so the
browser shows that section): no JavaScript is needed. The rows come from
`services.preview.preview_query`, with the person's rights, as the API's preview (so it is
recorded, and counts toward the member's previews per minute, alike). A refusal (a
parameter: next to its input; the source's, or too many previews, with its Retry-After:
above the table) re-renders the page too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import (
    ForbiddenError,
    InvalidRequestError,
    QExportError,
    TooManyRequestsError,
)
from qexport.domain.queries import Parameter, ParamType, Query
from qexport.http.one_hop import off_the_loop
from qexport.http.statuses import status_of
from qexport.services import preview as service
from qexport.services.queries import get_readable_query
from qexport.web.auth import Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.pages import new as new_export
from qexport.web.pages.queries import render_query_page
from qexport.web.session import Session
from qexport.web.subjects import PARAM_PREFIX, subject_of
from qexport.writers.cells import CUT_MARK, Cell

router = APIRouter(route_class=PageRoute, include_in_schema=False)

MAX_FORM_FIELDS = 80


@dataclass(frozen=True)
class ShownCell:
    text: str
    kind: str  # "null", "number", "cut" or "text": how the table shows it


@dataclass(frozen=True)
class ShownPreview:
    """What the "Preview" section shows: the table (or the refusal), and a line saying what
    was left out."""

    name: str
    columns: list[tuple[str, str]]
    rows: list[list[ShownCell]]
    summary: str
    error: str | None = None
    retry_after: int | None = None  # a refusal that says when to try again (429)


def _cell(value: Cell, number: bool) -> ShownCell:
    if value is None:
        return ShownCell("NULL", "null")
    if isinstance(value, bool):
        return ShownCell("true" if value else "false", "text")
    if isinstance(value, int | float):
        return ShownCell(repr(value) if isinstance(value, float) else str(value), "number")
    if number:
        return ShownCell(value, "number")
    return ShownCell(value, "cut" if value.endswith(CUT_MARK) else "text")


def _summary(found: service.Preview) -> str:
    count = len(found.rows)
    words = "No rows." if count == 0 else f"{count:,} row{'' if count == 1 else 's'}."
    if found.more_rows and found.policy_rows is not None:
        words = (
            f"The first {count:,} rows: the workspace's policy allows at most"
            f" {found.policy_rows:,} rows in a preview or an export."
        )
    elif found.more_rows:
        words = f"The first {count:,} rows; the result goes on (an export holds every row)."
    if found.cut_cells:
        words += (
            f" Texts longer than {service.MAX_CELL_CHARS:,} characters are cut, ending in"
            f" {CUT_MARK}."
        )
    return words


def shown(found: service.Preview) -> ShownPreview:
    numbers = [
        service.is_number_column(c.type, [row[i] for row in found.rows])
        for i, c in enumerate(found.columns)
    ]
    return ShownPreview(
        name=found.query.name,
        columns=[(c.name, c.type) for c in found.columns],
        rows=[[_cell(v, n) for v, n in zip(row, numbers, strict=True)] for row in found.rows],
        summary=_summary(found),
    )


def given_parameters(parameters: tuple[Parameter, ...], form: dict[str, str]) -> dict[str, Any]:
    """The form's values as the new-export page reads them: empty is not given (the default
    applies), an unticked checkbox is false."""
    given: dict[str, Any] = {}
    for param in parameters:
        raw = form.get(PARAM_PREFIX + param.name)
        if param.type is ParamType.BOOLEAN:
            given[param.name] = raw == "true"
        elif raw is not None and raw.strip():
            given[param.name] = raw
    return given


def _run(
    context: Container, principal: Principal, query: Query, form: dict[str, str]
) -> tuple[ShownPreview | None, dict[str, str], int]:
    """The preview, or where it was refused: ({parameter: message}, status)."""
    try:
        found = service.preview_query(
            context.preview_desk(),
            principal.requester,
            query_ref=query.id,
            parameters=given_parameters(query.parameters, form),
        )
    except InvalidRequestError as exc:
        field = (exc.field or "").removeprefix("parameters.")
        if field in {p.name for p in query.parameters}:
            return None, {field: exc.detail}, 400
        return _refused(query, exc), {}, 400
    except QExportError as exc:
        found_status = status_of(exc)
        if found_status is None:
            raise
        return _refused(query, exc), {}, found_status[0]
    return shown(found), {}, 200


def _refused(query: Query, exc: QExportError) -> ShownPreview:
    wait = exc.retry_after if isinstance(exc, TooManyRequestsError) else None
    return ShownPreview(query.name, [], [], "", error=exc.detail, retry_after=wait)


def _with_retry_after(response: Response, preview: ShownPreview | None) -> Response:
    if preview is not None and preview.retry_after is not None:
        response.headers["Retry-After"] = str(preview.retry_after)
    return response


async def _checked_form(request: Request, session: Session) -> dict[str, str]:
    raw = await request.form(max_fields=MAX_FORM_FIELDS)
    form = {k: v for k, v in raw.items() if isinstance(v, str)}
    if not session.csrf_matches(form.get("csrf")):
        raise ForbiddenError("the form has expired or did not come from this site; try again")
    return form


@router.post("/queries/{query_id}/preview")
async def preview_on_query_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, query_id: str
) -> Response:
    """The query's page with its first rows (or why they could not be read)."""
    form = await _checked_form(request, session)

    def answer() -> Response:
        query = get_readable_query(context.catalog, principal, query_id)
        preview, errors, status = _run(context, principal, query, form)
        page = render_query_page(
            request,
            context,
            session,
            query,
            status=status,
            preview=preview,
            preview_values={p.name: form.get(PARAM_PREFIX + p.name, "") for p in query.parameters},
            errors=errors,
        )
        return _with_retry_after(page, preview)

    return await off_the_loop(answer, apart="sources")


@router.post("/exports/new/preview")
async def preview_on_new_export_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    """The new-export page, filled in as it was, with the chosen query's first rows."""
    form = await _checked_form(request, session)

    def answer() -> Response:
        subject = subject_of(context, principal, form.get("subject", ""))
        if subject is None or subject.kind != "query":
            errors = {"subject": "Choose a query: a preview shows a query's first rows."}
            return new_export._form_page(
                request, context, session, principal, subject, status=400, errors=errors
            )
        query = get_readable_query(context.catalog, principal, subject.id)
        preview, errors, status = _run(context, principal, query, form)
        values = {p.name: form.get(PARAM_PREFIX + p.name, "") for p in query.parameters}
        page = new_export._form_page(
            request,
            context,
            session,
            principal,
            subject,
            status=status,
            values=values,
            fmt=form.get("format", ""),
            errors=errors,
            preview=preview,
        )
        return _with_retry_after(page, preview)

    return await off_the_loop(answer, apart="sources")


@router.get("/queries/{query_id}/preview")
def query_preview_address(query_id: str) -> Response:
    """The preview's address, opened again (a bookmark, a reload): the query's page."""
    return RedirectResponse(f"/queries/{quote(query_id, safe='')}", status_code=303)


@router.get("/exports/new/preview")
def new_export_preview_address(subject: str = "") -> Response:
    """The preview's address, opened again: the new-export page."""
    target = f"/exports/new?subject={quote(subject[:300], safe='')}" if subject else "/exports/new"
    return RedirectResponse(target, status_code=303)
