"""Join part files that arrived out of order onto a staged upload, in the kernel."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from qexport.storage.filesystem.layout import PART_PREFIX, remove_quietly

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


def append_parts(directory: Path, target: Path, first: int) -> None:
    """Append the loose part files `first`, `first + 1`, ... of `directory` to `target`.

    Parts uploaded in order are appended as they arrive (see FilesystemUpload.upload_part);
    only parts that arrived out of order wait as files, and are joined here by in-kernel
    copies. A gap in the numbering is refused rather than published as a short file.
    """
    parts = numbered_parts(directory)
    numbers = [int(p.name.removeprefix(PART_PREFIX)) for p in parts]
    if numbers != list(range(first, first + len(parts))):
        raise ValueError(f"parts must be numbered contiguously from {first}, got {numbers}")
    with target.open("ab") as out:
        for part in parts:
            _append_file(out.fileno(), part)
    for part in parts:
        remove_quietly(part)


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
