"""The ObjectStore contract: the same cases on the filesystem store, S3 (on moto's server) and
the in-memory fake, so that the adapters and the fake the unit layer relies on cannot drift.

Uploads that are to leave something staged send two parts, the first of S3's minimum part
size: S3 holds a single part back in memory and stages nothing. What only one adapter does
(the filesystem's layout and lifecycle, S3's requests and faults) is tested in its own module.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from qexport.domain.failures import NotFoundError, ObjectExistsError, StorageUnavailableError
from qexport.ports import ObjectStore, StoredObject, Upload
from qexport.storage.filesystem import FilesystemObjectStore
from tests.fakes import FrozenClock, InMemoryObjectStore

# The moto server and per-test bucket fixtures (a plugin, so fixture arguments shadow nothing).
pytest_plugins = ["tests.support.s3server"]

KEY = "exports/demo/exp-1/orders.csv"
OTHER = "exports/demo/exp-2/orders.csv"
MIB = 1024 * 1024
PART = 8 * MIB  # above S3's 5 MiB minimum for every part but the last


@pytest.fixture(params=["filesystem", "s3", "memory"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Every ObjectStore: the contract holds unchanged on each."""
    if request.param == "filesystem":
        return FilesystemObjectStore(tmp_path / "store", clock=FrozenClock())
    if request.param == "s3":
        return request.getfixturevalue("s3_store")  # type: ignore[no-any-return]
    return InMemoryObjectStore()


def _upload(store: ObjectStore, parts: list[bytes], rows: int, key: str = KEY) -> StoredObject:
    upload = store.begin_upload(key)
    buffer = bytearray()
    for number, data in enumerate(parts, start=1):
        # The caller reuses one buffer for every part: the store must copy what it keeps.
        buffer[:] = data
        upload.upload_part(number, buffer)
    buffer[:] = b"X" * len(buffer)
    return upload.complete(rows=rows, sha256=hashlib.sha256(b"".join(parts)).hexdigest())


def _staged(store: ObjectStore, key: str = KEY, tail: bytes = b"tail") -> Upload:
    """An upload to `key` with two parts sent and not completed."""
    upload = store.begin_upload(key)
    upload.upload_part(1, b"a" * PART)
    upload.upload_part(2, tail)
    return upload


def _id(upload: Upload) -> str:
    """The adapter's id of the upload (each has one; the port does not need it)."""
    return str(upload.upload_id)  # type: ignore[attr-defined]


def _read(store: ObjectStore, key: str = KEY) -> bytes:
    with store.open(key) as stream:
        return stream.read()


def test_parts_are_joined_in_number_order_and_head_reports_the_metadata(
    objects: ObjectStore,
) -> None:
    """Parts sent out of order are joined by number; head reports size, rows and sha256, and
    nothing is left staged."""
    parts = [b"A" * (PART - 1) + b"\n", b"B" * (PART - 1) + b"\n", b"2,\xc3\xa9\n"]
    data = b"".join(parts)
    digest = hashlib.sha256(data).hexdigest()
    upload = objects.begin_upload(KEY)
    upload.upload_part(2, parts[1])
    upload.upload_part(1, parts[0])
    upload.upload_part(3, parts[2])

    stored = upload.complete(rows=1001, sha256=digest)

    expected = StoredObject(KEY, len(data), 1001, digest)
    assert stored == expected
    assert objects.head(KEY) == expected
    assert _read(objects) == data
    assert objects.incomplete_uploads(KEY) == []
    assert objects.staged_keys() == []


def test_multi_megabyte_parts_read_back_byte_exact(objects: ObjectStore) -> None:
    """Large parts of random bytes and a short tail give exactly the bytes uploaded."""
    parts = [os.urandom(5 * MIB + 17), os.urandom(6 * MIB), b"tail"]
    stored = _upload(objects, parts, rows=3)
    assert stored.size_bytes == sum(len(part) for part in parts)
    assert _read(objects) == b"".join(parts)
    assert objects.head(KEY) == stored


def test_a_single_part_is_stored_whole(objects: ObjectStore) -> None:
    """An export of one part is stored unchanged, with its metadata, and nothing staged."""
    stored = _upload(objects, [b"id\n1\n"], rows=1)
    assert stored.size_bytes == 5
    assert objects.head(KEY) == stored
    assert _read(objects) == b"id\n1\n"
    assert objects.incomplete_uploads(KEY) == []


