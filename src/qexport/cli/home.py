"""Where the local CLI keeps its installation, and who it acts as there.

The data directory is found as git finds its folder: QEXPORT_DATA_DIR (or --data-dir) when
given; otherwise the first `qexport-data` folder in the current folder or any folder above
it. A command that finds none never makes one where it happens to run: only `qexport init`
and `qexport demo` create it (an empty `qexport-data` made by `exports download` in another
folder used to answer "no export").

The account the local CLI acts as is stored in that directory (`cli.json`: the user's id,
email and workspace), written by `init` and the demo as they make the first admin. Making
more users never changes it; `--as EMAIL` acts as another member for one command, recorded
in the audit trail as done by the operator for that member, as every local action is.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

DATA_DIR_NAME = "qexport-data"
IDENTITY_FILE = "cli.json"


def find_data_dir(start: Path) -> Path | None:
    """The first `qexport-data` folder in `start` or a folder above it; None when there is
    none."""
    for folder in (start, *start.parents):
        candidate = folder / DATA_DIR_NAME
        if candidate.is_dir():
            return candidate
    return None


@dataclass(frozen=True)
class Identity:
    """Who the local CLI acts as in its data directory."""

    user_id: str
    email: str
    workspace: str


def read_identity(data_dir: Path) -> Identity | None:
    """The stored identity; None when there is none (a directory from before `init`, or one
    that only holds files). A damaged file is an error that names it."""
    path = data_dir / IDENTITY_FILE
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        found = json.loads(raw)
        return Identity(str(found["user_id"]), str(found["email"]), str(found["workspace"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is damaged ({exc}); delete it and run `qexport init --email EMAIL` again"
        ) from None


def write_identity(data_dir: Path, identity: Identity) -> None:
    """Store `identity` whole (written beside, then renamed into place)."""
    path = data_dir / IDENTITY_FILE
    draft = path.with_name(f".{IDENTITY_FILE}.{os.getpid()}")
    draft.write_text(json.dumps(asdict(identity), indent=2) + "\n", encoding="utf-8")
    draft.replace(path)
