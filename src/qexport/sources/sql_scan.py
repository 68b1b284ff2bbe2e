"""One statement scanner for the SQL sources' lexers (PostgreSQL, MySQL/MariaDB, Spark SQL):
it finds a query's `$name` placeholders, its first word, a second statement after a `;`, and
where its comments and string literals are.

The steps are the same for every dialect: blanks, line comments, block comments, `;`, then
quoted text, `$`, words and numbers. What differs is said by a `SqlDialect`, one per engine
(in each source's statements.py): which characters are blanks, which line comments exist,
whether block comments nest (and which ones the engine runs as SQL), what each quote character
opens and how it escapes, the prefixed strings (`E'...'`, `r'...'`), what a word and a number
are, whether `$tag$` opens a dollar-quoted string, and which first words start a query.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from qexport.domain.failures import QueryInvalidError

# The names of PostgreSQL and MySQL (scan.l; MySQL's identifiers): ASCII letters, `_` and
# every non-ASCII character start one; ASCII digits and `$` continue it. Python's \w and \d
# differ (`$€$` is a dollar quote's tag to PostgreSQL, not to \w).
NAME_START = r"[A-Za-z_\u0080-\U0010ffff]"
NAME_CONTINUE = r"[A-Za-z_0-9\u0080-\U0010ffff]"
SQL_WORD = re.compile(rf"{NAME_START}(?:{NAME_CONTINUE}|\$)*")
SQL_NUMBER = re.compile(r"[0-9][\w.]*")
_PLACEHOLDER = re.compile(r"\$([^\W\d]\w*)")
_POSITIONAL = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Quote:
    """What a quote character opens: `pattern` matches the whole quoted text from the quote;
    `literal`: a string literal (data), not a quoted name; `what` names it in a refusal."""

    pattern: re.Pattern[str]
    what: str = "string literal"
    literal: bool = True


@dataclass(frozen=True)
class SqlDialect:
    """One engine's lexical rules, as the scanner needs them."""

    blanks: re.Pattern[str]  # a run of blanks
    line_comments: tuple[re.Pattern[str], ...]  # each matches a whole comment where it starts
    nested_comments: bool  # `/* /* */ */` is one comment
    quotes: Mapping[str, Quote]  # by the character that opens it
    word: re.Pattern[str]
    query_words: frozenset[str]  # the first words (lower case) that start a query
    # Strings opened by a word just before the quote: `E'` (PostgreSQL), `r'` (Spark).
    prefixed: Mapping[str, Quote] = field(default_factory=dict)
    number: re.Pattern[str] | None = None  # read whole, so that `1e'x'` is no `e'` string
    dollar_quote: re.Pattern[str] | None = None  # the `$tag$` of a dollar-quoted string
    # Block comments the engine runs as SQL (MySQL's `/*! ... */`): refused, they would hide
    # SQL from the scanner.
    executable_comments: tuple[str, ...] = ()


