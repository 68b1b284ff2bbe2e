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

from qexport.sources.sql_scan import (
    NAME_CONTINUE,
    NAME_START,
    SQL_NUMBER,
    SQL_WORD,
    Quote,
    Scanner,
    SqlDialect,
    blanked,
    one_query,
)

# PostgreSQL's lexis (scan.l).
POSTGRES = SqlDialect(
    # PostgreSQL's blanks only: another Unicode space (a no-break space) is an identifier's
    # character to it, so `\u00a0$b$` is an identifier there, not a blank before a `$b$` quote.
    blanks=re.compile(r"[ \t\n\r\f\v]+"),
    # PostgreSQL ends a `--` comment at a carriage return as well as at a line feed: what
    # follows a lone `\r` is SQL (a second statement could hide there from a scanner that
    # read on).
    line_comments=(re.compile(r"--[^\n\r]*"),),
    nested_comments=True,
    quotes={
        "'": Quote(re.compile(r"'(?:[^']|'')*'")),
        '"': Quote(re.compile(r'"(?:[^"]|"")*"'), "quoted identifier", literal=False),
    },
    word=SQL_WORD,
    query_words=frozenset({"select", "with", "values", "table"}),
    prefixed=dict.fromkeys(("E'", "e'"), Quote(re.compile(r"'(?:[^'\\]|\\.|'')*'", re.DOTALL))),
    number=SQL_NUMBER,
    dollar_quote=re.compile(rf"\$(?:{NAME_START}{NAME_CONTINUE}*)?\$"),
)


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


def parse_query(sql: str, *, dialect: SqlDialect = POSTGRES) -> ParsedQuery:
    """Check that `sql` is one query (SELECT, WITH, VALUES or TABLE); find its placeholders.

    Raises QueryInvalidError for an empty text, a second statement or any other statement.
    Positional placeholders (`$1`) are reported as names made of digits, for the caller to
    refuse with the same message as on DuckDB. `dialect`: another engine's lexis (MySQL's).
    """
    scanner = one_query(sql, dialect)
    # Trailing semicolons (and comments after them) are dropped: the query becomes a subquery.
    end = len(sql) if scanner.end is None else scanner.end
    tail = sql[scanner.segment_start : end]
    return ParsedQuery((*scanner.segments, tail), tuple(scanner.names))


def without_comments(sql: str, *, dialect: SqlDialect = POSTGRES) -> str:
    """`sql` with each comment blanked out (the same length, so offsets stay), read with
    PostgreSQL's lexis or `dialect`'s; QueryInvalidError where `parse_query` would raise."""
    scanner = Scanner(sql, dialect)
    scanner.scan()
    return blanked(sql, scanner.comments)


def code_only(sql: str) -> str:
    """`sql` with its comments and string literals (dollar-quoted ones included) blanked out,
    read with PostgreSQL's lexis: what is left are names, keywords, numbers, operators."""
    scanner = Scanner(sql, POSTGRES)
    scanner.scan()
    return blanked(sql, sorted(scanner.comments + scanner.strings))
