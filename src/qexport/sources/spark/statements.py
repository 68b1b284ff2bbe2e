"""What a Spark Connect source accepts: one query, read with Spark SQL's own lexical rules, its
`$name` placeholders turned into Spark's named parameter markers `:name`.

Spark's lexer differs from PostgreSQL's (postgres/statements.py), so the query is scanned here
as Spark reads it: `'...'` and `"..."` are strings with backslash escapes (`r'...'` without),
`` `...` `` a quoted identifier (a doubled backtick inside), `--` and nested `/* */` comments.
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

from qexport.domain.failures import QueryInvalidError
from qexport.sources.sql_scan import nested_comment_end

_QUERY_KEYWORDS = frozenset({"select", "with", "values", "table", "from"})
_SPACE = re.compile(r"\s+")
_LINE_COMMENT = re.compile(r"--[^\n\r]*")
# Spark's strings take a backslash escape; a raw string (r'...') takes none.
_STRINGS = {
    "'": re.compile(r"'(?:[^'\\]|\\.)*'", re.DOTALL),
    '"': re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL),
}
_RAW_STRINGS = {"'": re.compile(r"'[^']*'"), '"': re.compile(r'"[^"]*"')}
_BACKTICKED = re.compile(r"`(?:[^`]|``)*`")
_WORD = re.compile(r"[^\W\d]\w*")
_PLACEHOLDER = re.compile(r"\$([^\W\d]\w*)")
_POSITIONAL = re.compile(r"\$(\d+)")

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


class _Scanner:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.pos = 0
        self.pieces: list[str] = []
        self.piece_start = 0
        self.names: set[str] = set()
        self.first_word: str | None = None
        self.end: int | None = None  # where the first top-level `;` is
        self.statements = 1

    def scan(self) -> None:
        sql = self.sql
        while self.pos < len(sql):
            char = sql[self.pos]
            if char.isspace():
                self._skip(_SPACE)
            elif sql.startswith("--", self.pos):
                self._skip(_LINE_COMMENT)
            elif sql.startswith("/*", self.pos):
                self._block_comment()
            elif char == ";":
                if self.end is None:
                    self.end = self.pos
                self.pos += 1
            else:
                self._content(char)

    def _content(self, char: str) -> None:
        if self.end is not None:
            self.statements += 1  # anything but blanks and comments after a `;`
            self.end = None
        if char in _STRINGS:
            self._skip(_STRINGS[char], "an unterminated string literal")
        elif char == "`":
            self._skip(_BACKTICKED, "an unterminated `quoted` identifier")
        elif char == "$":
            self._dollar()
        elif match := _WORD.match(self.sql, self.pos):
            word = match.group()
            self.first_word = self.first_word or word
            self.pos = match.end()
            quote = self.sql[self.pos : self.pos + 1]
            if word in ("r", "R") and quote in _RAW_STRINGS:
                self._skip(_RAW_STRINGS[quote], "an unterminated string literal")
        else:
            self.pos += 1

    def _skip(self, pattern: re.Pattern[str], unterminated: str = "") -> None:
        match = pattern.match(self.sql, self.pos)
        if match is None:
            raise QueryInvalidError(f"the query has {unterminated}")
        self.pos = match.end()

    def _block_comment(self) -> None:
        self.pos = nested_comment_end(self.sql, self.pos)

    def _dollar(self) -> None:
        match = _PLACEHOLDER.match(self.sql, self.pos) or _POSITIONAL.match(self.sql, self.pos)
        if match is None:
            self.pos += 1
            return
        # `$name` and `:name` are as long: offsets in the text sent are those of the query.
        self.pieces += [self.sql[self.piece_start : match.start()], f":{match.group(1)}"]
        self.names.add(match.group(1))
        self.pos = self.piece_start = match.end()


def parse_spark_query(sql: str) -> SparkQuery:
    """Check that `sql` is one query and turn its `$name` placeholders into `:name` markers.

    QueryInvalidError for an empty text, a second statement or a first word that starts no
    query. Positional placeholders (`$1`) come back as names of digits, for bound_values to
    refuse with the message every source gives.
    """
    scanner = _Scanner(sql)
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
    # A trailing `;` (and comments after it) is dropped: the query becomes a subquery.
    end = len(sql) if scanner.end is None else scanner.end
    text = "".join([*scanner.pieces, sql[scanner.piece_start : end]])
    return SparkQuery(text, frozenset(scanner.names))
