"""The one place DuckDB (and its Arrow reader's) exceptions become qexport errors."""

from __future__ import annotations

import re

import duckdb

from qexport.domain.failures import (
    LimitExceededError,
    MemoryRefusedError,
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceOutOfMemoryError,
    SourceUnavailableError,
    TextPosition,
    bounded_detail,
)
from qexport.sources.withheld import PathShown, logged, without_layout

# Errors the query's author caused and can fix: the export settles query_invalid.
_QUERY_ERRORS: tuple[type[Exception], ...] = (
    duckdb.ParserException,
    duckdb.SyntaxException,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.InvalidTypeException,
    duckdb.TypeMismatchException,
    duckdb.OutOfRangeException,
    duckdb.PermissionException,
    duckdb.NotImplementedException,
)
# DuckDB's out of memory is told apart before these (translate_error): a refused allocation
# ("(bad allocation)") is not retried, its own memory limit is.
_UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (duckdb.IOException,)

# Once the rows stream through Arrow, DuckDB's errors surface as Arrow errors carrying only
# DuckDB's message; its "<kind> Error:" prefix is all that is left to classify them by.
_QUERY_ERROR_PREFIXES = (
    "Parser Error",
    "Syntax Error",
    "Binder Error",
    "Catalog Error",
    "Conversion Error",
    "Invalid Input Error",
    "Invalid type Error",
    "Mismatch Type Error",
    "Divide by Zero Error",
    "Out of Range Error",
    "Permission Error",
    "Not implemented Error",
)
_UNAVAILABLE_PREFIXES = ("IO Error",)
# Out of memory is usually other exports crowding the same worker: worth another attempt
# (SourceOutOfMemoryError is a SourceUnavailableError); a preview says which limit it met.
_MEMORY_PREFIX = "Out of Memory Error"
# Errors about a value quote the value, which is row data: it must not reach failure_detail.
_VALUE_ERROR_PREFIXES = ("Conversion Error", "Invalid Input Error", "Out of Range Error")
_QUOTED = re.compile(r"'(?:[^']|'')*'")


def _redact_values(message: str) -> str:
    """Replace quoted literals in a value error with '…'; other errors quote only SQL."""
    if message.startswith(_VALUE_ERROR_PREFIXES):
        return _QUOTED.sub("'…'", message)
    return message


# DuckDB points at a mistake with the line as it shows it and a caret under the place:
# "...\n\nLINE 2:  FROM t GROUP BY\n                      ^". A long line is shown cut, with "...".
_CARET = re.compile(r"\n\s*LINE (\d+): ([^\n]*)\n( *)\^+[^\n]*")
_ELLIPSIS = "..."


def _position(sql: str, line: int, shown: str, caret: int) -> TextPosition | None:
    """Where the caret points in `sql`: `shown` is DuckDB's copy of line `line` (maybe cut
    at either end), `caret` the caret's column in it (0-based)."""
    lines = sql.split("\n")
    if not 1 <= line <= len(lines):
        return None
    core = shown.removeprefix(_ELLIPSIS)
    skipped = len(shown) - len(core)
    core = core.removesuffix(_ELLIPSIS)
    start = lines[line - 1].find(core)
    if start < 0 or caret < skipped:
        return None
    offset = sum(len(text) + 1 for text in lines[: line - 1]) + start + caret - skipped
    return TextPosition.at(sql, offset)


def located(message: str, sql: str) -> tuple[str, TextPosition | None]:
    """DuckDB's message without its caret art, and the place in `sql` it pointed at."""
    found = _CARET.search(message)
    if found is None:
        return message, None
    line = int(found.group(1))
    caret = len(found.group(3)) - len(f"LINE {line}: ")
    position = _position(sql, line, found.group(2), caret)
    headline = (message[: found.start()] + message[found.end() :]).strip()
    if position is not None:
        headline = f"{headline} ({position.words()})"
    return headline, position


def query_invalid(message: str, sql: str) -> QueryInvalidError:
    """A query's mistake as DuckDB told it: its position kept, value quotes redacted."""
    text, position = located(message, sql)
    return QueryInvalidError(_redact_values(bounded_detail(text)), position=position)


_INTERRUPT_PREFIX = "INTERRUPT Error"
_REFUSED_ALLOCATION = "(bad allocation)"
# DuckDB names the setting in the error it raises when spill would pass it.
_TEMP_LIMIT_SETTING = "max_temp_directory_size"


