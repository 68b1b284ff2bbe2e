"""Where `qexport exports download` writes an export's file: a plain name inside the directory
given, never past it; written beside it and renamed over it once whole, never half-written.
The same for a file from a server or from the local database (`qexport.cli.client.Client`)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from qexport.cli.client import Client
from qexport.cli.common import err, fail, fail_input, out
from qexport.domain.exports import safe_filename
from qexport.domain.humanize import human_size

# What every export's file name looks like (domain/exports.py's safe_filename makes them).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def plain_file_name(filename: str) -> str:
    """The export's file name as one plain name inside the directory it is written to: what
    qexport names files is kept; anything else (a server's `../../.bashrc`, `/etc/x`, `..`)
    is made safe the same way, so it can never leave that directory."""
    if _PLAIN_NAME.fullmatch(filename) and ".." not in filename:
        return filename
    stem, dot, extension = filename.rpartition(".")
    if not dot or not stem:
        stem, extension = filename, ""
    return safe_filename(stem, re.sub(r"[^A-Za-z0-9]", "", extension)[:10] or "bin")


def download_target(output: str | None, filename: str, *, force: bool) -> Path:
    """Where a download goes: `output` if it names a file, the export's file name inside it
    if it names a directory (`.`, `DIR/`), else that name here; an existing file only with
    `force`. The export's own name never reaches outside the directory (`plain_file_name`)."""
    filename = plain_file_name(filename)
    if output is None:
        target = Path(filename)
    elif Path(output).is_dir():
        target = Path(output) / filename
    elif output.endswith(("/", os.sep)):
        fail_input(f"no directory {output!r}: create it first, or name a file")
    else:
        target = Path(output)
    if target.is_dir():
        fail_input(f"{str(target)!r} is a directory; name a file, or a directory to write into")
    if target.exists() and not force:
        fail_input(f"{str(target)!r} already exists; pass --force to replace it")
    if not target.parent.is_dir():
        fail_input(f"no directory {str(target.parent)!r} to write {target.name!r} into")
    return target


@contextlib.contextmanager
def writing(output: Path) -> Iterator[BinaryIO]:
    """`replacing`, with a file system's refusal as one line instead of a traceback."""
    try:
        with replacing(output) as fh:
            yield fh
    except OSError as exc:
        fail(f"cannot write {str(output)!r}: {exc.strerror or exc}")


@contextlib.contextmanager
def replacing(output: Path) -> Iterator[BinaryIO]:
    """Write next to `output`, then rename over it: a failed download leaves nothing behind."""
    tmp = output.with_name(f".{output.name}.part")
    try:
        with tmp.open("wb") as fh:
            yield fh
        tmp.replace(output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def download(
    client: Client, export_id: str, output: str | None, *, link: bool, force: bool
) -> None:
    if link:
        location = client.file_location(export_id)
        if location is None:
            fail_input(
                "short-lived download links need S3 storage, and these files are kept on a"
                " file system: download the file itself (--output PATH)"
            )
        out.print(location, highlight=False, soft_wrap=True)
        return
    if output == "-":
        client.download(export_id, sys.stdout.buffer)
        return
    view = client.get_export(export_id)
    if view["status"] != "succeeded":  # the refusal says why, before any file exists
        client.file_location(export_id)
    target = download_target(output, str(view["filename"]), force=force)
    with writing(target) as fh:
        view = client.download(export_id, fh)
    err.print(
        f"wrote {target} ({human_size(view['size_bytes'])}, sha256 {view['sha256']})",
        soft_wrap=True,
    )
