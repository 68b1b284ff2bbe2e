"""The filesystem object store: its layout on disk, crashes mid-completion, keys, lifecycle.

What every ObjectStore does is in test_object_store_contract.py."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from qexport.domain.failures import ObjectExistsError, StorageUnavailableError
from qexport.ports import StoredObject
from qexport.storage.filesystem import FilesystemObjectStore
from qexport.storage.filesystem import store as filesystem_store
from qexport.storage.filesystem.lifecycle import LifecycleReport, apply_filesystem_lifecycle

KEY = "exports/demo/exp-1/orders.csv"
NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
RETENTION = timedelta(days=7)


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


@pytest.fixture
def fixed_clock() -> FixedClock:
    return FixedClock(NOW)


@pytest.fixture
def folder_store(tmp_path: Path, fixed_clock: FixedClock) -> FilesystemObjectStore:
    return FilesystemObjectStore(tmp_path / "store", clock=fixed_clock)


def _upload(store: FilesystemObjectStore, key: str, parts: list[bytes], rows: int) -> StoredObject:
    upload = store.begin_upload(key)
    for number, data in enumerate(parts, start=1):
        upload.upload_part(number, data)
    return upload.complete(rows=rows, sha256=hashlib.sha256(b"".join(parts)).hexdigest())


def _read(store: FilesystemObjectStore, key: str) -> bytes:
    with store.open(key) as handle:
        return handle.read()


def _staging_entries(store: FilesystemObjectStore) -> list[str]:
    staging = store.layout.staging_root
    return sorted(os.listdir(staging)) if staging.exists() else []


def test_a_completed_object_is_a_plain_file_at_its_key(folder_store: FilesystemObjectStore) -> None:
    """Parts joined (out of order too) are the file at the key's path, and the upload's
    staging directory is gone."""
    parts = [b"id,name\n", b"1,a\n" * 1000, b"2,\xc3\xa9\n"]
    upload = folder_store.begin_upload(KEY)
    upload.upload_part(2, parts[1])
    upload.upload_part(1, parts[0])
    upload.upload_part(3, parts[2])
    upload.complete(rows=1001, sha256=hashlib.sha256(b"".join(parts)).hexdigest())
    assert folder_store.local_path(KEY).read_bytes() == b"".join(parts)
    assert _staging_entries(folder_store) == []


def test_the_loser_at_a_taken_key_leaves_no_staging_and_no_metadata(
    folder_store: FilesystemObjectStore,
) -> None:
    """Create-if-absent by hard link: the losing upload's directory and its metadata go."""
    _upload(folder_store, KEY, [b"first\n"], rows=1)
    second = folder_store.begin_upload(KEY)
    second.upload_part(1, b"second attempt, other bytes\n")

    with pytest.raises(ObjectExistsError):
        second.complete(rows=99, sha256="0" * 64)

    assert _read(folder_store, KEY) == b"first\n"
    assert _staging_entries(folder_store) == []
    assert len(os.listdir(folder_store.layout.meta_root)) == 1  # the loser's metadata is gone too


def test_delete_removes_the_metadata_too(folder_store: FilesystemObjectStore) -> None:
    """No metadata file is left behind by a deleted object."""
    _upload(folder_store, KEY, [b"old"], rows=1)
    folder_store.delete(KEY)
    assert os.listdir(folder_store.layout.meta_root) == []


def test_a_key_below_an_existing_object_is_a_storage_error(
    folder_store: FilesystemObjectStore,
) -> None:
    """A key that needs an object's path as a directory fails, and is not reported as taken."""
    _upload(folder_store, KEY, [b"data"], rows=1)
    upload = folder_store.begin_upload(KEY + "/nested.csv")
    upload.upload_part(1, b"x")
    with pytest.raises(StorageUnavailableError):
        upload.complete(rows=1, sha256="a" * 64)
    assert folder_store.head(KEY + "/nested.csv") is None


def test_uploading_to_an_aborted_upload_is_a_storage_error(
    folder_store: FilesystemObjectStore,
) -> None:
    """Writing after the staging is gone reports storage_unavailable, not a raw OSError."""
    upload = folder_store.begin_upload(KEY)
    upload.abort()
    with pytest.raises(StorageUnavailableError):
        upload.upload_part(1, b"late")


