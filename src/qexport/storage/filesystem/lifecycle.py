"""The sweeper that gives the filesystem store the lifecycle rules of the S3 bucket.

Rules: an object under `exports/` expires `retention + 1 day` after its completion (its mtime);
an upload neither completed nor aborted is dropped one day after it began (the backstop:
workers discard an export's staging as soon as it settles). On top of the bucket's rules,
metadata files whose inode no longer belongs to any file are removed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from qexport.storage.filesystem.layout import FilesystemLayout, StagedUpload
from qexport.storage.filesystem.store import FilesystemObjectStore, delete_object_file

INCOMPLETE_UPLOAD_AGE = timedelta(days=1)
EXPIRY_GRACE = timedelta(days=1)


@dataclass(frozen=True)
class LifecycleReport:
    objects_deleted: int
    uploads_removed: int
    orphan_meta_removed: int


def apply_filesystem_lifecycle(
    store: FilesystemObjectStore, now: datetime, retention: timedelta
) -> LifecycleReport:
    """Apply the bucket's lifecycle rules to `store` as of `now`; say how much was removed."""
    layout = store.layout
    # Listed before anything is scanned: a metadata file written later is never judged an orphan.
    meta_files = list(layout.meta_files())
    uploads_removed, staged_inodes = _sweep_staging(layout, now - INCOMPLETE_UPLOAD_AGE)
    objects_deleted, object_inodes = _sweep_objects(layout, now - retention - EXPIRY_GRACE)
    live = staged_inodes | object_inodes
    orphans = sum(_remove(path) for path, inode in meta_files if inode not in live)
    return LifecycleReport(objects_deleted, uploads_removed, orphans)


def _sweep_objects(layout: FilesystemLayout, cutoff: datetime) -> tuple[int, set[tuple[int, int]]]:
    """Delete objects completed before `cutoff`; return the count and the inodes still live."""
    deleted = 0
    live: set[tuple[int, int]] = set()
    for path, st in list(layout.iter_objects()):
        if st.st_mtime < cutoff.timestamp():
            deleted += delete_object_file(layout, path)
        else:
            live.add((st.st_dev, st.st_ino))
    return deleted, live


def _sweep_staging(layout: FilesystemLayout, cutoff: datetime) -> tuple[int, set[tuple[int, int]]]:
    """Remove uploads begun before `cutoff`; return the count and the inodes staged files hold."""
    removed = 0
    live: set[tuple[int, int]] = set()
    for upload in layout.staged_uploads():
        # Leftovers of a completed upload hold nothing unpublished, whatever their age.
        if layout.is_published(upload) or _began(upload) < cutoff.timestamp():
            shutil.rmtree(upload.directory, ignore_errors=True)
            removed += 1
            continue
        for entry in _files(upload):
            live.add((entry.st_dev, entry.st_ino))
    return removed, live


def _remove(path: Path) -> bool:
    """Unlink `path`; False when it was already gone (deleted along with its object)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _began(upload: StagedUpload) -> float:
    if upload.started_at is not None:
        return upload.started_at.timestamp()
    try:  # upload.json was never written whole: the directory's own time is the best clue
        return upload.directory.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _files(upload: StagedUpload) -> list[os.stat_result]:
    stats: list[os.stat_result] = []
    try:
        with os.scandir(upload.directory) as entries:
            stats.extend(entry.stat() for entry in entries if entry.is_file())
    except FileNotFoundError:
        pass
    return stats


class FilesystemRetention:
    """RetentionRules of the filesystem store: no rules are kept, this sweep applies them."""

    swept = True

    def __init__(self, store: FilesystemObjectStore) -> None:
        self._store = store
        self.where = str(store.root)

    def apply(self, now: datetime, retention: timedelta) -> str:
        report = apply_filesystem_lifecycle(self._store, now, retention)
        return (
            f"deleted {report.objects_deleted} file(s) past retention + 1 day, removed"
            f" {report.uploads_removed} incomplete upload(s) older than 1 day and"
            f" {report.orphan_meta_removed} orphan metadata file(s)"
        )

    def drift(self, retention: timedelta) -> list[str]:
        return []
