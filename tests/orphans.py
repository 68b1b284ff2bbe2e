"""Servers the tests start die with the test process, even when it is killed (SIGKILL from
a timeout or a CI runner leaves no fixture teardown): Linux's parent-death signal."""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGKILL when the process that started it ends. It
    survives `exec` (mariadbd, spark-submit's `exec java`); elsewhere than Linux, nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
