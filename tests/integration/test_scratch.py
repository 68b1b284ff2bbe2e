"""Scratch folders (DuckDB's pipes and spill) of processes killed outright are removed at
the next worker start; those of live processes never are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from qexport.sources.scratch import LEGACY_IDLE_SECONDS, make_scratch, remove_abandoned

HOLD = """
import sys, time
from pathlib import Path
from qexport.sources.scratch import make_scratch
scratch = make_scratch(Path(sys.argv[1]))
print(scratch.root, flush=True)
time.sleep(120)
"""


def _holder(parent: Path) -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(parent)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    return process, Path(process.stdout.readline().strip())


def test_a_killed_processs_folder_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    """While its process lives the folder stays; after SIGKILL the next sweep removes it,
    with the pipes and spill inside."""
    process, root = _holder(tmp_path)
    try:
        (root / "spill" / "block.tmp").write_bytes(b"x" * 100)
        assert remove_abandoned(tmp_path) == 0
        assert root.is_dir()
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert process.stdout is not None
        process.stdout.close()
    assert remove_abandoned(tmp_path) == 1
    assert not root.exists()


def test_this_processs_own_folder_is_kept(tmp_path: Path) -> None:
    """A sweep in the process that holds a folder (another slot's source) leaves it alone;
    removing it is its owner's job."""
    scratch = make_scratch(tmp_path)
    try:
        assert remove_abandoned(tmp_path) == 0
        assert scratch.pipes.is_dir()
        assert scratch.spill.is_dir()
    finally:
        scratch.remove()
    assert not scratch.root.exists()


def test_folders_of_earlier_versions_go_once_idle_for_a_day(tmp_path: Path) -> None:
    """A `qexport-pipes-*` folder (no lock) untouched for a day is removed, a recent one is
    kept, and nothing else in the folder is touched."""
    old, recent, other = (
        tmp_path / "qexport-pipes-old",
        tmp_path / "qexport-pipes-new",
        tmp_path / "someone-else",
    )
    for folder in (old, recent, other):
        folder.mkdir()
    a_day_ago = time.time() - LEGACY_IDLE_SECONDS - 60
    os.utime(old, (a_day_ago, a_day_ago))
    os.utime(other, (a_day_ago, a_day_ago))
    assert remove_abandoned(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qexport-pipes-new", "someone-else"]
