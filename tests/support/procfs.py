"""Another process's state, read from /proc while it changes.

A process the tests watch goes on living while it is read: a file descriptor closes between
listing /proc/PID/fd and reading its link, a thread ends between listing /proc/PID/task and
reading its stat, a child exits between checking its /proc entry and reading it. Each reader
here takes what is there at the moment and leaves out what went in between, rather than
failing the test with FileNotFoundError (or ProcessLookupError) for a change it did not ask
about.
"""

from __future__ import annotations

import os
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None


def children(pid: int) -> list[int]:
    """The pids of `pid`'s children (its main thread's), or [] once it has gone."""
    text = _read(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in text.split()] if text else []


def threads(pid: int) -> list[int]:
    """The ids of `pid`'s threads, or [] once it has gone."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return []


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (field 3 of proc(5) first), or
    None once the process or thread has gone."""
    text = _read(f"/proc/{pid}/stat")
    return text.rsplit(")", 1)[1].split() if text else None


def alive(pid: int) -> bool:
    """Whether `pid` runs: it exists and is not a zombie waiting to be reaped."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets `pid` holds open now; those closed while reading are left
    out."""
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return set()
    for fd in fds:
        try:
            target = os.readlink(fd)
        except (FileNotFoundError, ProcessLookupError):
            continue  # closed since the listing
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes
