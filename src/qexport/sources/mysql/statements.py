"""What a MySQL/MariaDB source accepts: one query (SELECT, WITH, VALUES or TABLE) with `$name`
parameters, read with MySQL's lexical rules, and how values enter it.

The scanner is PostgreSQL's (sql_scan.py: placeholders, the second statement after
a `;`, the first word) with MySQL's lexis: `'...'` and `"..."` strings with backslash escapes,
`` `...` `` names, `#` and `-- ` comments, block comments that do not nest, no dollar quotes.
An executable comment (`/*! ... */`, `/*M! ... */`), whose text MySQL runs as SQL, is refused:
it would hide SQL from this check. Behind the check, the connection runs one statement per
call (no CLIENT_MULTI_STATEMENTS): a second statement the scanner missed is a syntax error.

Values are written into the text by mysqlclient's own binding (`Connection.literal`, what
`cursor.execute(sql, args)` does with `%s`): each value quoted by its Python type with the
connection's escaping (mysql_real_escape_string, which follows the server's
NO_BACKSLASH_ESCAPES), so a value is always data, never SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from qexport.domain.failures import QueryInvalidError
from qexport.sources.duckdb.statements import bound_values
from qexport.sources.postgres.statements import ParsedQuery, parse_query, without_comments
from qexport.sources.sql_scan import Scanner

if TYPE_CHECKING:
    from qexport.domain.exports import Requester

_MYSQL_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'", re.DOTALL)
_MYSQL_DOUBLE = re.compile(r'"(?:[^"\\]|\\.|"")*"', re.DOTALL)
_BACKTICK = re.compile(r"`(?:[^`]|``)*`")
_HASH_COMMENT = re.compile(r"#[^\n]*")
# MySQL's `--` starts a comment only when a blank or control character follows it.
_DASH_COMMENT = re.compile(r"--(?:[\x00-\x20][^\n]*|$)")
_BLANKS = " \t\n\r\f\v"
_SPACE = re.compile(f"[{_BLANKS}]+")


class _MySQLScanner(Scanner):
    def scan(self) -> None:
        sql = self.sql
        while self.pos < len(sql):
            char = sql[self.pos]
            if char in _BLANKS:
                self._skip(_SPACE)
            elif char == "#":
                self._comment(self._skip, _HASH_COMMENT)
            elif sql.startswith("--", self.pos) and _DASH_COMMENT.match(sql, self.pos):
                self._comment(self._skip, _DASH_COMMENT)
            elif sql.startswith("/*", self.pos):
                self._comment(self._block_comment)
            elif char == ";":
                self._semicolon()
            else:
                self._content(char)

    def _content(self, char: str) -> None:
        if char == "'":
            self._mark_content()
            self._string(_MYSQL_STRING)
        elif char == '"':
            self._mark_content()
            self._string(_MYSQL_DOUBLE)
        elif char == "`":
            self._mark_content()
            self._skip(_BACKTICK, "an unterminated `quoted name`")
        else:
            super()._content(char)

    def _mark_content(self) -> None:
        if self.end is not None:
            self.statements += 1
            self.end = None

    def _block_comment(self) -> None:
        if self.sql.startswith(("/*!", "/*M!"), self.pos):
            raise QueryInvalidError(
                "executable comments (/*! ... */) are not allowed: write the SQL itself"
            )
        close = self.sql.find("*/", self.pos + 2)
        if close < 0:
            raise QueryInvalidError("the query has an unterminated /* comment")
        self.pos = close + 2

    def _dollar(self) -> None:
        placeholder = re.compile(r"\$([^\W\d]\w*)|\$(\d+)").match(self.sql, self.pos)
        if placeholder is None:
            self.pos += 1
            return
        self.segments.append(self.sql[self.segment_start : placeholder.start()])
        self.names.append(placeholder.group(1) or placeholder.group(2))
        self.pos = self.segment_start = placeholder.end()


def parse_mysql_query(sql: str) -> ParsedQuery:
    """Check that `sql` is one query and find its `$name` placeholders, with MySQL's lexis;
    QueryInvalidError otherwise (the same refusals as on PostgreSQL)."""
    return parse_query(sql, lexer=_MySQLScanner)


def mysql_without_comments(sql: str) -> str:
    """`sql` with its comments blanked out, read with MySQL's lexis (postgres_statements'
    `without_comments`)."""
    return without_comments(sql, lexer=_MySQLScanner)


def render(
    sql: str,
    parameters: Mapping[str, Any],
    requester: Requester,
    literal: Callable[[Any], str],
) -> str:
    """The checked query with each `$name` replaced by its value as the driver quotes it."""
    parsed = parse_mysql_query(sql)
    values = bound_values(set(parsed.names), parameters, requester)
    pieces = [parsed.segments[0]]
    for name, segment in zip(parsed.names, parsed.segments[1:], strict=True):
        text = literal(values[name])
        # `10 -$n` with n = -5 must not read `10 --5`; MySQL takes no parentheses in LIMIT.
        pieces += [f"({text})" if text.startswith("-") else text, segment]
    return "".join(pieces)
