"""Opaque list cursors: where the previous page ended, as (created_at, id) of its last item."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime

from qexport.domain.exports import ExportRecord
from qexport.domain.failures import InvalidRequestError

MAX_CURSOR_CHARS = 200
_MAX_ID_CHARS = 64


def encode_cursor(record: ExportRecord) -> str:
    raw = f"{record.created_at.astimezone(UTC).isoformat()}|{record.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """(created_at, id) of the last item of the previous page; 422 for anything else."""
    invalid = InvalidRequestError(
        "cursor is not one this API returned; pass next_cursor unchanged", field="cursor"
    )
    if len(cursor) > MAX_CURSOR_CHARS:
        raise invalid
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
        created, _, export_id = raw.partition("|")
        when = datetime.fromisoformat(created)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise invalid from None
    if when.tzinfo is None or not export_id or len(export_id) > _MAX_ID_CHARS:
        raise invalid
    return when.astimezone(UTC), export_id
