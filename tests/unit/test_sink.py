"""The writer's sink: bytes in, fixed-size parts out, in order, with the file's sha256."""

from __future__ import annotations

import hashlib
import threading

import pytest

from qexport.domain.failures import LimitExceededError
from qexport.ports import StoredObject
from qexport.worker.lease import Lease
from qexport.worker.sink import PartSink
from tests.fakes import FrozenClock, InMemoryMetadataStore


class RecordingUpload:
    def __init__(self) -> None:
        self.parts: list[tuple[int, bytes]] = []

    def upload_part(self, number: int, data: bytes | bytearray | memoryview) -> None:
        self.parts.append((number, bytes(data)))

    def complete(self, *, rows: int, sha256: str) -> StoredObject:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


def _sink(upload: RecordingUpload, *, part_size: int, max_bytes: int = 10**9) -> PartSink:
    lease = Lease(
        InMemoryMetadataStore(),
        FrozenClock(),
        "export-1",
        "token-1",
        lease_seconds=30,
        shutdown=threading.Event(),
    )
    return PartSink(upload, lease, part_size=part_size, max_bytes=max_bytes)


@pytest.mark.parametrize(
    ("size", "parts"),
    [(0, [0]), (7, [7]), (100, [100]), (101, [100, 1]), (350, [100, 100, 100, 50])],
)
def test_parts_have_the_part_size_and_keep_the_bytes_in_order(size: int, parts: list[int]) -> None:
    """Whatever the writer's chunks, parts are `part_size` bytes (the last one shorter, an
    empty file one empty part), numbered from 1, and the hash is the whole file's."""
    data = bytes(i % 251 for i in range(size))
    upload = RecordingUpload()
    sink = _sink(upload, part_size=100)
    for start in range(0, size, 33):
        sink.write(memoryview(data)[start : start + 33])
    digest = sink.finish()
    sink.close()

    assert [number for number, _ in upload.parts] == list(range(1, len(parts) + 1))
    assert [len(part) for _, part in upload.parts] == parts
    assert b"".join(part for _, part in upload.parts) == data
    assert digest == hashlib.sha256(data).hexdigest()
    assert sink.size == size


def test_the_byte_limit_stops_the_writer() -> None:
    """Writing past max_bytes raises limit_exceeded at the write that crosses it."""
    sink = _sink(RecordingUpload(), part_size=100, max_bytes=150)
    sink.write(b"x" * 150)
    with pytest.raises(LimitExceededError):
        sink.write(b"x")
    sink.close()
