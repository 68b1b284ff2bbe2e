"""The statement scanner of the SQL sources: PostgreSQL's lexical rules (strings, quoted
identifiers, comments, dollar quoting), placeholders, and the second statement after a `;`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from qexport.domain.failures import QueryInvalidError

# PostgreSQL's blanks only: another Unicode space (a no-break space) is an identifier's
# character to it, so `\u00a0$b$` is an identifier there, not a blank before a `$b$` quote.
_BLANKS = " \t\n\r\f\v"
_SPACE = re.compile(f"[{_BLANKS}]+")
# PostgreSQL ends a `--` comment at a carriage return as well as at a line feed: what follows a
# lone `\r` is SQL (a second statement could hide there from a scanner that read on).
_LINE_COMMENT = re.compile(r"--[^\n\r]*")
# PostgreSQL's identifier and dollar-quote tag characters (scan.l): ASCII letters, `_` and
# every non-ASCII character start one; ASCII digits (and `$`, in an identifier) continue it.
# Python's \w and \d differ (`$€$` is a dollar quote's tag to PostgreSQL, not to \w).
_START = r"[A-Za-z_\u0080-\U0010ffff]"
_CONTINUE = r"[A-Za-z_0-9\u0080-\U0010ffff]"
_WORD = re.compile(rf"{_START}(?:{_CONTINUE}|\$)*")
_NUMBER = re.compile(r"[0-9][\w.]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
_ESCAPE_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'", re.DOTALL)
_IDENTIFIER = re.compile(r'"(?:[^"]|"")*"')
_DOLLAR_TAG = re.compile(rf"\$(?:{_START}{_CONTINUE}*)?\$")
_PLACEHOLDER = re.compile(r"\$([^\W\d]\w*)")
_POSITIONAL = re.compile(r"\$(\d+)")


def nested_comment_end(sql: str, pos: int) -> int:
    """Where the `/*` comment at `pos` ends, nested ones included (PostgreSQL's and Spark's
    rule); QueryInvalidError when it never does."""
    depth = 0
    while pos < len(sql):
        if sql.startswith("/*", pos):
            depth, pos = depth + 1, pos + 2
        elif sql.startswith("*/", pos):
            depth, pos = depth - 1, pos + 2
            if depth == 0:
                return pos
        else:
            pos += 1
    raise QueryInvalidError("the query has an unterminated /* comment")


class Scanner:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.pos = 0
        self.segments: list[str] = []
        self.names: list[str] = []
        self.segment_start = 0
        self.first_word: str | None = None
        self.end: int | None = None  # where the first top-level `;` is
        self.statements = 1
        self.comments: list[tuple[int, int]] = []  # (start, end) of each comment
        self.strings: list[tuple[int, int]] = []  # (start, end) of each string literal

    def scan(self) -> None:
        sql = self.sql
        while self.pos < len(sql):
            char = sql[self.pos]
            if char in _BLANKS:
                self._skip(_SPACE)
            elif sql.startswith("--", self.pos):
                self._comment(self._skip, _LINE_COMMENT)
            elif sql.startswith("/*", self.pos):
                self._comment(self._block_comment)
            elif char == ";":
                self._semicolon()
            else:
                self._content(char)

    def _comment(self, skip: Callable[..., None], *args: Any) -> None:
        start = self.pos
        skip(*args)
        self.comments.append((start, self.pos))

    def _content(self, char: str) -> None:
        if self.end is not None:
            # Anything but blanks and comments after a `;` is another statement.
            self.statements += 1
            self.end = None
        if char == "'":
            self._string(_STRING)
        elif char == '"':
            self._skip(_IDENTIFIER, "an unterminated quoted identifier")
        elif char == "$":
            self._dollar()
        elif match := _WORD.match(self.sql, self.pos):
            word = match.group()
            self.first_word = self.first_word or word
            self.pos = match.end()
            if word in ("E", "e") and self.sql.startswith("'", self.pos):
                self._string(_ESCAPE_STRING)
        elif char.isdigit():
            self._skip(_NUMBER)
        else:
            self.pos += 1

    def _skip(self, pattern: re.Pattern[str], unterminated: str = "") -> None:
        match = pattern.match(self.sql, self.pos)
        if match is None:
            raise QueryInvalidError(f"the query has {unterminated}")
        self.pos = match.end()

    def _string(self, pattern: re.Pattern[str]) -> None:
        start = self.pos
        self._skip(pattern, "an unterminated string literal")
        self.strings.append((start, self.pos))

    def _block_comment(self) -> None:
        self.pos = nested_comment_end(self.sql, self.pos)

    def _dollar(self) -> None:
        sql, pos = self.sql, self.pos
        if tag := _DOLLAR_TAG.match(sql, pos):
            close = sql.find(tag.group(), tag.end())
            if close < 0:
                raise QueryInvalidError("the query has an unterminated dollar-quoted string")
            self.pos = close + len(tag.group())
            self.strings.append((pos, self.pos))
        elif placeholder := _PLACEHOLDER.match(sql, pos):
            self._placeholder(placeholder)
        elif positional := _POSITIONAL.match(sql, pos):
            self._placeholder(positional)
        else:
            self.pos += 1

    def _placeholder(self, match: re.Match[str]) -> None:
        self.segments.append(self.sql[self.segment_start : match.start()])
        self.names.append(match.group(1))
        self.pos = self.segment_start = match.end()

    def _semicolon(self) -> None:
        if self.end is None:
            self.end = self.pos
        self.pos += 1


def blanked(sql: str, spans: list[tuple[int, int]]) -> str:
    pieces, at = [], 0
    for start, end in spans:
        pieces += [sql[at:start], " " * (end - start)]
        at = end
    return "".join([*pieces, sql[at:]])
