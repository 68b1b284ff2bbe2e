"""What a PostgreSQL source accepts: one query with `$name` parameters, and how values enter it.

A saved query names its parameters the way DuckDB queries do (`$customer_id`, plus the
requester context `$user_id` and `$workspace_id`), so one query text works on either source.
PostgreSQL itself only knows positional `$1`, so the text is scanned here with PostgreSQL's
own lexical rules (strings, quoted identifiers, comments, dollar quoting), which is also how
a second statement hidden after a `;` is found.

Values are written into the text as typed SQL literals by psycopg (`sql.Literal`), not sent as
protocol parameters: the statement ends up inside `COPY (...) TO STDOUT`, and COPY takes no
parameters. psycopg quotes each value by its Python type with the connection's own escaping
rules (a string becomes one string literal whatever quotes or backslashes it holds; numbers,
dates and booleans become typed literals), so a value is always data, never SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from qexport.domain.failures import QueryInvalidError

_QUERY_KEYWORDS = frozenset({"select", "with", "values", "table"})

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


@dataclass(frozen=True)
class ParsedQuery:
    """The query cut around its placeholders: `segments[i]`, `$names[i]`, `segments[i+1]`..."""

    segments: tuple[str, ...]
    names: tuple[str, ...]

    def render(self, values: Mapping[str, Any], literal: Callable[[Any], str]) -> str:
        """The query text with each placeholder replaced by its value as a literal.

        Each literal is parenthesised so that it binds like a parameter would: `$n::text`
        with n = -5 is `(-5)::text`, not `-(5::text)`.
        """
        return self.render_mapped(values, literal).text

    def render_mapped(self, values: Mapping[str, Any], literal: Callable[[Any], str]) -> Rendered:
        """`render`, keeping where each segment of the query's own text went."""
        parts: list[str] = []
        spans: list[tuple[int, int, int]] = []
        rendered = original = 0
        for index, segment in enumerate(self.segments):
            if index:
                name = self.names[index - 1]
                value = f"({literal(values[name])})"
                parts.append(value)
                rendered += len(value)
                original += len(name) + 1  # `$name`
            spans.append((rendered, original, len(segment)))
            parts.append(segment)
            rendered += len(segment)
            original += len(segment)
        return Rendered("".join(parts), tuple(spans))


@dataclass(frozen=True)
class Rendered:
    """A query with its values written in, and where its own text's segments are in it:
    (offset in `text`, offset in the query as written, length) for each segment, in order."""

    text: str
    spans: tuple[tuple[int, int, int], ...]

    def original_offset(self, offset: int) -> int:
        """The offset in the query as written of the character at `offset` in `text`; for a
        character of a value, where its placeholder starts."""
        for rendered, original, length in reversed(self.spans):
            if offset >= rendered:
                return original + min(offset - rendered, length)
        return 0


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


class _Scanner:
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


def parse_query(sql: str, *, lexer: type[_Scanner] | None = None) -> ParsedQuery:
    """Check that `sql` is one query (SELECT, WITH, VALUES or TABLE); find its placeholders.

    Raises QueryInvalidError for an empty text, a second statement or any other statement.
    Positional placeholders (`$1`) are reported as names made of digits, for the caller to
    refuse with the same message as on DuckDB. `lexer`: a scanner with another engine's lexis
    (MySQL's).
    """
    scanner = (lexer or _Scanner)(sql)
    scanner.scan()
    if scanner.statements > 1:
        raise QueryInvalidError(
            f"only a single SELECT statement is allowed; got {scanner.statements} statements"
        )
    if scanner.first_word is None:
        raise QueryInvalidError("the query is empty")
    if scanner.first_word.lower() not in _QUERY_KEYWORDS:
        raise QueryInvalidError(
            f"only a single SELECT statement is allowed; got {scanner.first_word.upper()}"
        )
    # Trailing semicolons (and comments after them) are dropped: the query becomes a subquery.
    end = len(sql) if scanner.end is None else scanner.end
    tail = sql[scanner.segment_start : end]
    return ParsedQuery((*scanner.segments, tail), tuple(scanner.names))


def without_comments(sql: str, *, lexer: type[_Scanner] | None = None) -> str:
    """`sql` with each comment blanked out (the same length, so offsets stay), read with
    PostgreSQL's lexis or `lexer`'s; QueryInvalidError where `parse_query` would raise."""
    scanner = (lexer or _Scanner)(sql)
    scanner.scan()
    return _blanked(sql, scanner.comments)


def code_only(sql: str) -> str:
    """`sql` with its comments and string literals (dollar-quoted ones included) blanked out,
    read with PostgreSQL's lexis: what is left are names, keywords, numbers, operators."""
    scanner = _Scanner(sql)
    scanner.scan()
    return _blanked(sql, sorted(scanner.comments + scanner.strings))


def _blanked(sql: str, spans: list[tuple[int, int]]) -> str:
    pieces, at = [], 0
    for start, end in spans:
        pieces += [sql[at:start], " " * (end - start)]
        at = end
    return "".join([*pieces, sql[at:]])
