"""The new-export page: a query or report, a format, and one input per parameter.

Choosing the subject is a GET form (it reloads the page with that subject's parameters;
a script submits it on change), requesting is a POST that redirects to the export's page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.exports import ExportRecord
from qexport.domain.failures import ForbiddenError, InvalidRequestError
from qexport.domain.queries import Parameter, ParamType
from qexport.domain.reports import REPORT_FORMATS
from qexport.services.queries import list_readable_queries
from qexport.services.reports import list_readable_reports, report_queries
from qexport.services.requests import find_readable_query, request_export, request_report_export
from qexport.web.auth import Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.render import page
from qexport.web.session import Session
from qexport.writers.registry import FORMATS

router = APIRouter(route_class=PageRoute, include_in_schema=False)

INPUT_TYPES = {
    ParamType.INTEGER: "number",
    ParamType.NUMBER: "number",
    ParamType.DATE: "date",
    ParamType.BOOLEAN: "checkbox",
    ParamType.STRING: "text",
}
PARAM_PREFIX = "p."
MAX_FORM_FIELDS = 80


@dataclass(frozen=True)
class Subject:
    """What is exported: `query:ID` or `report:ID` in the form."""

    kind: str
    id: str
    name: str
    parameters: tuple[Parameter, ...]
    formats: tuple[str, ...]

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.id}"


def _subject(context: Container, principal: Principal, ref: str) -> Subject | None:
    kind, _, ident = ref.partition(":")
    if not ident:
        return None
    requester = principal.requester
    if kind == "query":
        query = find_readable_query(context.catalog, requester, ident, match_name=False)
        return Subject("query", query.id, query.name, query.parameters, FORMATS)
    if kind == "report":
        report = next(
            (r for r in list_readable_reports(context.catalog, principal) if r.id == ident), None
        )
        if report is None:
            return None
        queries = report_queries(context.catalog, requester, report)
        open_params: dict[str, Parameter] = {}
        for section in report.sections:
            for param in queries[section.query_id].parameters:
                if param.name not in section.parameters:
                    open_params.setdefault(param.name, param)
        formats = tuple(sorted(REPORT_FORMATS))
        return Subject("report", report.id, report.title, tuple(open_params.values()), formats)
    return None


def _inputs(subject: Subject | None, values: dict[str, str]) -> list[dict[str, Any]]:
    if subject is None:
        return []
    return [
        {
            "name": p.name,
            "type": p.type.value,
            "input": INPUT_TYPES[p.type],
            "step": "1" if p.type is ParamType.INTEGER else "any",
            "required": p.required and p.default is None,
            "value": values.get(p.name, "" if p.default is None else str(p.default)),
        }
        for p in subject.parameters
    ]


def _form_page(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    subject: Subject | None,
    *,
    status: int = 200,
    values: dict[str, str] | None = None,
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
        inputs=_inputs(subject, values or {}),
        fmt=fmt,
        errors=errors or {},
        **extra,  # e.g. the preview (pages_preview.py)
    )


@router.get("/exports/new")
def new_export_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    subject: str = "",
) -> Response:
    chosen = _subject(context, principal, subject[:300]) if subject else None
    return _form_page(request, context, session, principal, chosen)


def _parameters(subject: Subject, form: dict[str, str]) -> dict[str, Any]:
    """The form's values: empty means not given (the default applies); a checkbox that is
    not ticked is false."""
    given: dict[str, Any] = {}
    for param in subject.parameters:
        raw = form.get(PARAM_PREFIX + param.name)
        if param.type is ParamType.BOOLEAN:
            given[param.name] = raw == "true"
        elif raw is not None and raw.strip():
            given[param.name] = raw
    return given


def _field_of(exc: InvalidRequestError) -> str:
    field = exc.field or ""
    return field.removeprefix("parameters.") if field.startswith("parameters.") else field


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
    subject = _subject(context, principal, form.get("subject", "")[:300])
    if subject is None:
        errors = {"subject": "Choose a query or a report."}
        return _form_page(request, context, session, principal, None, status=400, errors=errors)
    fmt = form.get("format", "")
    values = {p.name: form.get(PARAM_PREFIX + p.name, "") for p in subject.parameters}
    try:
        record = _request(context, principal, subject, fmt, _parameters(subject, form))
    except InvalidRequestError as exc:
        field = _field_of(exc)
        errors = {field if field in values or field == "format" else "form": exc.detail}
        return _form_page(
            request,
            context,
            session,
            principal,
            subject,
            status=400,
            values=values,
            fmt=fmt,
            errors=errors,
        )
    return RedirectResponse(f"/exports/{quote(record.id)}?notice=requested", status_code=303)


def _request(
    context: Container, principal: Principal, subject: Subject, fmt: str, params: dict[str, Any]
) -> ExportRecord:
    if subject.kind == "report":
        return request_report_export(
            context.exports,
            context.catalog,
            context.clock,
            principal.requester,
            report_ref=subject.id,
            fmt=fmt,
            parameters=params,
            max_unsettled=context.settings.max_unsettled_per_user,
        )
    return request_export(
        context.exports,
        context.catalog,
        context.clock,
        principal.requester,
        query_ref=subject.id,
        fmt=fmt,
        parameters=params,
        match_name=False,
        max_unsettled=context.settings.max_unsettled_per_user,
    )
