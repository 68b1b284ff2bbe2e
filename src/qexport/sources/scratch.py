"""Private scratch folders of a process (DuckDB's pipes and spill), and removing those of
processes that died without removing their own.

A process removes its folders when it exits normally; one killed with SIGKILL cannot. Each
folder holds a lock file that its process keeps locked (flock) while it lives: the kernel
drops the lock when the process dies, however it dies, so whoever next takes the lock knows
the owner is gone. Process ids would not do: they are reused, and a worker cannot tell its
own (forked) siblings' from a stranger's. `remove_abandoned` runs at every worker start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger()

SCRATCH_PREFIX = "qexport-scratch-"
# Folders of versions before the lock file: removed once unused for a day (creating or
# removing a pipe in one touches its modification time).
LEGACY_PREFIX = "qexport-pipes-"
LEGACY_IDLE_SECONDS = 86_400
LOCK_NAME = ".owner.lock"


@dataclass
class Scratch:
    """A private folder (mode 0700) locked by this process: `pipes` for COPY's named
    pipes, `spill` for DuckDB's temporary files."""

    root: Path
    lock_fd: int

    @property
    def pipes(self) -> Path:
        return self.root / "pipes"

    @property
    def spill(self) -> Path:
        return self.root / "spill"

    def remove(self) -> None:
        """Remove the folder, then let go of its lock; once (the descriptor is not closed
        twice, when its number may already be another file's)."""
        shutil.rmtree(self.root, ignore_errors=True)
        fd, self.lock_fd = self.lock_fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def make_scratch(parent: Path | None = None) -> Scratch:
    """A new scratch folder, locked before anything is put in it."""
    root = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (root / "pipes").mkdir(mode=0o700)
    (root / "spill").mkdir(mode=0o700)
    return Scratch(root, fd)


def remove_abandoned(parent: Path | None = None) -> int:
    """Remove the scratch folders (of this user, in `parent`, the temp folder by default)
    whose process is gone; how many were removed."""
    folder = Path(parent or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if entry.name.startswith(SCRATCH_PREFIX):
            gone = _owner_gone(entry)
        elif entry.name.startswith(LEGACY_PREFIX):
            gone = _idle(entry)
        else:
            continue
        if gone:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
            log.info("scratch_removed", path=str(entry), reason="its process is gone")
    return removed


def _ours(path: Path) -> os.stat_result | None:
    """The folder's stat when it is a real folder of this user (not a link), else None."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None
    return st


def _owner_gone(root: Path) -> bool:
    if _ours(root) is None:
        return False
    try:
        fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        # Made but not yet locked by a process starting now, or never locked: give it time.
        return _idle(root, seconds=3600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its process holds the lock: alive
    finally:
        os.close(fd)
    return True


def _idle(path: Path, seconds: float = LEGACY_IDLE_SECONDS) -> bool:
    st = _ours(path)
    return st is not None and time.time() - st.st_mtime > seconds
