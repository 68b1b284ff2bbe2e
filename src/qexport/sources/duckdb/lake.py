"""Read-only data lakes: a DuckDB source whose queries may read Parquet, CSV and JSON files
under folders the operator names (`duckdb:///var/lib/lake.duckdb?allow=/data/lake,/data/x`).

Two locks, each enough on its own for what it covers:

- DuckDB's own sandbox: external access stays off and `allowed_directories` lists the lake
  folders (beside the source's private pipes folder), with the configuration locked, so no
  statement can widen it. DuckDB resolves `..` and symbolic links on both sides before it
  compares (measured on DuckDB 2.0: a link in the lake to a file or a folder outside is
  refused, as is `/data/lake/../etc`), and it does so for every file a glob matches.
- The statement check (duckdb/statements.py): only the readers below, each given its path as
  a string literal (or a list of them) that is absolute and lies, once resolved, inside a lake
  folder. It is what keeps queries out of the pipes and spill folders, which DuckDB must be
  allowed to use for itself, and it names the bad path in a query's error.

Writing stays impossible: the database is opened read-only and any statement but one SELECT
(COPY ... TO, ATTACH, INSTALL, LOAD, SET) is refused before it runs. A folder that holds
qexport's own files (the temporary folder where the pipes are, the data folder) cannot be a
lake folder.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from qexport.domain.failures import QueryInvalidError, bounded_detail

# The file readers a lake query may call (and their older names); any other stays refused.
LAKE_READERS = frozenset(
    {
        "read_parquet",
        "parquet_scan",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_ndjson",
        "read_ndjson_auto",
    }
)
_WILDCARDS = ("*", "?", "[", "{")
_WHERE_LISTED = "the source's URL names them, after ?allow="
_ALLOW = "allow"


@dataclass(frozen=True)
class Lake:
    """The folders a DuckDB source's queries may read files under, as configured and as
    resolved (links followed)."""

    folders: tuple[Path, ...]
    resolved: tuple[Path, ...]

    @classmethod
    def of(cls, folders: Sequence[Path]) -> Lake:
        return cls(tuple(folders), tuple(Path(os.path.realpath(f)) for f in folders))

    def duckdb_directories(self) -> list[str]:
        """The folders as DuckDB's `allowed_directories` takes them (a trailing `/`)."""
        return sorted({f"{folder}/" for folder in (*self.folders, *self.resolved)})

    def check_path(self, path: str, private: Path | None) -> None:
        """QueryInvalidError unless `path` (maybe a glob) is absolute and lies in a lake
        folder once resolved, outside `private` (the source's own scratch folder)."""
        if not path.startswith("/"):
            raise _refused(path, "a lake path must be absolute (/data/lake/file.parquet)")
        # A glob is judged by the folder it starts in; DuckDB checks every file it matches.
        head = min((i for i in map(path.find, _WILDCARDS) if i >= 0), default=len(path))
        fixed = path[:head] if head == len(path) else path[:head].rpartition("/")[0] or "/"
        resolved = Path(os.path.realpath(fixed))
        if private is not None and _within(resolved, Path(os.path.realpath(private))):
            raise _refused(path, "it is not in a lake folder")
        if not any(_within(resolved, folder) for folder in self.resolved):
            # Not the folders themselves: the refusal reaches viewers, who are not told where
            # the installation keeps its files; the query's authors read them in the source's
            # URL (GET /api/v1/sources, the sources page).
            raise _refused(path, f"it is not in a lake folder ({_WHERE_LISTED})")


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _refused(path: str, why: str) -> QueryInvalidError:
    return QueryInvalidError(bounded_detail(f"reading the file {path!r} is not allowed: {why}"))


def duckdb_location(url: str, *, data_dir: Path | None = None) -> tuple[Path, Lake | None]:
    """The database file of a `duckdb:///path` URL and its lake (None without `?allow=`).

    ValueError naming the folder when one is not absolute, does not exist, is no folder, or
    holds qexport's own files (the temporary folder, `data_dir`); or for any other option.
    """
    parts = urlsplit(url)
    path = Path(unquote(parts.path))
    if not parts.query:
        return path, None
    options = parse_qsl(parts.query, keep_blank_values=True)
    unknown = sorted({key for key, _ in options} - {_ALLOW})
    if unknown:
        raise ValueError(
            f"unknown DuckDB source option {unknown[0]!r} (the one option is"
            " ?allow=/folder,/other: the folders its queries may read files under)"
        )
    named = [item for _, value in options for item in value.split(",")]
    return path, Lake.of(lake_folders(named, data_dir=data_dir))


def lake_folders(named: Iterable[str], *, data_dir: Path | None = None) -> list[Path]:
    """The lake folders as given, each checked (ValueError naming the first bad one)."""
    own = [Path(os.path.realpath(tempfile.gettempdir()))]
    if data_dir is not None:
        own.append(Path(os.path.realpath(data_dir)))
    folders: list[Path] = []
    for text in named:
        if not text:
            raise ValueError("an empty folder in ?allow= (separate folders with one comma)")
        if not text.startswith("/"):
            raise ValueError(f"the lake folder {text!r} is not an absolute path")
        folder = Path(os.path.normpath(text))
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise ValueError(f"the lake folder {text!r} {what}")
        resolved = Path(os.path.realpath(folder))
        for mine in own:
            if _within(mine, resolved):
                raise ValueError(
                    f"the lake folder {text!r} holds qexport's own files ({mine}):"
                    " name a folder inside it"
                )
        folders.append(folder)
    if not folders:
        raise ValueError("?allow= names no folder")
    return folders


def literal_paths(arguments: Any) -> list[str] | None:
    """The paths a reader's first argument names, when it is a string literal or a list of
    them (`['/a.csv', '/b.csv']`); None for anything else (an expression, a parameter)."""
    if not isinstance(arguments, list) or not arguments:
        return None
    first = arguments[0]
    expression = first.get("expression") if isinstance(first, dict) else None
    if not isinstance(expression, dict) or first.get("name"):
        return None
    text = _string(expression)
    if text is not None:
        return [text]
    if expression.get("class") == "FUNCTION" and expression.get("function_name") == "list_value":
        items = [_string(item.get("expression")) for item in expression.get("arguments", [])]
        if items and all(isinstance(item, str) for item in items):
            return [item for item in items if item is not None]
    return None


def _string(expression: Any) -> str | None:
    if not isinstance(expression, dict) or expression.get("class") != "CONSTANT":
        return None
    literal = expression.get("literal")
    if isinstance(literal, dict) and literal.get("kind") == "STRING":
        text = literal.get("text")
        return text if isinstance(text, str) else None
    return None
