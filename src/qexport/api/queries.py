"""`/api/v1/queries`: saved queries, written by editors and admins, read as visibility allows."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.fields import Parameters
from qexport.api.schemas.problems import problem_responses
from qexport.domain.commands import QueryDraft, SaveQuery
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import (
    MAX_PARAMETER_CHARS,
    Parameter,
    ParamType,
    Query,
    Visibility,
)
from qexport.http.one_hop import OneHopRoute, waits_on_sources
from qexport.services import preview
from qexport.services import queries as service
from qexport.services.views import query_view

router = APIRouter(route_class=OneHopRoute, prefix="/queries", tags=["queries"])


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

    # The name's and type's rules are checked with the rest of the query (every mistake of a
    # body at once, services/queries.py); the schema documents them.
    name: str = Field(
        examples=["since"],
        json_schema_extra={
            "minLength": 1,
            "maxLength": 63,
            "pattern": service.PARAMETER_NAME.pattern,
        },
    )
    type: str = Field(json_schema_extra={"enum": [t.value for t in ParamType]})
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
    """A query as written: created with POST, replaced whole with PUT. Its values are checked
    together, so that a 422 lists every mistake (`errors`) in the order name, source, sql,
    parameters, visibility, members."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        examples=["daily orders"],
        json_schema_extra={"minLength": 1, "maxLength": service.MAX_NAME_CHARS},
    )
    sql: str = Field(
        examples=["SELECT * FROM orders WHERE day >= $since"],
        json_schema_extra={"minLength": 1, "maxLength": service.MAX_SQL_CHARS},
    )
    source: str = Field(
        description="A data source name", json_schema_extra={"minLength": 1, "maxLength": 200}
    )
    parameters: list[ParameterSpec] = Field(
        default_factory=list, json_schema_extra={"maxItems": service.MAX_PARAMETERS}
    )
    visibility: str = Field(
        default="workspace",
        description='"workspace": every member reads it; "members": only `members` and its owner',
        json_schema_extra={"enum": [v.value for v in Visibility]},
    )
    members: list[Annotated[str, WithJsonSchema({"type": "string", "maxLength": 200})]] = Field(
        default_factory=list,
        description='User ids of workspace members, with "visibility": "members"',
        json_schema_extra={"maxItems": service.MAX_MEMBERS},
    )
    filename_template: str | None = Field(
        default=None,
        max_length=200,
        description=FILENAME_HELP,
        examples=["{name}_{since}_{date}"],
    )

    def draft(self) -> tuple[QueryDraft, list[InvalidRequestError]]:
        """The draft, and the problems found reading it (a type or visibility no query has:
        the draft then carries a stand-in, so the other checks still run)."""
        found: list[InvalidRequestError] = []
        parameters = []
        for index, p in enumerate(self.parameters):
            try:
                kind = ParamType(p.type)
            except ValueError:
                choices = ", ".join(t.value for t in ParamType)
                found.append(
                    InvalidRequestError(
                        f"unknown parameter type {p.type[:40]!r} (choose from {choices})",
                        field=f"parameters.{index}.type",
                    )
                )
                kind = ParamType.STRING
            parameters.append(
                Parameter(
                    p.name,
                    kind,
                    required=p.default is None if p.required is None else p.required,
                    default=p.default,
                )
            )
        try:
            visibility = Visibility(self.visibility)
        except ValueError:
            found.append(
                InvalidRequestError('visibility is "workspace" or "members"', field="visibility")
            )
            visibility = Visibility.MEMBERS if self.members else Visibility.WORKSPACE
        draft = QueryDraft(
            name=self.name,
            sql=self.sql,
            source=self.source,
            parameters=tuple(parameters),
            visibility=visibility,
            members=frozenset(self.members),
            filename_template=self.filename_template,
        )
        return draft, found


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
        return cls.model_validate(query_view(query))


class QueryList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[QueryView]


def _save_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        **problem_responses(*statuses),
        429: {
            **problem_responses(429)[429],
            "description": "You ran as many previews (or checks of queries that were not"
            " saved) as allowed in the last minute (QEXPORT_PREVIEW_PER_MINUTE), or you (or"
            " the server) already run as many previews and query checks as allowed at once;"
            " the source was not asked and nothing was saved; Retry-After says when to ask"
            " again.",
        },
    }


