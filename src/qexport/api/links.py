"""Public delivery links: created for a downloadable export, listed and revoked by their
creator or a workspace admin. The link itself is served by `api.public`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response

from qexport.api.auth import Context, CurrentPrincipal
from qexport.api.schemas.links import CreatedLink, LinkItem, LinkList, LinkRequest
from qexport.api.schemas.problems import problem_responses
from qexport.domain.commands import CreateLink, RevokeLink
from qexport.http.one_hop import OneHopRoute
from qexport.services.exports import MAX_EXPORT_ID_CHARS
from qexport.services.links import (
    MAX_LINKS_FOUND,
    create_link,
    links_starting,
    list_live_links,
    revoke_link,
)
from qexport.services.views import link_view

router = APIRouter(route_class=OneHopRoute, tags=["links"])
NO_OPTIONS = LinkRequest(
    expires_in_days=None
)  # no body: the link lives as long as its file (or the policy)


@router.post(
    "/exports/{export_id}/links",
    status_code=201,
    response_model=CreatedLink,
    responses=problem_responses(400, 401, 403, 404, 409, 410, 413, 422, 503),
)
def create(
    export_id: str,
    principal: CurrentPrincipal,
    context: Context,
    body: Annotated[LinkRequest, Body()] = NO_OPTIONS,
) -> CreatedLink:
    """A public URL for an export the caller could download now; it expires with the file,
    or after `expires_in_days` when sooner (never longer than the workspace's policy lets a
    link live: 422 past it).

    The same refusals as the file: 409 not ready or failed, 410 expired, 403 access lost,
    403 where the workspace's policy allows no public links.
    """
    created = create_link(context, principal, CreateLink(export_id, body.expires_in_days))
    return CreatedLink(id=created.link.id, url=created.url, expires_at=created.expires_at)


@router.get(
    "/exports/{export_id}/links",
    response_model=LinkList,
    responses=problem_responses(401, 404, 503),
)
def list_links(export_id: str, principal: CurrentPrincipal, context: Context) -> LinkList:
    """The export's unrevoked links that the caller may revoke: their own, or every one for a
    workspace admin; oldest first. Their URLs are not shown again."""
    record, found = list_live_links(
        context.exports, context.accounts, context.clock, principal, export_id
    )
    return LinkList(items=[LinkItem(**link_view(link, record)) for link in found])


@router.get("/links", response_model=LinkList, responses=problem_responses(401, 422, 503))
def find_links(
    principal: CurrentPrincipal,
    context: Context,
    id_prefix: Annotated[
        str,
        Query(
            description="Ids that start with this (at least 4 characters).",
            json_schema_extra={"maxLength": MAX_EXPORT_ID_CHARS},
        ),
    ],
    limit: Annotated[
        int,
        Query(
            description="Links at most.",
            json_schema_extra={"minimum": 1, "maximum": MAX_LINKS_FOUND},
        ),
    ] = MAX_LINKS_FOUND,
) -> LinkList:
    """The live links whose id starts with `id_prefix` that the caller may revoke (their
    own, or every one of the workspace's for an admin), whichever export they share, by id:
    what `GET /exports/{export_id}/links` shows, found by the start of an id."""
    found = links_starting(
        context.exports, context.accounts, context.clock, principal, id_prefix, limit=limit
    )
    return LinkList(items=[LinkItem(**link_view(link, record)) for link, record in found])


@router.delete(
    "/links/{link_id}",
    status_code=204,
    response_class=Response,
    responses={
        204: {"description": "Revoked (again, if it already was)."},
        **problem_responses(401, 404, 503),
    },
)
def revoke(link_id: str, principal: CurrentPrincipal, context: Context) -> Response:
    """Revoke a link; revoking a revoked link is 204 again. Links of others (unless the
    caller is a workspace admin) answer 404 like missing ones."""
    revoke_link(context, principal, RevokeLink(link_id))
    return Response(status_code=204)
