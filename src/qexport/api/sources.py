"""`/api/v1/sources`: the data sources a workspace may use; its admins register PostgreSQL ones.

Only names and kinds are returned, and only of the sources the caller's workspace may use
(not who else may); those who write queries (editors, admins) see their URLs too, with the
password masked.
Names are per workspace: another workspace's source of the same name is neither listed nor
told when one registers it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from qexport import bootstrap
from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.problems import problem_responses
from qexport.http.one_hop import OneHopRoute, waits_on_sources
from qexport.services import sources as service

router = APIRouter(route_class=OneHopRoute, prefix="/sources", tags=["sources"])


class SourceWrite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, examples=["warehouse"])
    url: str = Field(
        min_length=1,
        max_length=2000,
        description="postgresql://user:password@host[:port]/database[?sslmode=...]",
    )


class SourceView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str = Field(description="duckdb, postgresql, or env (a URL kept in a variable)")
    url: str | None = Field(
        description="Where the source is: its URL with the password masked, for those who"
        " write queries (editors and admins); null for viewers, who see a name and a kind"
    )

    @classmethod
    def of(cls, view: service.SourceView) -> SourceView:
        return cls(name=view.name, kind=view.kind, url=view.url)


class SourceList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[SourceView]


@router.get(
    "",
    response_model=SourceList,
    responses=problem_responses(401, 503),
    summary="The data sources your workspace may use",
)
def list_sources(principal: CurrentPrincipal, context: Context) -> SourceList:
    found = service.usable_sources(
        context.accounts,
        context.settings,
        principal.workspace_id,
        admin=principal.sees_workspace,
        writes_queries=principal.can_write_queries,
    )
    return SourceList(items=[SourceView.of(v) for v in found])


@router.post(
    "",
    status_code=201,
    response_model=SourceView,
    responses=problem_responses(400, 401, 403, 413, 422, 503),
    summary="Register a PostgreSQL source for your workspace (admins)",
)
@waits_on_sources
def create_source(
    body: SourceWrite,
    principal: CurrentPrincipal,
    context: Context,
    request: Request,
    response: Response,
) -> SourceView:
    settings = context.settings
    service.register_member_source(
        context.accounts,
        context.clock,
        settings,
        principal,
        body.name,
        body.url,
        check_role=lambda n, u, allow: bootstrap.check_source_role(n, u, settings, allow),
        identify=lambda n, u: bootstrap.source_identity(n, u, settings),
    )
    response.headers["Location"] = str(request.url_for("list_sources"))
    shown = service.shown_url(body.name, body.url, "", owner=principal.workspace_id)
    return SourceView(name=body.name, kind="postgresql", url=shown)
