"""Turn the numbered part files of a staged upload into one file, without copying through Python."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from qexport.storage.fs_layout import ASSEMBLED_FILE, PART_PREFIX, remove_quietly

# The kernel refuses a fast in-kernel copy between some filesystems or on old kernels.
_NO_FAST_COPY = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF}
)
_FALLBACK_CHUNK = 8 * 1024 * 1024


def part_name(number: int) -> str:
    return f"{PART_PREFIX}{number:05d}"


def numbered_parts(directory: Path) -> list[Path]:
    """The finished part files of `directory`, in part-number order."""
    parts: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        suffix = path.name.removeprefix(PART_PREFIX)
        if path.name.startswith(PART_PREFIX) and suffix.isdigit():
            parts.append((int(suffix), path))
    return [path for _, path in sorted(parts)]


def assemble_parts(directory: Path) -> Path:
    """Concatenate the parts into `directory/object` and return its path.

    A single part is renamed; several are joined by in-kernel copies. Calling it again after a
    failure is safe: parts are removed only once the assembled file is whole.
    """
    target = directory / ASSEMBLED_FILE
    parts = numbered_parts(directory)
    if len(parts) == 1:
        os.replace(parts[0], target)
        return target
    if not parts and target.exists():
        return target  # assembled by an earlier call whose later step failed
    tmp = directory / f".{ASSEMBLED_FILE}.tmp"
    try:
        with tmp.open("wb") as out:
            for part in parts:
                _append_file(out.fileno(), part)
        os.replace(tmp, target)
    except BaseException:
        remove_quietly(tmp)
        raise
    for part in parts:
        remove_quietly(part)
    return target


def _append_file(dst_fd: int, src: Path) -> None:
    with src.open("rb") as handle:
        src_fd = handle.fileno()
        size = os.fstat(src_fd).st_size
        offset = 0
        # Every copy primitive may move fewer bytes than asked for, so loop to the end.
        while offset < size:
            copied = _copy_range(src_fd, dst_fd, offset, size - offset)
            if copied == 0:
                raise OSError(errno.EIO, f"part {src.name} shrank while being assembled")
            offset += copied


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> int:
    """Copy bytes at `offset` of src to the current position of dst; return how many moved."""
    if sys.platform == "linux":
        try:
            return os.copy_file_range(src_fd, dst_fd, count, offset)
        except OSError as exc:
            if exc.errno not in _NO_FAST_COPY:
                raise
        try:
            return os.sendfile(dst_fd, src_fd, offset, count)
        except OSError as exc:
            if exc.errno not in _NO_FAST_COPY:
                raise
    chunk = os.pread(src_fd, min(count, _FALLBACK_CHUNK), offset)
    written = 0
    while written < len(chunk):
        written += os.write(dst_fd, chunk[written:])
    return len(chunk)