class Scanner:
    """One pass over `sql` with `dialect`'s rules; what it found is in its attributes."""

    def __init__(self, sql: str, dialect: SqlDialect) -> None:
        self.sql = sql
        self.dialect = dialect
        self.pos = 0
        self.segments: list[str] = []  # the text between placeholders, before the last one
        self.names: list[str] = []  # each placeholder's name, in order
        self.segment_start = 0
        self.first_word: str | None = None
        self.end: int | None = None  # where the first top-level `;` is
        self.statements = 1
        self.comments: list[tuple[int, int]] = []  # (start, end) of each comment
        self.strings: list[tuple[int, int]] = []  # (start, end) of each string literal

    def scan(self) -> None:
        sql, dialect = self.sql, self.dialect
        while self.pos < len(sql):
            start = self.pos
            if blanks := dialect.blanks.match(sql, start):
                self.pos = blanks.end()
            elif comment := _first_match(dialect.line_comments, sql, start):
                self.pos = comment.end()
                self.comments.append((start, self.pos))
            elif sql.startswith("/*", start):
                self.pos = self._block_comment_end()
                self.comments.append((start, self.pos))
            elif sql[start] == ";":
                if self.end is None:
                    self.end = start
                self.pos += 1
            else:
                self._content(sql[start])

    def _content(self, char: str) -> None:
        if self.end is not None:
            # Anything but blanks and comments after a `;` is another statement.
            self.statements += 1
            self.end = None
        if quote := self.dialect.quotes.get(char):
            self._quoted(quote)
        elif char == "$":
            self._dollar()
        elif match := self.dialect.word.match(self.sql, self.pos):
            word = match.group()
            self.first_word = self.first_word or word
            self.pos = match.end()
            if prefixed := self.dialect.prefixed.get(word + self.sql[self.pos : self.pos + 1]):
                self._quoted(prefixed)
        elif self.dialect.number is not None and (
            number := self.dialect.number.match(self.sql, self.pos)
        ):
            self.pos = number.end()
        else:
            self.pos += 1

    def _quoted(self, quote: Quote) -> None:
        match = quote.pattern.match(self.sql, self.pos)
        if match is None:
            raise QueryInvalidError(f"the query has an unterminated {quote.what}")
        if quote.literal:
            self.strings.append((self.pos, match.end()))
        self.pos = match.end()

    def _block_comment_end(self) -> int:
        sql, pos = self.sql, self.pos
        if self.dialect.executable_comments and sql.startswith(
            self.dialect.executable_comments, pos
        ):
            raise QueryInvalidError(
                "executable comments (/*! ... */) are not allowed: write the SQL itself"
            )
        if self.dialect.nested_comments:
            return nested_comment_end(sql, pos)
        close = sql.find("*/", pos + 2)
        if close < 0:
            raise QueryInvalidError("the query has an unterminated /* comment")
        return close + 2

    def _dollar(self) -> None:
        sql, pos = self.sql, self.pos
        tag = self.dialect.dollar_quote.match(sql, pos) if self.dialect.dollar_quote else None
        if tag is not None:
            close = sql.find(tag.group(), tag.end())
            if close < 0:
                raise QueryInvalidError("the query has an unterminated dollar-quoted string")
            self.pos = close + len(tag.group())
            self.strings.append((pos, self.pos))
        elif placeholder := _PLACEHOLDER.match(sql, pos) or _POSITIONAL.match(sql, pos):
            self.segments.append(sql[self.segment_start : placeholder.start()])
            self.names.append(placeholder.group(1))
            self.pos = self.segment_start = placeholder.end()
        else:
            self.pos += 1


def _first_match(patterns: tuple[re.Pattern[str], ...], sql: str, pos: int) -> re.Match[str] | None:
    for pattern in patterns:
        if match := pattern.match(sql, pos):
            return match
    return None


def one_query(sql: str, dialect: SqlDialect) -> Scanner:
    """`sql` scanned, checked to be one query: QueryInvalidError for an empty text, a second
    statement, or a first word not among the dialect's `query_words`."""
    scanner = Scanner(sql, dialect)
    scanner.scan()
    if scanner.statements > 1:
        raise QueryInvalidError(
            f"only a single SELECT statement is allowed; got {scanner.statements} statements"
        )
    if scanner.first_word is None:
        raise QueryInvalidError("the query is empty")
    if scanner.first_word.lower() not in dialect.query_words:
        raise QueryInvalidError(
            f"only a single SELECT statement is allowed; got {scanner.first_word.upper()}"
        )
    return scanner


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


def blanked(sql: str, spans: list[tuple[int, int]]) -> str:
    """`sql` with each of `spans` (sorted, apart) turned into as many spaces: offsets stay."""
    pieces, at = [], 0
    for start, end in spans:
        pieces += [sql[at:start], " " * (end - start)]
        at = end
    return "".join([*pieces, sql[at:]])