def test_metadata_survives_a_crash_between_link_and_staging_cleanup(
    folder_store: FilesystemObjectStore,
) -> None:
    """Meta written and link done, staging left behind: head still has the metadata."""
    upload = folder_store.begin_upload(KEY)
    upload.upload_part(1, b"abc")
    upload.upload_part(2, b"def")
    upload._discard = lambda: None  # type: ignore[method-assign]  # the process dies here

    upload.complete(rows=2, sha256="c" * 64)

    assert _staging_entries(folder_store) == [upload.upload_id]
    assert folder_store.head(KEY) == StoredObject(KEY, 6, 2, "c" * 64)
    assert folder_store.incomplete_uploads(KEY) == []  # it was completed, just not cleaned up
    report = apply_filesystem_lifecycle(folder_store, NOW, RETENTION)
    assert report == LifecycleReport(objects_deleted=0, uploads_removed=1, orphan_meta_removed=0)
    assert folder_store.head(KEY) == StoredObject(KEY, 6, 2, "c" * 64)


def test_discard_staging_removes_every_upload_of_the_key_and_keeps_its_object(
    folder_store: FilesystemObjectStore,
) -> None:
    """Uploads of the key left by dead attempts (one without its upload.json, one completed but
    not cleaned up, one with metadata but never linked) all go; the object, its metadata and
    another key's upload stay."""
    done = folder_store.begin_upload(KEY)
    done.upload_part(1, b"the object")
    done._discard = lambda: None  # type: ignore[method-assign]  # killed after the link
    stored = done.complete(rows=1, sha256="c" * 64)
    unlinked = folder_store.begin_upload(KEY)
    unlinked.upload_part(1, b"killed before the link")
    unlinked._publish = lambda staged: None  # type: ignore[method-assign]
    unlinked._discard = lambda: None  # type: ignore[method-assign]
    unlinked.complete(rows=1, sha256="d" * 64)
    killed = folder_store.begin_upload(KEY)
    killed.upload_part(1, b"killed mid-upload")
    nameless = folder_store.begin_upload(KEY)
    nameless.upload_part(1, b"killed in begin_upload")
    (folder_store.layout.staging_dir(nameless.upload_id) / "upload.json").unlink()
    other = folder_store.begin_upload("exports/demo/exp-2/orders.csv")
    other.upload_part(1, b"another export, still running")
    assert len(os.listdir(folder_store.layout.meta_root)) == 2

    assert folder_store.discard_staging(KEY) == 4

    assert _staging_entries(folder_store) == [other.upload_id]
    assert folder_store.incomplete_uploads(KEY) == []
    assert folder_store.head(KEY) == stored
    assert _read(folder_store, KEY) == b"the object"
    assert (
        len(os.listdir(folder_store.layout.meta_root)) == 1
    )  # the object's; the unlinked one's went
    assert folder_store.discard_staging(KEY) == 0
    other.upload_part(2, b"!")
    assert other.complete(rows=1, sha256="e" * 64).size_bytes == len(
        b"another export, still running!"
    )


def test_discard_staging_finds_an_upload_staged_before_ids_named_their_key(
    folder_store: FilesystemObjectStore,
) -> None:
    """A staging directory from an older version (a bare random id) is matched by the key in
    its upload.json: discarded with its key, kept for another."""
    for name, key in (("a" * 32, KEY), ("b" * 32, "exports/demo/exp-2/f.csv")):
        directory = folder_store.layout.staging_dir(name)
        directory.mkdir(parents=True)
        (directory / "upload.json").write_text(f'{{"key": "{key}", "started_at": "{NOW}"}}')
        (directory / "part-00001").write_bytes(b"x")
    assert folder_store.incomplete_uploads(KEY) == ["a" * 32]

    assert folder_store.discard_staging(KEY) == 1

    assert _staging_entries(folder_store) == ["b" * 32]


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/exports/a/b/c.csv",
        "exports/../secret",
        "exports/a//c.csv",
        "exports/a/b/",
        "exports\\a\\c.csv",
        "exports/./c.csv",
        ".meta/1-2.json",
        ".staging/x/part-00001",
    ],
)
def test_invalid_keys_are_refused(folder_store: FilesystemObjectStore, key: str) -> None:
    """Keys that could escape the root or reach the store's bookkeeping raise ValueError."""
    with pytest.raises(ValueError, match="key"):
        folder_store.begin_upload(key)
    with pytest.raises(ValueError, match="key"):
        folder_store.head(key)
    with pytest.raises(ValueError, match="key"):
        folder_store.local_path(key)


def _age_object(store: FilesystemObjectStore, key: str, age: timedelta) -> None:
    moment = (NOW - age).timestamp()
    os.utime(store.local_path(key), (moment, moment))


