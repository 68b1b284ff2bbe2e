"""Opaque cursors of the exports list, both ways: where the next older page starts (the
`(created_at, id)` of the last item shown) or the next newer one (of the first).

An older-page cursor is the one the API always gave (`next_cursor`), so cursors handed out
before newer pages existed keep working; a newer-page cursor is marked `n|`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime

from qexport.domain.failures import InvalidRequestError

MAX_CURSOR_CHARS = 200
_MAX_ID_CHARS = 64
_NEWER = "n|"


@dataclass(frozen=True)
class PageCursor:
    at: tuple[datetime, str]  # (created_at, id) of the export the page starts after
    newer: bool  # the page is newer than `at` (else older)


def encode_page_cursor(at: tuple[datetime, str], *, newer: bool = False) -> str:
    created_at, export_id = at
    raw = f"{_NEWER if newer else ''}{created_at.astimezone(UTC).isoformat()}|{export_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_cursor(cursor: str, field: str = "cursor") -> PageCursor:
    """The cursor as this API wrote it; 422 naming `field` for anything else."""
    invalid = InvalidRequestError(
        f"{field} is not one this API returned; pass it unchanged", field=field
    )
    if len(cursor) > MAX_CURSOR_CHARS:
        raise invalid
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
        newer = raw.startswith(_NEWER)
        created, _, export_id = raw.removeprefix(_NEWER).partition("|")
        when = datetime.fromisoformat(created)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise invalid from None
    if when.tzinfo is None or not export_id or len(export_id) > _MAX_ID_CHARS:
        raise invalid
    return PageCursor((when.astimezone(UTC), export_id), newer)