@router.post(
    "",
    status_code=201,
    response_model=QueryView,
    responses=_save_responses(400, 401, 403, 413, 422, 503),
    summary="Save a query (editors and admins); its source describes it first",
    description="The source describes the statement without running it (the columns and"
    " their types, stored with the query). A statement it refuses (a syntax error, a missing"
    " table or column, anything but one SELECT, an undeclared parameter) is refused with 422,"
    ' `field` "sql", the source\'s message and, when the source gives one, `position`'
    " {line, column}; a source that cannot be reached refuses the save with 503"
    " `source_unavailable`. A statement the source refuses is recorded in the audit trail"
    " (`query.created`, outcome `failed`) and takes one of your previews of the minute"
    " (QEXPORT_PREVIEW_PER_MINUTE); with none left the save is 429 before the source is"
    " asked. A statement the source accepts costs nothing.",
)
@waits_on_sources
def create_query(
    body: QueryWrite,
    principal: CurrentPrincipal,
    context: Context,
    request: Request,
    response: Response,
) -> QueryView:
    draft, found = body.draft()
    query = service.save_query(context, principal, SaveQuery(draft, found=tuple(found)))
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
    responses=_save_responses(400, 401, 403, 404, 413, 422, 503),
    summary="Replace a query whole (editors and admins); its owner stays",
    description="Checked by its source as a new query is (see POST); a statement the source"
    " refuses is recorded as a failed `query.changed`.",
)
@waits_on_sources
def replace_query(
    query_id: str, body: QueryWrite, principal: CurrentPrincipal, context: Context
) -> QueryView:
    draft, found = body.draft()
    query = service.save_query(context, principal, SaveQuery(draft, query_id, tuple(found)))
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


# ---------------------------------------------------------------- preview


class PreviewRequest(BaseModel):
    """The parameters of the run, as an export request gives them."""

    model_config = ConfigDict(extra="forbid")

    parameters: Parameters = Field(default_factory=dict)
    limit: int = Field(
        default=preview.MAX_ROWS, ge=1, le=preview.MAX_ROWS, description="Rows shown at most"
    )


class PreviewLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: int = Field(description="Rows shown at most")
    cell_chars: int = Field(description="Characters a text is cut to, then marked …[cut]")
    bytes: int = Field(description="About how much cell text is shown at most")


class PreviewView(BaseModel):
    """The first rows of the query's result, as an export of it would read them."""

    model_config = ConfigDict(extra="forbid")

    query_id: str
    query_name: str
    parameters: dict[str, Any] = Field(description="The values the query ran with")
    columns: list[ColumnView]
    rows: list[list[Any]] = Field(
        description="One list of cells per row, in the columns' order: null, booleans,"
        " numbers (integers beyond ±(2^53 - 1) as text), decimals as exact text,"
        " NaN/Infinity/-Infinity as text, dates and times in ISO 8601 (with the offset of"
        " their zone, when they have one), binary as \\x and hex, lists and structs as JSON"
        " text"
    )
    row_count: int = Field(description="How many rows are shown")
    truncated: bool = Field(description="Whether a cap was hit: more rows, or a text cut")
    more_rows: bool = Field(description="The result goes on past the rows shown")
    cut_cells: int = Field(description="How many texts were cut (they end with …[cut])")
    limits: PreviewLimits

    @classmethod
    def of(cls, found: preview.Preview) -> PreviewView:
        return cls.model_validate(preview.preview_json(found))


_PREVIEW_RESPONSES = {
    **problem_responses(400, 401, 403, 404, 413, 422, 503, 504),
    429: {
        **problem_responses(429)[429],
        "description": "You ran as many previews as allowed in the last minute"
        " (QEXPORT_PREVIEW_PER_MINUTE), or you (or the server) already run as many previews"
        " and query checks as allowed at once; Retry-After says when to ask again.",
    },
}


@router.post(
    "/{query_id}/preview",
    response_model=PreviewView,
    responses=_PREVIEW_RESPONSES,
    summary="The first rows of a query (at most 100), run with your rights",
    description="Runs the query as an export of it would run (your rights, the requester"
    " context, read-only, the statement timeout, at most 30 s) but reads only what it shows:"
    " at most `limit` rows (fewer when the workspace's policy sets `max_rows`) and about"
    " 256 KiB of cell text, long texts cut. It runs in a process of its own whose memory is"
    " bounded (QEXPORT_PREVIEW_MAX_MEMORY), and is recorded in the audit trail"
    " (`query.previewed`: the parameters' values and the rows shown). A query you may not"
    " read is 404; a bad parameter 422 naming it; a query the policy marks sensitive 403"
    " `forbidden`; a source your workspace may no longer use 403 `access_lost`; a statement"
    " the source refuses 422 `query_invalid`; one that needs more memory than a preview may"
    " use 422 `limit_exceeded`; one that runs too long 504 `query_timeout`; an unreachable"
    " source 503 `source_unavailable`; more previews than QEXPORT_PREVIEW_PER_MINUTE in a"
    " minute 429.",
)
@waits_on_sources
def preview_query(
    query_id: str, body: PreviewRequest, principal: CurrentPrincipal, context: Context
) -> PreviewView:
    found = preview.preview_query(
        context.preview_desk(),
        principal.requester,
        query_ref=query_id,
        parameters=dict(body.parameters),
        limit=body.limit,
    )
    return PreviewView.of(found)
