"""The problem document every error is, as each route's OpenAPI `responses` name it."""

from __future__ import annotations

from typing import Any

from qexport.http.errors import PROBLEM_MEDIA_TYPE, PROBLEM_SCHEMA

_RETRY_AFTER = {
    "description": "Seconds to wait before asking again.",
    "schema": {"type": "integer"},
}

_WHY: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("The request body could not be read (e.g. not UTF-8).", {}),
    401: (
        "Missing, malformed or revoked token.",
        {"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    403: ("The caller may no longer read the query (code access_lost) or lacks the role.", {}),
    404: ("Not found, or not visible to the caller: the two look the same.", {}),
    409: (
        "Not in a state that allows this (code not_ready while queued or running, with"
        " Retry-After; export_failed; conflict).",
        {"Retry-After": _RETRY_AFTER},
    ),
    410: ("The file has expired.", {}),
    413: ("The request body is too large.", {}),
    416: ("The requested byte range lies beyond the end of the file.", {}),
    422: ("Invalid request; `field` names the member at fault.", {}),
    429: ("Too many exports queued or running for this requester.", {"Retry-After": _RETRY_AFTER}),
    503: (
        "The metadata database did not answer within the server's deadline or is"
        " unreachable (code database_unavailable, with Retry-After); the object store"
        " (unavailable) or the data source (source_unavailable) is unavailable.",
        {"Retry-After": _RETRY_AFTER},
    ),
    504: ("The data source did not answer within the statement timeout (query_timeout).", {}),
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for error statuses, each an application/problem+json.

    422 is always included: any route's validation errors are problem documents (without
    it FastAPI would document its own application/json 422 on routes with parameters).
    """
    found: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, 422}):
        description, headers = _WHY[status]
        entry: dict[str, Any] = {
            "description": description,
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}},
        }
        if headers:
            entry["headers"] = headers
        found[status] = entry
    return found