def timeout_error(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(f"statement timeout of {seconds:g} s reached")


def translate_error(  # noqa: PLR0911 - one return per kind of DuckDB error
    exc: BaseException,
    *,
    timed_out: bool,
    timeout_seconds: float,
    sql: str = "",
    source: str = "",
    shown: PathShown | None = None,
) -> QExportError:
    """The qexport error for an exception raised while running or reading a statement
    (`sql`, when given, is the query's text: a mistake's position is found in it; `source`
    names it in the log; `shown`: the paths its members may read in it, a lake's)."""
    message = _redact_values(bounded_detail(str(exc)))
    if isinstance(exc, QExportError):
        return exc
    if isinstance(exc, duckdb.InterruptException) or message.startswith(_INTERRUPT_PREFIX):
        if timed_out:
            return timeout_error(timeout_seconds)
        return QExportError("the statement was interrupted")
    if isinstance(exc, _QUERY_ERRORS) or message.startswith(_QUERY_ERROR_PREFIXES):
        return query_invalid(str(exc), sql)
    if _TEMP_LIMIT_SETTING in message:
        # Not worth another attempt: the same query spills as much the next time.
        return LimitExceededError(
            "the query needed more temporary disk space than the DuckDB temp limit allows"
            " (QEXPORT_DUCKDB_TEMP_LIMIT); it sorts, groups or joins too much at once"
        )
    if _REFUSED_ALLOCATION in message:
        # The process refused memory (the worker's backstop on its data size, or the
        # machine's): the same statement asks as much the next time, so not retried.
        return MemoryRefusedError(
            "the statement asked for more memory at once than the process may take"
        )
    if isinstance(exc, duckdb.OutOfMemoryException) or message.startswith(_MEMORY_PREFIX):
        return SourceOutOfMemoryError(_told(message, exc, source, shown))
    if isinstance(exc, _UNAVAILABLE_ERRORS) or message.startswith(_UNAVAILABLE_PREFIXES):
        # A file it could not read or write: a lake's, which stays, or the source's own (its
        # database file, spill, pipes), which members are not told where.
        return SourceUnavailableError(_told(message, exc, source, shown))
    return QExportError(f"the DuckDB source failed unexpectedly: {type(exc).__name__}")


def _told(message: str, exc: BaseException, source: str, shown: PathShown | None) -> str:
    """`message` without the paths but those `shown`; DuckDB's words to the log when that
    took something out."""
    told = without_layout(message, shown=shown)
    if told != message:
        logged("source_failed", source=source, kind="duckdb", reason=str(exc))
    return told


class FileAlreadyOpenError(ValueError):
    """The database file is already open, sandboxed, through another source of this process."""


# What stops a database file from opening, by DuckDB's words, as a member reads it.
_OPEN_FAILURES: tuple[tuple[str, str], ...] = (
    ("Could not set lock", "another process holds its file (a program writing to it)"),
    ("Conflicting lock", "another process holds its file (a program writing to it)"),
    ("database does not exist", "its file does not exist"),
    ("No such file or directory", "its file does not exist"),
    ("not a valid DuckDB database file", "its file is not a DuckDB database"),
    ("Is a directory", "its path is a folder, not a DuckDB file"),
    ("Permission denied", "qexport may not read its file"),
    ("version number", "its file was written by a DuckDB version qexport cannot read"),
)


def connect_error(name: str, exc: Exception) -> SourceUnavailableError:
    """The source's file could not be opened: what is wrong, for its members, without the
    file's path or the process holding it (withheld.py); DuckDB's words go to the log."""
    raw = str(exc)
    logged("source_connect_failed", source=name, kind="duckdb", reason=raw)
    if isinstance(exc, FileAlreadyOpenError):
        return SourceUnavailableError(
            f"DuckDB source {name!r} cannot be opened: its file is already open in this process"
            " through another source; a DuckDB file backs one source (the operator can share"
            " that one with other workspaces: qexport sources share NAME WORKSPACE)"
        )
    known = (why for words, why in _OPEN_FAILURES if words in raw)
    why = next(known, None) or without_layout(bounded_detail(raw))
    return SourceUnavailableError(
        bounded_detail(f"DuckDB source {name!r} cannot be opened: {why}; ask the operator")
    )
