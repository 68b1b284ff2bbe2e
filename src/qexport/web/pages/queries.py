"""The queries pages: the list, one query with its SQL, and the forms editors and admins
create and change them with (the API's services and rules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.commands import QueryDraft, SaveQuery
from qexport.domain.failures import (
    InvalidRequestError,
    SourceUnavailableError,
    TooManyRequestsError,
)
from qexport.domain.queries import Parameter, Query, Visibility, parse_param_spec, to_json_value
from qexport.http.one_hop import off_the_loop
from qexport.services import queries as service
from qexport.web.auth import CheckedForm, Context, SignedIn, WebPrincipal
from qexport.web.confirm import Confirmation, ConfirmedField, confirm_page, is_confirmed
from qexport.web.deleting import query_consequence
from qexport.web.errors import PageRoute, asks_first
from qexport.web.forms import (
    GENERAL,
    NOTICES,
    email_of,
    form_errors,
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

FIELDS = service.QUERY_FIELDS
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


@dataclass(frozen=True)
class _Read:
    """The draft a form describes, what could not be read of it, and the line number of each
    parameter the draft holds."""

    draft: QueryDraft
    found: list[InvalidRequestError]
    numbers: list[int]


def _draft(context: Container, form: QueryForm) -> _Read:
    """The draft the form describes: a parameter line that cannot be read is a problem of its
    own (the draft goes on without it), so that every mistake is told at once."""
    found: list[InvalidRequestError] = []
    params, numbers = [], []
    for number, line in numbered_lines(form.parameters):
        try:
            params.append(parse_param_spec(line))
            numbers.append(number)
        except InvalidRequestError as exc:
            found.append(InvalidRequestError(f"Line {number}: {exc}", field="parameters"))
    try:
        visibility = visibility_of(form.visibility)
    except InvalidRequestError as exc:
        found.append(exc)
        visibility = Visibility.MEMBERS if form.members.strip() else Visibility.WORKSPACE
    draft = QueryDraft(
        name=form.name.strip(),
        sql=form.sql,
        source=form.source,
        parameters=tuple(params),
        visibility=visibility,
        members=member_ids(context.accounts, form.members),
        filename_template=form.filename_template,
    )
    return _Read(draft, found, numbers)


def _form_page(
    request: Request,
    context: Container,
    session: Session,
    form: QueryForm,
    *,
    principal: Principal,
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
        sources=sorted(service.query_sources(context, principal)),
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
    read = _draft(context, form)
    try:
        query = service.save_query(
            context, principal, SaveQuery(read.draft, query_id, tuple(read.found))
        )
    except InvalidRequestError as exc:
        errors = form_errors(exc, FIELDS, lambda p: on_line(p, "parameters", read.numbers))
        return _form_page(
            request,
            context,
            session,
            form,
            principal=principal,
            query_id=query_id,
            status=400,
            errors=errors,
        )
    except SourceUnavailableError as exc:  # nothing saved: the form stays filled in
        errors = {GENERAL: exc.detail}
        return _form_page(
            request,
            context,
            session,
            form,
            principal=principal,
            query_id=query_id,
            status=503,
            errors=errors,
        )
    except TooManyRequestsError as exc:
        # No slot to describe it (services/slots.py), or no preview left this minute
        # (services/looks.py): the source was not asked.
        errors = {GENERAL: exc.detail}
        refused = _form_page(
            request,
            context,
            session,
            form,
            principal=principal,
            query_id=query_id,
            status=429,
            errors=errors,
        )
        refused.headers["Retry-After"] = str(exc.retry_after)
        return refused
    return RedirectResponse(f"/queries/{quote(query.id, safe='')}?notice=saved", status_code=303)


@router.get("/queries")
def queries_page(
    request: Request,
    context: Context,
    session: SignedIn,
    principal: WebPrincipal,
    notice: str | None = None,
) -> Response:
    """The queries the person may read, by name."""
    queries = service.list_readable_queries(context.catalog, principal)
    return page(
        request,
        "queries.html",
        session=session,
        queries=queries,
        notice=NOTICES.get(notice or ""),
    )


@router.get("/queries/new")
def new_query_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal
) -> Response:
    require_writer(principal)
    sources = sorted(service.query_sources(context, principal))
    form = QueryForm(source=sources[0] if len(sources) == 1 else "")
    return _form_page(request, context, session, form, principal=principal, query_id=None)


@router.post("/queries/new")
async def create_query(  # noqa: PLR0913 - one per form field
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
    return await off_the_loop(
        lambda: _save(request, context, session, principal, form, None), apart="sources"
    )


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
    return render_query_page(request, context, session, query, notice=NOTICES.get(notice or ""))


def render_query_page(
    request: Request,
    context: Container,
    session: Session,
    query: Query,
    *,
    notice: str | None = None,
    status: int = 200,
    **extra: Any,
) -> Response:
    """The query's page; `extra` for the template (the preview, pages/preview.py)."""
    principal: Principal = request.state.web_principal
    return page(
        request,
        "query.html",
        status=status,
        session=session,
        query=query,
        params=[param_line(p) for p in query.parameters],
        members=member_lines(context.accounts, query.members).splitlines(),
        owner=email_of(context.accounts, query.owner),
        notice=notice,
        delete_consequence=query_consequence(
            context.catalog, context.schedules, query, principal.requester
        )
        if principal.can_write_queries
        else "",
        **extra,
    )


@router.get("/queries/{query_id}/edit")
def edit_query_page(
    request: Request, context: Context, session: SignedIn, principal: WebPrincipal, query_id: str
) -> Response:
    require_writer(principal)
    query = service.get_readable_query(context.catalog, principal, query_id)
    return _form_page(
        request, context, session, _form_of(context, query), principal=principal, query_id=query.id
    )


@router.post("/queries/{query_id}/edit")
async def edit_query(  # noqa: PLR0913 - one per form field
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
    return await off_the_loop(
        lambda: _save(request, context, session, principal, form, query_id), apart="sources"
    )


@asks_first("/queries/{query_id}/delete")
def _ask_delete(
    _request: Request,
    context: Container,
    _session: Session,
    principal: Principal,
    params: Mapping[str, str],
) -> Confirmation:
    require_writer(principal)
    query = service.get_readable_query(context.catalog, principal, params["query_id"])
    path = f"/queries/{quote(query.id, safe='')}"
    return Confirmation(
        title=f"Delete the query {query.name}?",
        consequence=query_consequence(
            context.catalog, context.schedules, query, principal.requester
        ),
        action=f"{path}/delete",
        yes="Delete the query",
        back=path,
    )


@router.post("/queries/{query_id}/delete")
def delete_query(
    request: Request,
    context: Context,
    session: CheckedForm,
    principal: WebPrincipal,
    query_id: str,
    confirmed: ConfirmedField = "",
) -> Response:
    """Delete the query once the person said yes (see web/confirm.py); editors and admins."""
    ask = _ask_delete(request, context, session, principal, {"query_id": query_id})
    if not is_confirmed(confirmed):
        return confirm_page(request, session, ask)
    service.delete_query(context.catalog, principal, query_id)
    return RedirectResponse("/queries?notice=query-deleted", status_code=303)