def test_an_upload_of_no_parts_is_an_empty_object(objects: ObjectStore) -> None:
    """Completing without a part stores an empty object with rows 0."""
    empty = hashlib.sha256().hexdigest()
    stored = objects.begin_upload(KEY).complete(rows=0, sha256=empty)
    assert stored == StoredObject(KEY, 0, 0, empty)
    assert objects.head(KEY) == stored
    assert _read(objects) == b""


def test_a_key_prefix_is_not_an_object(objects: ObjectStore) -> None:
    """What leads to a key is neither found by head nor opened."""
    _upload(objects, [b"data"], rows=1)
    assert objects.head("exports/demo/exp-1") is None
    with pytest.raises(NotFoundError):
        objects.open("exports/demo")


@pytest.mark.parametrize("part_count", [1, 2], ids=["one-part", "parts"])
def test_a_second_completion_at_a_taken_key_raises_and_keeps_the_first(
    objects: ObjectStore, part_count: int
) -> None:
    """Create-if-absent: the loser gets ObjectExistsError, leaves nothing staged, and may
    still be aborted; the first object stays."""
    first = _upload(objects, [b"first\n"], rows=1)
    second = objects.begin_upload(KEY)
    for number in range(1, part_count + 1):
        second.upload_part(number, b"S" * PART)

    with pytest.raises(ObjectExistsError):
        second.complete(rows=99, sha256="0" * 64)

    assert objects.head(KEY) == first
    assert _read(objects) == b"first\n"
    assert objects.incomplete_uploads(KEY) == []
    assert objects.staged_keys() == []
    second.abort()  # the caller aborts after any error: harmless now
    assert objects.head(KEY) == first


