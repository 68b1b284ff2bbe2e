"""`/api/v1/queries`: saved queries, written by editors and admins, read as visibility allows."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas import problem_responses
from qexport.container import Container
from qexport.domain.accounts import Principal
from qexport.domain.queries import (
    DEFAULT_FILENAME,
    MAX_PARAMETER_CHARS,
    Parameter,
    ParamType,
    Query,
    Visibility,
)
from qexport.services import queries as service
from qexport.services.describe import Describe, describe_timeout, describer
from qexport.sources.registry import usable_source_names

router = APIRouter(prefix="/queries", tags=["queries"])


DefaultValue = (
    StrictBool
    | Annotated[int, Field(strict=True, ge=-(2**63), lt=2**63)]
    | Annotated[float, Field(strict=True, allow_inf_nan=False)]
    | Annotated[str, Field(strict=True, max_length=MAX_PARAMETER_CHARS)]
    | None
)


FILENAME_HELP = (
    "How its exports' files are named, fixed when each is requested: {name}, {date} (UTC),"
    " {time}, {format} and its parameters ({since}); sanitised, with the format's extension."
    " Default {name}_{date}"
)


class ParameterSpec(BaseModel):
    """A parameter the SQL refers to as `$name`, and what a request may give for it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=63, pattern=service.PARAMETER_NAME.pattern, examples=["since"]
    )
    type: ParamType
    required: StrictBool | None = Field(
        default=None, description="Whether a request must give it; default: true without a default"
    )
    default: DefaultValue = Field(
        default=None, description="Used when a request gives none; coerced to the type"
    )


class ParameterView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    type: ParamType
    required: bool
    default: DefaultValue


class QueryWrite(BaseModel):
    """A query as written: created with POST, replaced whole with PUT."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=service.MAX_NAME_CHARS, examples=["daily orders"])
    sql: str = Field(
        min_length=1,
        max_length=service.MAX_SQL_CHARS,
        examples=["SELECT * FROM orders WHERE day >= $since"],
    )
    source: str = Field(min_length=1, max_length=200, description="A data source name")
    parameters: list[ParameterSpec] = Field(default_factory=list, max_length=service.MAX_PARAMETERS)
    visibility: Literal["workspace", "members"] = Field(
        default="workspace",
        description='"workspace": every member reads it; "members": only `members` and its owner',
    )
    members: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list,
        max_length=service.MAX_MEMBERS,
        description='User ids of workspace members, with "visibility": "members"',
    )
    filename_template: str | None = Field(
        default=None,
        max_length=200,
        description=FILENAME_HELP,
        examples=["{name}_{since}_{date}"],
    )

    def draft(self) -> service.QueryDraft:
        return service.QueryDraft(
            name=self.name,
            sql=self.sql,
            source=self.source,
            parameters=tuple(
                Parameter(
                    p.name,
                    p.type,
                    required=p.default is None if p.required is None else p.required,
                    default=p.default,
                )
                for p in self.parameters
            ),
            visibility=Visibility(self.visibility),
            members=frozenset(self.members),
            filename_template=self.filename_template,
        )


class ColumnView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    type: str = Field(description="The source's own type name, e.g. DECIMAL(10,2) or text")


class QueryView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    sql: str
    source: str
    parameters: list[ParameterView]
    visibility: Literal["workspace", "members"]
    members: list[str] = Field(description="Who reads it besides its owner, when not everyone")
    owner: str | None
    columns: list[ColumnView] | None = Field(
        description="The result's columns as the source described them when the query was"
        " saved; null for a query saved before queries were described"
    )
    filename_template: str = Field(description=FILENAME_HELP)

    @classmethod
    def of(cls, query: Query) -> QueryView:
        return cls(
            id=query.id,
            name=query.name,
            sql=query.sql,
            source=query.source,
            parameters=[
                ParameterView(name=p.name, type=p.type, required=p.required, default=p.default)
                for p in query.parameters
            ],
            visibility=query.visibility.value,
            members=sorted(query.members),
            owner=query.owner,
            columns=None
            if query.columns is None
            else [ColumnView(name=c.name, type=c.type) for c in query.columns],
            filename_template=query.filename_template or DEFAULT_FILENAME,
        )


class QueryList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[QueryView]


def _sources(context: Container, principal: Principal) -> frozenset[str]:
    """The sources the caller's workspace may use: a query may name only those."""
    return usable_source_names(context.settings, context.accounts, principal.workspace_id)


def _describe(context: Container, principal: Principal) -> Describe:
    """The caller's source describes the statement before it is saved, with their rights."""
    timeout = describe_timeout(context.settings.statement_timeout_seconds)
    return describer(context.sources, principal.requester, timeout)


@router.post(
    "",
    status_code=201,
    response_model=QueryView,
    responses=problem_responses(400, 401, 403, 413, 422, 503),
    summary="Save a query (editors and admins); its source describes it first",
    description="The source describes the statement without running it (the columns and"
    " their types, stored with the query). A statement it refuses (a syntax error, a missing"
    " table or column, anything but one SELECT, an undeclared parameter) is refused with 422,"
    ' `field` "sql", the source\'s message and, when the source gives one, `position`'
    " {line, column}; a source that cannot be reached refuses the save with 503"
    " `source_unavailable`.",
)
def create_query(
    body: QueryWrite,
    principal: CurrentPrincipal,
    context: Context,
    request: Request,
    response: Response,
) -> QueryView:
    query = service.create_query(
        context.catalog,
        context.accounts,
        principal,
        body.draft(),
        sources=_sources(context, principal),
        describe=_describe(context, principal),
    )
    response.headers["Location"] = request.app.url_path_for("read_query", query_id=query.id)
    return QueryView.of(query)


@router.get(
    "",
    response_model=QueryList,
    responses=problem_responses(401, 503),
    summary="The queries you can read",
)
def list_queries(principal: CurrentPrincipal, context: Context) -> QueryList:
    found = service.list_readable_queries(context.catalog, principal)
    return QueryList(items=[QueryView.of(q) for q in found])


@router.get(
    "/{query_id}",
    response_model=QueryView,
    responses=problem_responses(401, 404, 503),
    summary="One query (404 when missing or not visible to you)",
)
def read_query(query_id: str, principal: CurrentPrincipal, context: Context) -> QueryView:
    return QueryView.of(service.get_readable_query(context.catalog, principal, query_id))


@router.put(
    "/{query_id}",
    response_model=QueryView,
    responses=problem_responses(400, 401, 403, 404, 413, 422, 503),
    summary="Replace a query whole (editors and admins); its owner stays",
)
def replace_query(
    query_id: str, body: QueryWrite, principal: CurrentPrincipal, context: Context
) -> QueryView:
    query = service.replace_query(
        context.catalog,
        context.accounts,
        principal,
        query_id,
        body.draft(),
        sources=_sources(context, principal),
        describe=_describe(context, principal),
    )
    return QueryView.of(query)


@router.delete(
    "/{query_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(401, 403, 404, 503),
    summary="Delete a query (editors and admins); its unsettled exports fail access_lost",
)
def delete_query(query_id: str, principal: CurrentPrincipal, context: Context) -> Response:
    service.delete_query(context.catalog, principal, query_id)
    return Response(status_code=204)
