"""What a MySQL/MariaDB source accepts: one query (SELECT, WITH, VALUES or TABLE) with `$name`
parameters, read with MySQL's lexical rules, and how values enter it.

The scanner is every SQL source's (sql_scan.py: placeholders, the second statement after a
`;`, the first word), here with MySQL's lexis (`MYSQL`): `'...'` and `"..."` strings with
backslash escapes, `` `...` `` names, `#` and `-- ` comments, block comments that do not nest,
no dollar quotes.
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

from qexport.sources.duckdb.statements import bound_values
from qexport.sources.postgres.statements import (
    POSTGRES,
    ParsedQuery,
    parse_query,
    without_comments,
)
from qexport.sources.sql_scan import SQL_NUMBER, SQL_WORD, Quote, SqlDialect

if TYPE_CHECKING:
    from qexport.domain.exports import Requester

# Its names and numbers are read as PostgreSQL's are; `E'...'` is a string like any other.
MYSQL = SqlDialect(
    blanks=re.compile(r"[ \t\n\r\f\v]+"),
    line_comments=(
        re.compile(r"#[^\n]*"),
        # MySQL's `--` starts a comment only when a blank or control character follows it.
        re.compile(r"--(?:[\x00-\x20][^\n]*|$)"),
    ),
    nested_comments=False,
    executable_comments=("/*!", "/*M!"),
    quotes={
        "'": Quote(re.compile(r"'(?:[^'\\]|\\.|'')*'", re.DOTALL)),
        '"': Quote(re.compile(r'"(?:[^"\\]|\\.|"")*"', re.DOTALL)),
        "`": Quote(re.compile(r"`(?:[^`]|``)*`"), "`quoted name`", literal=False),
    },
    word=SQL_WORD,
    query_words=POSTGRES.query_words,
    number=SQL_NUMBER,
)


def parse_mysql_query(sql: str) -> ParsedQuery:
    """Check that `sql` is one query and find its `$name` placeholders, with MySQL's lexis;
    QueryInvalidError otherwise (the same refusals as on PostgreSQL)."""
    return parse_query(sql, dialect=MYSQL)


def mysql_without_comments(sql: str) -> str:
    """`sql` with its comments blanked out, read with MySQL's lexis (postgres_statements'
    `without_comments`)."""
    return without_comments(sql, dialect=MYSQL)


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
