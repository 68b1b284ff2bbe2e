"""Object keys: the one validation every object store applies before touching storage."""

from __future__ import annotations


def validate_key(key: str) -> str:
    """Return `key` if it is a safe relative key (`exports/<ws>/<id>/<file>`); else ValueError."""
    if not key:
        raise ValueError("object key is empty")
    if "\\" in key or "\x00" in key:
        raise ValueError(f"object key contains a backslash or NUL: {key!r}")
    if key.startswith("/"):
        raise ValueError(f"object key must be relative: {key!r}")
    segments = key.split("/")
    if any(segment == "" for segment in segments):
        raise ValueError(f"object key has an empty segment: {key!r}")
    if any(segment in {".", ".."} for segment in segments):
        raise ValueError(f"object key has a '.' or '..' segment: {key!r}")
    # Top-level names starting with a dot hold the stores' own bookkeeping (staging, metadata).
    if segments[0].startswith("."):
        raise ValueError(f"object key may not start with a dot: {key!r}")
    return key