def test_racing_completions_have_one_winner_whose_metadata_the_key_keeps(
    objects: ObjectStore,
) -> None:
    """Two attempts completing the same key at once: one object, the winner's bytes and
    metadata; the loser gets ObjectExistsError and nothing stays staged."""
    uploads = [objects.begin_upload(KEY) for _ in range(2)]
    for index, upload in enumerate(uploads):
        upload.upload_part(1, bytes([65 + index]) * PART)
        upload.upload_part(2, b"tail")
    start = threading.Barrier(2)
    outcomes: dict[int, StoredObject | Exception] = {}

    def complete(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = uploads[index].complete(rows=index, sha256=str(index) * 64)
        except ObjectExistsError as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=complete, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    winners = [value for value in outcomes.values() if isinstance(value, StoredObject)]
    losers = [value for value in outcomes.values() if isinstance(value, ObjectExistsError)]
    assert (len(winners), len(losers)) == (1, 1)
    assert objects.head(KEY) == winners[0]
    assert _read(objects) == bytes([65 + winners[0].rows]) * PART + b"tail"
    assert objects.incomplete_uploads(KEY) == []
    assert objects.staged_keys() == []


def test_abort_leaves_nothing_and_is_idempotent(objects: ObjectStore) -> None:
    """An aborted upload is no longer incomplete, leaves nothing staged and no object, and
    aborting again is harmless."""
    upload = _staged(objects)
    assert upload.staged
    assert objects.incomplete_uploads(KEY) == [_id(upload)]
    assert objects.staged_keys() == [KEY]

    upload.abort()
    upload.abort()

    assert objects.incomplete_uploads(KEY) == []
    assert objects.staged_keys() == []
    assert objects.head(KEY) is None


def test_abort_after_complete_keeps_the_object(objects: ObjectStore) -> None:
    """Aborting in a cleanup path after a successful completion is harmless."""
    upload = objects.begin_upload(KEY)
    upload.upload_part(1, b"done")
    stored = upload.complete(rows=1, sha256="f" * 64)
    upload.abort()
    assert objects.head(KEY) == stored
    assert _read(objects) == b"done"


def test_a_missing_key_heads_to_none_refuses_to_open_and_deletes_quietly(
    objects: ObjectStore,
) -> None:
    """head of a missing key is None; open raises NotFoundError; delete does nothing."""
    assert objects.head(KEY) is None
    with pytest.raises(NotFoundError):
        objects.open(KEY)
    objects.delete(KEY)


def test_delete_removes_the_object_and_frees_the_key(objects: ObjectStore) -> None:
    """After delete (twice), head is None, open is NotFound and the key completes anew."""
    _upload(objects, [b"old"], rows=1)
    objects.delete(KEY)
    objects.delete(KEY)

    assert objects.head(KEY) is None
    with pytest.raises(NotFoundError):
        objects.open(KEY)
    assert _upload(objects, [b"new"], rows=1).size_bytes == 3
    assert _read(objects) == b"new"


def test_discard_staging_removes_the_keys_uploads_and_keeps_its_object(
    objects: ObjectStore,
) -> None:
    """Uploads of the key left by dead attempts go, counted; the completed object and the
    upload of another key (even one that extends this key) stay and still complete."""
    stored = _upload(objects, [b"the object"], rows=1)
    _staged(objects)
    _staged(objects)
    longer = objects.begin_upload(f"{KEY}x")
    longer.upload_part(1, b"a" * PART)
    longer.upload_part(2, b"b")

    assert objects.discard_staging(KEY) == 2

    assert objects.incomplete_uploads(KEY) == []
    assert objects.incomplete_uploads(f"{KEY}x") == [_id(longer)]
    assert objects.staged_keys() == [f"{KEY}x"]
    assert objects.head(KEY) == stored
    assert _read(objects) == b"the object"
    assert objects.discard_staging(KEY) == 0
    assert longer.complete(rows=2, sha256="0" * 64).size_bytes == PART + 1


def test_an_upload_whose_staging_was_discarded_cannot_complete(objects: ObjectStore) -> None:
    """discard_staging destroys an upload still being written: completing it later is a
    storage error (retried by the worker), and the key stays free."""
    upload = _staged(objects)
    assert objects.discard_staging(KEY) == 1

    with pytest.raises(StorageUnavailableError):
        upload.complete(rows=1, sha256="0" * 64)
    upload.abort()

    assert objects.head(KEY) is None
    assert objects.incomplete_uploads(KEY) == []


def test_staged_keys_name_each_key_with_an_upload_left_once(objects: ObjectStore) -> None:
    """Every key with an incomplete upload is named once, in order; a completed key is not."""
    _upload(objects, [b"done"], rows=1, key="exports/demo/exp-0/done.csv")
    for key in (KEY, KEY, OTHER):
        _staged(objects, key)

    assert objects.staged_keys() == [KEY, OTHER]


RECORD = "audit/checkpoints/acme/9999999999999999989-seq10.json"


def test_a_small_object_is_stored_once_whole_and_read_back(objects: ObjectStore) -> None:
    """put_new writes a small object at a free key and reads back byte for byte; at a taken
    key it returns False and leaves the first (racing writers: exactly one wins)."""
    assert objects.put_new(RECORD, b'{"seq": 10}')
    assert not objects.put_new(RECORD, b'{"seq": 10, "forged": true}')
    assert _read(objects, RECORD) == b'{"seq": 10}'
    start = threading.Barrier(6)
    won: list[bool] = []

    def put(n: int) -> None:
        start.wait()
        won.append(objects.put_new(f"audit/checkpoints/race/{0:019d}", str(n).encode()))

    threads = [threading.Thread(target=put, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(won) == [False] * 5 + [True]


def test_names_under_a_prefix_list_objects_and_folders_in_order_up_to_a_limit(
    objects: ObjectStore,
) -> None:
    """names_under lists what is directly under a prefix (folders with a "/"), in byte order,
    the first `limit` only when asked; an unknown prefix lists nothing; a prefix must end
    with "/"."""
    for key in (
        "audit/checkpoints/acme/0002.json",
        "audit/checkpoints/acme/0001.json",
        "audit/checkpoints/acme/0010.json",
        "audit/checkpoints/%2A/0001.json",
        "audit/checkpoints/beta/sub/0001.json",
    ):
        assert objects.put_new(key, b"{}")
    _upload(objects, [b"x"], rows=1)
    assert objects.names_under("audit/checkpoints/") == ["%2A/", "acme/", "beta/"]
    assert objects.names_under("audit/checkpoints/acme/") == ["0001.json", "0002.json", "0010.json"]
    assert objects.names_under("audit/checkpoints/acme/", limit=1) == ["0001.json"]
    assert objects.names_under("audit/checkpoints/beta/") == ["sub/"]
    assert objects.names_under("audit/checkpoints/nobody/") == []
    assert objects.names_under("exports/demo/exp-1/") == ["orders.csv"]
    with pytest.raises(ValueError, match="ends with '/'"):
        objects.names_under("audit/checkpoints")
