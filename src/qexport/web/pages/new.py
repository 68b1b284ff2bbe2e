"""The new-export page: a query or report, a format it takes, and one typed input per
parameter (web/subjects.py).

Choosing the subject is a GET form (it reloads the page with that subject's formats and
parameters), requesting is a POST that redirects to the export's page, or shows every refusal
at once, each on its field.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.approvals import ApprovalRequest
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.services.queries import list_readable_queries
from qexport.services.reports import list_readable_reports
from qexport.services.requests import request
from qexport.services.subjects import Subject
from qexport.web.auth import Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import field_of
from qexport.web.pages.approvals import awaiting_path
from qexport.web.render import page
from qexport.web.session import Session
from qexport.web.subjects import (
    given_parameters,
    param_field,
    param_inputs,
    subject_of,
    typed_values,
)

router = APIRouter(route_class=PageRoute, include_in_schema=False)

MAX_FORM_FIELDS = 80
FIELDS = ("subject", "format")


def _form_page(  # noqa: PLR0913 - keyword-only: what the form page shows
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    subject: Subject | None,
    *,
    status: int = 200,
    values: dict[str, Any] | None = None,
    fmt: str = "",
    errors: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    return page(
        request,
        "new_export.html",
        status=status,
        session=session,
        queries=list_readable_queries(context.catalog, principal),
        reports=list_readable_reports(context.catalog, principal),
        subject=subject,
        inputs=param_inputs(subject, values or {}),
        fmt=fmt,
        errors=errors or {},
        **extra,  # e.g. the preview (pages/preview.py)
    )


@router.get("/exports/new")
def new_export_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    subject: str = "",
) -> Response:
    chosen = subject_of(context, principal, subject) if subject else None
    return _form_page(request, context, session, principal, chosen)


def errors_of(exc: InvalidRequestError, subject: Subject) -> dict[str, str]:
    """Every refusal on its field: the subject, the format, each parameter's input."""
    errors: dict[str, list[str]] = {}
    for problem in exc.problems:
        named = problem.field or ""
        name = param_field(named, subject) or (
            "subject" if named in ("query_id", "report_id") else field_of(problem, FIELDS)
        )
        errors.setdefault(name, []).append(problem.detail)
    return {name: " ".join(texts) for name, texts in errors.items()}


@router.post("/exports/new")
async def request_new_export(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    """Request the export; a refused value is shown next to its field."""
    raw = await request.form(max_fields=MAX_FORM_FIELDS)
    form = {k: v for k, v in raw.items() if isinstance(v, str)}
    if not session.csrf_matches(form.get("csrf")):
        raise ForbiddenError("the form has expired or did not come from this site; try again")
    return await run_in_threadpool(_submit, request, context, session, principal, form)


def _submit(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: dict[str, str],
) -> Response:
    subject = subject_of(context, principal, form.get("subject", ""))
    if subject is None:
        errors = {"subject": "Choose a query or a report."}
        return _form_page(request, context, session, principal, None, status=400, errors=errors)
    fmt = form.get("format", "")
    typed = typed_values(subject, form)
    try:
        record = _request(context, principal, subject, fmt, given_parameters(subject, typed))
    except InvalidRequestError as exc:
        return _form_page(
            request,
            context,
            session,
            principal,
            subject,
            status=400,
            values=typed,
            fmt=fmt,
            errors=errors_of(exc, subject),
        )
    if isinstance(record, ApprovalRequest):
        return RedirectResponse(awaiting_path(record), status_code=303)
    return RedirectResponse(f"/exports/{quote(record.id)}?notice=requested", status_code=303)


def _request(
    context: Container, principal: Principal, subject: Subject, fmt: str, params: dict[str, Any]
) -> ExportRecord | ApprovalRequest:
    return request(
        context, principal, RequestExport(SubjectRef(subject.kind, subject.id), fmt, params)
    )
