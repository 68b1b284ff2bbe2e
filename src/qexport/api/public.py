"""GET /p/{token}: a public delivery link, without authentication.

A valid link streams the file (or redirects to a short-lived presigned URL on S3); any
other link gets the same small page: 410 once it was revoked or expired, 404 if unknown.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from starlette.convertors import PathConvertor, register_url_convertor

from qexport.api.auth import Context
from qexport.api.schemas.problems import problem_responses
from qexport.domain.audit import Actor, ActorKind
from qexport.http.download import (
    DownloadConditions,
    after_sent,
    audited,
    file_response,
    file_responses,
    presigned_redirect,
)
from qexport.http.one_hop import OneHopRoute
from qexport.services.links import LinkGoneError, LinkUnknownError, note_link_used, resolve_link

router = APIRouter(route_class=OneHopRoute, tags=["public"])


class _AnyText(PathConvertor):
    """Everything after /p/, slashes and line breaks included (`path` stops at a newline),
    so that no public URL falls through to the API's JSON 404."""

    regex = "(?s:.*)"


register_url_convertor("anytext", _AnyText())

INVALID_LINK_PAGE = (
    b"<!doctype html>\n"
    b'<html lang="en"><head><meta charset="utf-8">'
    b'<meta name="viewport" content="width=device-width, initial-scale=1">'
    b'<meta name="robots" content="noindex"><title>Link not valid \xc2\xb7 qexport</title>'
    b'<link rel="stylesheet" href="/static/app.css"></head>\n'
    b'<body><header class="top"><span class="brand">qexport</span></header>'
    b'<main id="main"><h1>This link is not valid</h1>'
    b"<p>It may have been revoked, or the file it shared may have expired.</p>"
    b"<p>Ask the person who shared it for a new one.</p></main></body></html>\n"
)
# The token is in the URL: keep it out of Referer headers and search engines.
_PUBLIC_HEADERS = {"X-Robots-Tag": "noindex", "Referrer-Policy": "no-referrer"}
_PAGE = {"text/html": {"schema": {"type": "string"}}}


def invalid_link(status: int) -> Response:
    """The one invalid-link page: the same bytes whatever made the link invalid."""
    return Response(
        INVALID_LINK_PAGE,
        status_code=status,
        media_type="text/html; charset=utf-8",
        headers={**_PUBLIC_HEADERS, "Cache-Control": "no-store"},
    )


@router.get(
    "/p/{token:anytext}",
    response_class=Response,
    responses={
        **file_responses(),
        404: {"description": "The invalid-link page: unknown link.", "content": _PAGE},
        410: {"description": "The invalid-link page: revoked or expired.", "content": _PAGE},
        **problem_responses(503),
    },
)
def download_public(
    token: str,
    context: Context,
    conditions: DownloadConditions,
) -> Response:
    """The shared file while the link is valid; otherwise the invalid-link page."""
    try:
        link, record = resolve_link(
            context.exports, context.catalog, context.accounts, context.clock, token
        )
    except LinkUnknownError:
        return invalid_link(404)
    except LinkGoneError as gone:
        refused = invalid_link(410)
        holder = Actor(ActorKind.PUBLIC_LINK, gone.link.id)
        return audited(context.audit, context.clock, holder, gone.record, conditions, refused)
    response = presigned_redirect(context.presigner, record, context.clock.now())
    if response is not None:
        response.headers.update(_PUBLIC_HEADERS)
    else:
        response = file_response(context.objects, record, conditions, extra_headers=_PUBLIC_HEADERS)
    holder = Actor(ActorKind.PUBLIC_LINK, link.id)
    audited(context.audit, context.clock, holder, record, conditions, response)
    # After the response is sent: recording the use never delays the file.
    after_sent(response, note_link_used, context.accounts, context.clock, link)
    return response
