"""What a Spark Connect source accepts: one query, read with Spark SQL's own lexical rules, its
`$name` placeholders turned into Spark's named parameter markers `:name`.

Spark's lexer differs from PostgreSQL's, so the scanner every SQL source shares (sql_scan.py)
reads the query here with Spark's lexis (`SPARK`): `'...'` and `"..."` are strings with
backslash escapes (`r'...'` without), `` `...` `` a quoted identifier (a doubled backtick
inside), `--` and nested `/* */` comments.
A `$name` outside those is a placeholder; `$user_id` and `$workspace_id` are the requester's
(bound by duckdb_statements.bound_values, as on every source).

The scan finds a second statement and refuses a first word other than SELECT, WITH, VALUES,
TABLE or FROM, but it is not what makes the source read-only: Spark runs a command given to
`spark.sql` at once (an INSERT, a CREATE, a SET, even `WITH x AS (...) INSERT ...`), and has
no read-only session to refuse it. The guarantee is that the server only ever sees the query
inside a subquery, `SELECT * FROM (\\n<query>\\n) AS qexport_result`, where its grammar takes
nothing but a query: a command there is a syntax error, never run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qexport.sources.sql_scan import Quote, SqlDialect, one_query

# Spark SQL's lexis (SqlBaseLexer.g4).
SPARK = SqlDialect(
    blanks=re.compile(r"\s+"),
    line_comments=(re.compile(r"--[^\n\r]*"),),
    nested_comments=True,
    # Spark's strings take a backslash escape; a raw string (r'...') takes none.
    quotes={
        "'": Quote(re.compile(r"'(?:[^'\\]|\\.)*'", re.DOTALL)),
        '"': Quote(re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)),
        "`": Quote(re.compile(r"`(?:[^`]|``)*`"), "`quoted` identifier", literal=False),
    },
    word=re.compile(r"[^\W\d]\w*"),
    query_words=frozenset({"select", "with", "values", "table", "from"}),
    prefixed={
        **dict.fromkeys(("r'", "R'"), Quote(re.compile(r"'[^']*'"))),
        **dict.fromkeys(('r"', 'R"'), Quote(re.compile(r'"[^"]*"'))),
    },
)

# The line the query starts on in what the server parses, and the text before it.
WRAPPED_PREFIX = "SELECT * FROM (\n"
WRAPPED_SUFFIX = "\n) AS qexport_result"


@dataclass(frozen=True)
class SparkQuery:
    """One checked query: its text with `:name` markers, and the names it uses."""

    text: str
    names: frozenset[str]

    def wrapped(self) -> str:
        """The query as a subquery: only a query parses there (see the module's docstring)."""
        return f"{WRAPPED_PREFIX}{self.text}{WRAPPED_SUFFIX}"


def parse_spark_query(sql: str) -> SparkQuery:
    """Check that `sql` is one query and turn its `$name` placeholders into `:name` markers.

    QueryInvalidError for an empty text, a second statement or a first word that starts no
    query. Positional placeholders (`$1`) come back as names of digits, for bound_values to
    refuse with the message every source gives.
    """
    scanner = one_query(sql, SPARK)
    # A trailing `;` (and comments after it) is dropped: the query becomes a subquery.
    end = len(sql) if scanner.end is None else scanner.end
    # `$name` and `:name` are as long: offsets in the text sent are those of the query.
    marked = zip(scanner.segments, scanner.names, strict=True)
    pieces = [f"{segment}:{name}" for segment, name in marked]
    text = "".join([*pieces, sql[scanner.segment_start : end]])
    return SparkQuery(text, frozenset(scanner.names))
