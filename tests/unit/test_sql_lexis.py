"""The same tricky texts read by the three SQL lexers (PostgreSQL, MySQL, Spark): where each
dialect sees a string, a name, a comment, a placeholder or a second statement."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from qexport.domain.failures import QueryInvalidError
from qexport.sources.mysql.statements import mysql_without_comments, parse_mysql_query
from qexport.sources.postgres.statements import code_only, parse_query, without_comments
from qexport.sources.spark.statements import parse_spark_query

TWO = "got 2 statements"
STRING = "unterminated string literal"
COMMENT = "unterminated /* comment"


def _postgres(sql: str) -> tuple[str, ...]:
    return parse_query(sql).names


def _mysql(sql: str) -> tuple[str, ...]:
    return parse_mysql_query(sql).names


def _spark(sql: str) -> tuple[str, ...]:
    return tuple(sorted(parse_spark_query(sql).names))


DIALECTS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "postgres": _postgres,
    "mysql": _mysql,
    "spark": _spark,
}

# Each text, and what each dialect finds in it: the placeholders' names (a tuple) or the
# words of its refusal (a str).
CASES: list[tuple[str, tuple[str, ...] | str, tuple[str, ...] | str, tuple[str, ...] | str]] = [
    # (text, PostgreSQL, MySQL, Spark)
    # Comment starts inside strings, quotes inside comments.
    ("SELECT '--' || $a", ("a",), ("a",), ("a",)),
    ("SELECT 'a' /* ' */, $b", ("b",), ("b",), ("b",)),
    ("SELECT 1 -- ' $a\n, $b", ("b",), ("b",), ("b",)),
    ("SELECT 1 --x $a\n", (), ("a",), ()),  # MySQL's `--` needs a blank after it
    ("SELECT 1 # $a\n, $b", ("a", "b"), ("b",), ("a", "b")),
    ("SELECT 1 -- c\r; DROP t", TWO, (), TWO),  # `\r` ends the comment but in MySQL
    ("-- nothing", "empty", "empty", "empty"),
    # Escaped quotes: doubled, backslashed, in an E'' string, in a raw string.
    ("SELECT 'it''s $a', $b", ("b",), ("b",), ("b",)),
    ("SELECT 'a\\' , $b -- '", ("b",), (), ()),
    ("SELECT E'a\\' , $b', $c", ("c",), ("c",), ("c",)),
    ("SELECT r'a\\', $b", ("b",), STRING, ("b",)),
    ("SELECT 1r'a\\', $b", ("b",), STRING, ("b",)),
    ("SELECT 'open", STRING, STRING, STRING),
    # Double quotes (a name or a string) and backticks.
    ('SELECT "a$b", $c', ("c",), ("c",), ("c",)),
    ('SELECT "a\\" , $b"', "unterminated quoted identifier", (), ()),
    ("SELECT `it's`, $c", STRING, ("c",), ("c",)),
    # Block comments: nested, or not.
    ("SELECT /* a /* b */ $x */ $y", ("y",), ("x", "y"), ("y",)),
    ("SELECT 1 /* a /* b */", COMMENT, (), COMMENT),
    ("SELECT /*! 1 */ 2", (), "executable comments", ()),
    # Dollar quotes.
    ("SELECT $$ ; $a $$, $b", ("b",), TWO, TWO),
    ("SELECT $tag$ it's $tag$, $b", ("b",), STRING, STRING),
    ("SELECT $a$ b $a$, $c", ("c",), ("a", "a", "c"), ("a", "c")),
    ("SELECT $a$", "unterminated dollar-quoted string", ("a",), ("a",)),
    ("SELECT $€$ x $€$", (), (), ()),
    # Semicolons: in strings, trailing, before another statement.
    ("SELECT ';' ;", (), (), ()),
    ("SELECT $a; ", ("a",), ("a",), ("a",)),
    ("SELECT 1; -- done", (), (), ()),
    ("SELECT 'a;b'; SELECT 2", TWO, TWO, TWO),
    ("SELECT 1 -- x\n; SELECT 2", TWO, TWO, TWO),
    # Words, numbers, blanks and first words.
    ("SELECT a$b", (), (), ("b",)),
    ("SELECT 1x$a", ("a",), ("a",), ("a",)),
    ("SELECT $1", ("1",), ("1",), ("1",)),
    ("SELECT\u00a0$a", "got SELECT\u00a0$A", "got SELECT\u00a0$A", ("a",)),
    ("FROM t SELECT 1", "got FROM", "got FROM", ()),
]


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"),
    [
        pytest.param(dialect, sql, expected, id=f"{dialect}-{index}")
        for index, (sql, *found) in enumerate(CASES)
        for dialect, expected in zip(DIALECTS, found, strict=True)
    ],
)
def test_each_dialect_reads_tricky_text_its_own_way(
    dialect: str, sql: str, expected: tuple[str, ...] | str
) -> None:
    """Strings, names, comments, dollar quotes and semicolons are told apart as the engine
    itself would: the placeholders found, or the refusal, are the dialect's own."""
    read = DIALECTS[dialect]
    if isinstance(expected, str):
        with pytest.raises(QueryInvalidError, match=re.escape(expected)):
            read(sql)
    else:
        assert read(sql) == expected


@pytest.mark.parametrize(
    ("sql", "postgres", "mysql", "code"),
    [
        (
            "SELECT 1 -- c\r, 2 # x\n /* a /* b */ c */ 3",
            "SELECT 1     \r, 2 # x\n                   3",
            "SELECT 1             \n              c */ 3",
            "SELECT 1     \r, 2 # x\n                   3",
        ),
        (
            "SELECT '/* x */' /* y */ --z",
            "SELECT '/* x */'            ",
            "SELECT '/* x */'         --z",
            "SELECT                      ",
        ),
    ],
)
def test_comments_are_blanked_where_each_dialect_sees_them(
    sql: str, postgres: str, mysql: str, code: str
) -> None:
    """Blanking keeps every offset; only what the dialect reads as a comment (and, for
    `code_only`, as a string) becomes spaces."""
    assert without_comments(sql) == postgres
    assert mysql_without_comments(sql) == mysql
    assert code_only(sql) == code
