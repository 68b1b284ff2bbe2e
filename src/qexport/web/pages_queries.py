"""The queries pages: the list, one query with its SQL, and the forms editors and admins
create and change them with (the API's services and rules)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.failures import InvalidRequestError, SourceUnavailableError
from qexport.domain.queries import Parameter, Query, parse_param_spec, to_json_value
from qexport.services import queries as service
from qexport.services.describe import describe_timeout, describer
from qexport.sources.registry import usable_source_names
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.errors import PageRoute
from qexport.web.forms import (
    GENERAL,
    NOTICES,
    email_of,
    field_of,
    member_ids,
    member_lines,
    numbered_lines,
    on_line,
    require_writer,
    visibility_of,
)
from qexport.web.render import page
from qexport.web.session import Session

router = APIRouter(route_class=PageRoute, include_in_schema=False)

FIELDS = ("name", "source", "sql", "parameters", "visibility", "members", "filename_template")
Text = Annotated[str, Form()]


@dataclass(frozen=True)
class QueryForm:
    """The form's values, as typed."""

    name: str = ""
    source: str = ""
    sql: str = ""
    parameters: str = ""
    visibility: str = "workspace"
    members: str = ""
    filename_template: str = ""


def param_line(param: Parameter) -> str:
    """A parameter as the form writes it: `name:type[=default]`."""
    if param.default is None:
        return f"{param.name}:{param.type.value}" + ("" if param.required else "=")
    default = to_json_value(param.default)
    shown = str(default).lower() if isinstance(default, bool) else str(default)
    return f"{param.name}:{param.type.value}={shown}"


def _form_of(context: Container, query: Query) -> QueryForm:
    return QueryForm(
        name=query.name,
        source=query.source,
        sql=query.sql,
        parameters="\n".join(param_line(p) for p in query.parameters),
        visibility=query.visibility.value,
        members=member_lines(context.accounts, query.members),
        filename_template=query.filename_template or "",
    )


def _draft(context: Container, form: QueryForm) -> tuple[service.QueryDraft, list[int]]:
    """The draft the form describes, and the line number of each parameter."""
    lines = numbered_lines(form.parameters)
    params = []
    for number, line in lines:
        try:
            params.append(parse_param_spec(line))
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"Line {number}: {exc}", field="parameters") from None
    draft = service.QueryDraft(
        name=form.name.strip(),
        sql=form.sql,
        source=form.source,
        parameters=tuple(params),
        visibility=visibility_of(form.visibility),
        members=member_ids(context.accounts, form.members),
        filename_template=form.filename_template,
    )
    return draft, [n for n, _ in lines]


def _form_page(
    request: Request,
    context: Container,
    session: Session,
    form: QueryForm,
    *,
    query_id: str | None,
    status: int = 200,
    errors: dict[str, str] | None = None,
) -> Response:
    return page(
        request,
        "query_form.html",
        status=status,
        session=session,
        query_id=query_id,
        form=asdict(form),
        sources=sorted(
            usable_source_names(context.settings, context.accounts, session.workspace_id or "")
        ),
        errors=errors or {},
    )


def _save(
    request: Request,
    context: Container,
    session: Session,
    principal: Principal,
    form: QueryForm,
    query_id: str | None,
) -> Response:
    """Create (no id) or replace the query; a refused value is shown next to its field."""
    require_writer(principal)
    sources = usable_source_names(context.settings, context.accounts, principal.workspace_id)
    timeout = describe_timeout(context.settings.statement_timeout_seconds)
    describe = describer(context.sources, principal.requester, timeout)
    numbers: list[int] = []
    try:
        draft, numbers = _draft(context, form)
        if query_id is None:
            query = service.create_query(
                context.catalog,
                context.accounts,
                principal,
                draft,
                sources=sources,
                describe=describe,
            )
        else:
            query = service.replace_query(
                context.catalog,
                context.accounts,
                principal,
                query_id,
                draft,
                sources=sources,
                describe=describe,
            )
    except InvalidRequestError as exc:
        errors = {field_of(exc, FIELDS): on_line(exc, "parameters", numbers)}
        return _form_page(
            request, context, session, form, query_id=query_id, status=400, errors=errors
        )
    except SourceUnavailableError as exc:  # nothing saved: the form stays filled in
        errors = {GENERAL: exc.detail}
        return _form_page(
            request, context, session, form, query_id=query_id, status=503, errors=errors
        )
    return RedirectResponse(f"/queries/{quote(query.id, safe='')}?notice=saved", status_code=303)


@router.get("/queries")
def queries_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    """The queries the person may read, by name."""
    queries = service.list_readable_queries(context.catalog, principal)
    return page(request, "queries.html", session=session, queries=queries)


@router.get("/queries/new")
def new_query_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    require_writer(principal)
    usable = usable_source_names(context.settings, context.accounts, principal.workspace_id)
    sources = sorted(usable)
    form = QueryForm(source=sources[0] if len(sources) == 1 else "")
    return _form_page(request, context, session, form, query_id=None)


@router.post("/queries/new")
def create_query(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    name: Text = "",
    source: Text = "",
    sql: Text = "",
    parameters: Text = "",
    visibility: Text = "workspace",
    members: Text = "",
    filename_template: Text = "",
) -> Response:
    form = QueryForm(name, source, sql, parameters, visibility, members, filename_template)
    return _save(request, context, session, principal, form, None)


@router.get("/queries/{query_id}")
def query_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    query_id: str,
    notice: str | None = None,
) -> Response:
    """One query: its SQL, parameters and who reads it, with a button to export it."""
    query = service.get_readable_query(context.catalog, principal, query_id)
    return page(
        request,
        "query.html",
        session=session,
        query=query,
        params=[param_line(p) for p in query.parameters],
        members=member_lines(context.accounts, query.members).splitlines(),
        owner=email_of(context.accounts, query.owner),
        notice=NOTICES.get(notice or ""),
    )


@router.get("/queries/{query_id}/edit")
def edit_query_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, query_id: str
) -> Response:
    require_writer(principal)
    query = service.get_readable_query(context.catalog, principal, query_id)
    return _form_page(request, context, session, _form_of(context, query), query_id=query.id)


@router.post("/queries/{query_id}/edit")
def edit_query(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    query_id: str,
    name: Text = "",
    source: Text = "",
    sql: Text = "",
    parameters: Text = "",
    visibility: Text = "workspace",
    members: Text = "",
    filename_template: Text = "",
) -> Response:
    form = QueryForm(name, source, sql, parameters, visibility, members, filename_template)
    return _save(request, context, session, principal, form, query_id)
