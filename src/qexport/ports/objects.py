"""The object store: where files are written (in parts) and read, and what it can do besides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO, Protocol


@dataclass(frozen=True)
class StoredObject:
    key: str
    size_bytes: int
    rows: int
    sha256: str


class Upload(Protocol):
    """One multipart upload to a fixed key. Parts are numbered from 1, in order."""

    key: str
    # True once anything may have been stored apart from the final object (a staged part, a
    # multipart upload asked for, even one whose answer was lost): `discard_staging` is due.
    staged: bool

    def upload_part(self, number: int, data: bytes | bytearray | memoryview) -> None:
        """Store part `number`; `data` is only valid during the call (copy to keep it)."""
        ...

    def complete(self, *, rows: int, sha256: str) -> StoredObject:
        """Atomic create-if-absent; raises ObjectExistsError when the key is taken."""
        ...

    def abort(self) -> None: ...


class ObjectStore(Protocol):
    def begin_upload(self, key: str) -> Upload: ...
    def head(self, key: str) -> StoredObject | None: ...
    def open(self, key: str) -> BinaryIO: ...
    def delete(self, key: str) -> None: ...
    def incomplete_uploads(self, key: str) -> Sequence[str]:
        """Ids of uploads to `key` that were begun and neither completed nor aborted."""
        ...

    def discard_staging(self, key: str) -> int:
        """Remove everything any upload staged for `key` and abort every upload to it still
        incomplete; the completed object stays. Returns how many leftovers were found.

        For a settled export only: an upload still being written to `key` is destroyed too.
        """
        ...

    def staged_keys(self) -> Sequence[str]:
        """The keys that something is staged for (incomplete uploads, staged parts)."""
        ...

    def put_new(self, key: str, data: bytes) -> bool:
        """Store the small object `data` at `key` unless an object is there (create-if-absent,
        as a completion is); False, nothing written, when the key is taken. Read it back with
        `open`. For qexport's own records (audit checkpoints), outside `exports/`."""
        ...

    def names_under(self, prefix: str, *, limit: int | None = None) -> list[str]:
        """The names directly under `prefix` (a key ending in "/"), in byte order, at most
        `limit`: an object's name, or a folder's with a "/" after it. Empty when none."""
        ...


class Presigner(Protocol):
    """An object store that can sign a time-limited GET URL (S3); the container says whether
    its store is one (`Container.presigner`)."""

    presign_seconds: int

    def presigned_url(self, key: str, filename: str, *, max_seconds: float | None = None) -> str:
        """A GET URL valid at most `max_seconds`, downloading as `filename`."""
        ...


class LocalFiles(Protocol):
    """An object store whose objects are files on this machine (the filesystem store); the
    container says whether its store is one (`Container.local_files`)."""

    def local_path(self, key: str) -> Path:
        """Where the object for `key` lives on disk."""
        ...


class RetentionRules(Protocol):
    """The object store's retention: files expire retention + 1 day after completion,
    uploads left incomplete are dropped after 1 day."""

    where: str  # the store, as an operator names it (a folder, s3://bucket/prefix)
    swept: bool  # True: no rules are kept, `apply` is a sweep to run from cron

    def apply(self, now: datetime, retention: timedelta) -> str:
        """Write the rules, or sweep; one line saying what was done."""
        ...

    def drift(self, retention: timedelta) -> list[str]:
        """How the rules in place differ from what they should be (empty: in place)."""
        ...
