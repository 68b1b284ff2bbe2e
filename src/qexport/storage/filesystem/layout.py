"""Where the filesystem object store keeps things on disk, and how it writes them durably.

Layout::

    <root>/exports/<ws>/<id>/<file>      published objects (hard links to a staged file)
    <root>/.staging/<upload id>/         one multipart upload: upload.json, part-00001..., object
                                         (the id starts with a digest of its key: see key_tag)
    <root>/.meta/<st_dev>-<st_ino>.json  rows, sha256 and size of the file with that inode
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from qexport.private_files import make_private_dirs, open_private
from qexport.storage.keys import validate_key

OBJECTS_PREFIX = "exports"
STAGING_DIR = ".staging"
META_DIR = ".meta"
UPLOAD_FILE = "upload.json"
ASSEMBLED_FILE = "object"
PART_PREFIX = "part-"


@dataclass(frozen=True)
class ObjectMeta:
    """What a completed upload says about its object; bound to the object's inode."""

    key: str
    size_bytes: int
    rows: int
    sha256: str


@dataclass(frozen=True)
class StagedUpload:
    """An upload directory found in staging."""

    upload_id: str
    key: str | None  # None when upload.json is missing or unreadable (a crash during begin)
    started_at: datetime | None
    directory: Path


class FilesystemLayout:
    """Paths and durable writes under one store root; knows nothing about upload semantics."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects_root = root / OBJECTS_PREFIX
        self.staging_root = root / STAGING_DIR
        self.meta_root = root / META_DIR

    # ------------------------------------------------------------ paths

    def object_path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def staging_dir(self, upload_id: str) -> Path:
        return self.staging_root / upload_id

    def meta_path(self, st: os.stat_result) -> Path:
        return self.meta_root / f"{st.st_dev}-{st.st_ino}.json"

    # ------------------------------------------------------------ metadata

    def write_meta(self, st: os.stat_result, meta: ObjectMeta) -> Path:
        path = self.meta_path(st)
        write_file_durably(path, json.dumps(asdict(meta)).encode())
        return path

    def read_meta(self, st: os.stat_result) -> ObjectMeta | None:
        try:
            raw = json.loads(self.meta_path(st).read_bytes())
        except FileNotFoundError:
            return None
        return ObjectMeta(
            key=str(raw["key"]),
            size_bytes=int(raw["size_bytes"]),
            rows=int(raw["rows"]),
            sha256=str(raw["sha256"]),
        )

    def meta_files(self) -> Iterator[tuple[Path, tuple[int, int]]]:
        """Every metadata file with the (st_dev, st_ino) it describes."""
        with contextlib.suppress(FileNotFoundError), os.scandir(self.meta_root) as entries:
            for entry in entries:
                stem = entry.name.removesuffix(".json")
                dev, _, ino = stem.partition("-")
                if entry.name.endswith(".json") and dev.isdigit() and ino.isdigit():
                    yield Path(entry.path), (int(dev), int(ino))

    # ------------------------------------------------------------ objects and staging

    def iter_objects(self) -> Iterator[tuple[Path, os.stat_result]]:
        """Every published object with its stat (taken without following symlinks)."""
        for directory, _dirs, files in os.walk(self.objects_root):
            for name in files:
                path = Path(directory, name)
                with contextlib.suppress(FileNotFoundError):
                    yield path, path.lstat()

    def staged_uploads(self) -> list[StagedUpload]:
        found: list[StagedUpload] = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.staging_root) as entries:
            found.extend(self._read_staged(Path(e.path)) for e in entries if e.is_dir())
        return found

    def staged_uploads_of(self, key: str) -> list[StagedUpload]:
        """Every upload staged for `key`, found by its name (also one whose upload.json was
        lost); only a directory named before names carried the key reads its upload.json."""
        tag = f"{key_tag(key)}-"
        found: list[StagedUpload] = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.staging_root) as entries:
            for entry in entries:
                if not entry.is_dir() or not (entry.name.startswith(tag) or "-" not in entry.name):
                    continue
                upload = self._read_staged(Path(entry.path))
                if entry.name.startswith(tag) or upload.key == key:
                    found.append(upload)
        return found

    def _read_staged(self, directory: Path) -> StagedUpload:
        try:
            raw = json.loads((directory / UPLOAD_FILE).read_bytes())
            return StagedUpload(
                directory.name,
                str(raw["key"]),
                datetime.fromisoformat(raw["started_at"]),
                directory,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return StagedUpload(directory.name, None, None, directory)

    def is_published(self, upload: StagedUpload) -> bool:
        """Whether the upload's assembled file is the object at its key (completed, not cleaned)."""
        if upload.key is None:
            return False
        try:
            staged = (upload.directory / ASSEMBLED_FILE).stat()
            published = self.object_path(upload.key).stat()
        except (FileNotFoundError, ValueError):
            return False
        return (staged.st_dev, staged.st_ino) == (published.st_dev, published.st_ino)


def key_tag(key: str) -> str:
    """What the names of the staging directories of `key` start with.

    Staging is found from the key alone, without trusting upload.json, which is written
    without an fsync and may be missing after a crash (or a kill during `begin_upload`).
    """
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def new_upload_id(key: str) -> str:
    return f"{key_tag(key)}-{secrets.token_hex(16)}"


def write_file_durably(path: Path, data: bytes) -> None:
    """Write `data` so that `path` holds its old content or all of `data`, even after a crash."""
    make_private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open_private(tmp) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename or link inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def prune_empty_dirs(start: Path, stop: Path) -> None:
    """Remove `start` and its parents while they are empty, never `stop` or above it."""
    current = start
    while current != stop and stop in current.parents:
        try:
            current.rmdir()
        except OSError:
            return
        current = current.parent
