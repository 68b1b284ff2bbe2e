"""Servers the tests start die with the test process, even when it is killed (SIGKILL from
a timeout or a CI runner leaves no fixture teardown): Linux's parent-death signal."""

from __future__ import annotations

import shutil


def dying_with_parent(arguments: list[str]) -> list[str]:
    """`arguments` run under util-linux's `setpriv --pdeathsig KILL`: the command gets SIGKILL
    when the process that started it ends, and keeps that across `exec` (mariadbd,
    spark-submit's `exec java`). Without setpriv, `arguments` unchanged.

    Not a `preexec_fn`: Python code between fork and exec runs the interpreter's at-fork
    handlers in the child, and in a test process that has loaded the source drivers those
    crashed the child (a segmentation fault before exec, so no server and no log)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return arguments
    return [setpriv, "--pdeathsig", "KILL", "--", *arguments]