def test_lifecycle_deletes_expired_objects_and_keeps_fresh_ones(
    folder_store: FilesystemObjectStore,
) -> None:
    """Objects expire retention + 1 day after completion, with their metadata."""
    old_key, edge_key, fresh_key = (f"exports/demo/{name}/f.csv" for name in ("old", "edge", "new"))
    for key in (old_key, edge_key, fresh_key):
        _upload(folder_store, key, [b"data"], rows=1)
    _age_object(folder_store, old_key, RETENTION + timedelta(days=1, minutes=1))
    _age_object(folder_store, edge_key, RETENTION + timedelta(hours=23))
    _age_object(folder_store, fresh_key, timedelta(hours=1))

    report = apply_filesystem_lifecycle(folder_store, NOW, RETENTION)

    assert report == LifecycleReport(objects_deleted=1, uploads_removed=0, orphan_meta_removed=0)
    assert folder_store.head(old_key) is None
    assert not folder_store.local_path(old_key).parent.exists()  # empty directories are pruned
    assert folder_store.head(edge_key) is not None
    assert folder_store.head(fresh_key) is not None
    assert len(os.listdir(folder_store.layout.meta_root)) == 2


def test_lifecycle_removes_incomplete_uploads_older_than_a_day(
    folder_store: FilesystemObjectStore, fixed_clock: FixedClock
) -> None:
    """An upload begun more than a day ago is dropped; a recent one is left to finish."""
    fixed_clock.current = NOW - timedelta(days=1, minutes=5)
    stale = folder_store.begin_upload(KEY)
    stale.upload_part(1, b"stale")
    fixed_clock.current = NOW - timedelta(hours=2)
    recent = folder_store.begin_upload(KEY)
    recent.upload_part(1, b"recent")

    report = apply_filesystem_lifecycle(folder_store, NOW, RETENTION)

    assert report == LifecycleReport(objects_deleted=0, uploads_removed=1, orphan_meta_removed=0)
    assert folder_store.incomplete_uploads(KEY) == [recent.upload_id]
    with pytest.raises(StorageUnavailableError):
        stale.complete(rows=1, sha256="a" * 64)
    fixed_clock.current = NOW
    assert recent.complete(rows=1, sha256="b" * 64).size_bytes == len(b"recent")


def test_lifecycle_removes_orphan_metadata_only(folder_store: FilesystemObjectStore) -> None:
    """Metadata of an inode no file holds is swept; that of objects and staged files is kept."""
    _upload(folder_store, KEY, [b"kept"], rows=1)
    # The process dies after writing the metadata, before the link: the staged file still lives.
    in_flight = folder_store.begin_upload("exports/demo/exp-2/f.csv")
    in_flight.upload_part(1, b"in flight")
    in_flight._publish = lambda staged: None  # type: ignore[method-assign]
    in_flight._discard = lambda: None  # type: ignore[method-assign]
    in_flight.complete(rows=1, sha256="d" * 64)
    orphan = folder_store.layout.meta_root / "1-999999999.json"
    orphan.write_text('{"key": "x", "size_bytes": 1, "rows": 1, "sha256": "e"}')

    report = apply_filesystem_lifecycle(folder_store, NOW, RETENTION)

    assert report == LifecycleReport(objects_deleted=0, uploads_removed=0, orphan_meta_removed=1)
    assert not orphan.exists()
    assert len(os.listdir(folder_store.layout.meta_root)) == 2

    # Two days on, the crashed upload is swept and its metadata becomes an orphan with it.
    later = apply_filesystem_lifecycle(folder_store, NOW + timedelta(days=2), RETENTION)

    assert later == LifecycleReport(objects_deleted=0, uploads_removed=1, orphan_meta_removed=1)
    assert folder_store.incomplete_uploads("exports/demo/exp-2/f.csv") == []
    assert len(os.listdir(folder_store.layout.meta_root)) == 1
    assert folder_store.head(KEY) is not None


def test_a_failure_after_publishing_keeps_the_objects_metadata(
    folder_store: FilesystemObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If syncing the directory fails after the link, the published object keeps its
    metadata, so the next attempt can adopt it instead of finding the key locked."""

    def broken_fsync_dir(_path: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(filesystem_store, "fsync_dir", broken_fsync_dir)
    upload = folder_store.begin_upload(KEY)
    upload.upload_part(1, b"a,b\r\n")
    with pytest.raises(StorageUnavailableError):
        upload.complete(rows=0, sha256=hashlib.sha256(b"a,b\r\n").hexdigest())
    assert folder_store.head(KEY) == StoredObject(KEY, 5, 0, hashlib.sha256(b"a,b\r\n").hexdigest())
