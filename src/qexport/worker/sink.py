"""The writer's sink: bytes -> sha256, byte limit, fixed-size parts into the upload."""

from __future__ import annotations

import hashlib

from qexport.domain.failures import LimitExceededError
from qexport.ports import Upload
from qexport.worker.lease import Lease


class PartSink:
    """Buffers writer output into parts of `part_size` bytes and uploads them in order."""

    def __init__(self, upload: Upload, lease: Lease, *, part_size: int, max_bytes: int) -> None:
        self._upload = upload
        self._lease = lease
        self._part_size = part_size
        self._max_bytes = max_bytes
        self._buffer = bytearray()
        self._hash = hashlib.sha256()
        self._next_part = 1
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        n = len(data)
        if n == 0:
            return 0
        self.size += n
        if self.size > self._max_bytes:
            raise LimitExceededError(
                f"the file grew past the byte limit of {self._max_bytes:,} bytes"
            )
        self._hash.update(data)
        self._buffer += data
        if len(self._buffer) >= self._part_size:
            self._flush()
        return n

    def _flush(self) -> None:
        self._lease.check()
        self._upload.upload_part(self._next_part, bytes(self._buffer))
        self._next_part += 1
        self._buffer.clear()

    def finish(self) -> str:
        """Upload what is buffered (also for an empty file); return the hex sha256."""
        if self._buffer or self._next_part == 1:
            self._flush()
        return self._hash.hexdigest()
