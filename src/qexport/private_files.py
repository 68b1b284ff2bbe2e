"""Files and directories only the service's user may read, whatever the umask.

Exports, their metadata and the embedded database hold other people's data, and the
database holds the master secret: the data directory and every directory qexport creates
are 0700, every file it writes 0600. The mode is given when the file or directory is
created (a umask can only remove bits from it), never by changing the process's umask,
which would leak into everything else the process creates.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dirs(path: Path) -> None:
    """`mkdir -p` giving mode 0700 to every directory it creates (Path.mkdir gives missing
    parents the umask's mode); existing directories are left as they are."""
    try:
        path.mkdir(mode=PRIVATE_DIR)
    except FileNotFoundError:
        if path.parent == path:
            raise
        make_private_dirs(path.parent)
        make_private_dirs(path)
    except FileExistsError:
        if not path.is_dir():
            raise


def open_private(path: Path, *, append: bool = False) -> BinaryIO:
    """`path` opened for writing (truncated, or appended to), created 0600 if missing."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, PRIVATE_FILE), "ab" if append else "wb")


def write_private(path: Path, data: bytes | bytearray | memoryview) -> None:
    """Write `data` to `path`, created 0600 if missing."""
    with open_private(path) as handle:
        handle.write(data)


def make_private_file(path: Path) -> None:
    """Create `path` empty with mode 0600 if it is missing; tighten it to 0600 if it exists
    readable by others (a file created before qexport set modes itself).

    An existing file is never opened: closing any descriptor of a file drops every POSIX
    lock this process holds on it, and SQLite's locks are POSIX locks. A second engine on a
    database this process already had open would otherwise let another process take the
    database for unused, checkpoint and delete the WAL that this process still writes to,
    and those commits would be lost."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        tighten(path)


def tighten(path: Path) -> None:
    """Remove group and other permissions from an existing file; quietly skip a missing one
    or one this user may not change."""
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            path.chmod(mode & 0o700)
