"""The ObjectStore contract in memory."""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Sequence
from typing import BinaryIO

from qexport.domain.failures import (
    NotFoundError,
    ObjectExistsError,
    StorageUnavailableError,
)
from qexport.ports import StoredObject


class _InMemoryUpload:
    def __init__(self, store: InMemoryObjectStore, key: str, upload_id: str) -> None:
        self.key = key
        self.upload_id = upload_id
        self.staged = True  # parts are kept apart from the object until completion
        self._store = store
        self.parts: dict[int, bytes] = {}

    def upload_part(self, number: int, data: bytes | bytearray | memoryview) -> None:
        self.parts[number] = bytes(data)

    def complete(self, *, rows: int, sha256: str) -> StoredObject:
        data = b"".join(self.parts[n] for n in sorted(self.parts))
        with self._store.lock:
            if self._store.uploads.pop(self.upload_id, None) is None:
                # Aborted, or destroyed by discard_staging: its parts are gone.
                raise StorageUnavailableError(f"the upload to {self.key} no longer exists")
            if self.key in self._store.objects:
                raise ObjectExistsError(f"an object is already stored at {self.key}")
            stored = StoredObject(self.key, len(data), rows, sha256)
            self._store.objects[self.key] = (data, stored)
        return stored

    def abort(self) -> None:
        with self._store.lock:
            self._store.uploads.pop(self.upload_id, None)


class InMemoryObjectStore:
    """The ObjectStore contract in memory: create-if-absent completion, abort."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[bytes, StoredObject]] = {}
        self.uploads: dict[str, _InMemoryUpload] = {}

    def begin_upload(self, key: str) -> _InMemoryUpload:
        upload = _InMemoryUpload(self, key, uuid.uuid4().hex)
        with self.lock:
            self.uploads[upload.upload_id] = upload
        return upload

    def head(self, key: str) -> StoredObject | None:
        with self.lock:
            entry = self.objects.get(key)
        return entry[1] if entry else None

    def open(self, key: str) -> BinaryIO:
        with self.lock:
            entry = self.objects.get(key)
        if entry is None:
            raise NotFoundError(f"no object at {key}")
        return io.BytesIO(entry[0])

    def delete(self, key: str) -> None:
        with self.lock:
            self.objects.pop(key, None)

    def incomplete_uploads(self, key: str) -> Sequence[str]:
        with self.lock:
            return [u.upload_id for u in self.uploads.values() if u.key == key]

    def discard_staging(self, key: str) -> int:
        with self.lock:
            found = [u.upload_id for u in self.uploads.values() if u.key == key]
            for upload_id in found:
                del self.uploads[upload_id]
        return len(found)

    def staged_keys(self) -> Sequence[str]:
        with self.lock:
            return sorted({u.key for u in self.uploads.values()})

    def put_new(self, key: str, data: bytes) -> bool:
        with self.lock:
            if key in self.objects:
                return False
            self.objects[key] = (data, StoredObject(key, len(data), 0, ""))
        return True

    def names_under(self, prefix: str, *, limit: int | None = None) -> list[str]:
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix to list ends with '/': {prefix!r}")
        with self.lock:
            below = [key.removeprefix(prefix) for key in self.objects if key.startswith(prefix)]
        names = sorted({name.partition("/")[0] + ("/" if "/" in name else "") for name in below})
        return names if limit is None else names[:limit]
