"""The MySQL source's pure rules: which statements it accepts (read with MySQL's lexis), how
values are written in, and which grants make a login privileged."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.domain.failures import QueryInvalidError
from qexport.sources.mysql import from_url
from qexport.sources.mysql_role import findings_of
from qexport.sources.mysql_statements import parse_mysql_query, render
from qexport.sources.mysql_types import Column, _microseconds

ALICE = Requester("u-alice", "w1")


def _quoted(value: Any) -> str:
    return "NULL" if value is None else f"'{value}'" if isinstance(value, str) else str(value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 'a\\'; DELETE FROM t' AS x",
        'SELECT "a\\"; DELETE FROM t" AS x',
        "SELECT 1 AS `a;b` # ; DELETE FROM t",
        "SELECT 1 -- ; DELETE FROM t",
        "SELECT 1 /* ; DELETE FROM t */",
        "WITH x AS (SELECT 1) SELECT * FROM x;",
        "VALUES (1), (2)",
        "TABLE people",
    ],
)
def test_one_query_in_mysqls_lexis_is_accepted(sql: str) -> None:
    """Quotes with backslash escapes, backtick names and MySQL's comments hide no statement."""
    assert parse_mysql_query(sql).names == ()


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("SELECT 1; DELETE FROM t", "2 statements"),
        ("SELECT 1--1; DELETE FROM t", "2 statements"),  # `--1` is no comment in MySQL
        ("DELETE FROM t", "got DELETE"),
        ("SHOW GRANTS", "got SHOW"),
        ("SELECT 1 /*! , SLEEP(1) */", "executable comments"),
        ("SELECT 1 /*M!100000 , 2 */", "executable comments"),
        ("SELECT 'open", "unterminated string"),
        ("# only a comment", "empty"),
    ],
)
def test_anything_else_is_refused(sql: str, refusal: str) -> None:
    with pytest.raises(QueryInvalidError, match=refusal):
        parse_mysql_query(sql)


def test_values_are_written_as_the_driver_quotes_them() -> None:
    """Each $name becomes its literal, the requester's too; a negative number is
    parenthesised so that `-$n` cannot read as `--`; $1 is refused."""
    text = render("SELECT $a, 10 -$n, '$not_me', $user_id", {"a": "x", "n": -5}, ALICE, _quoted)
    assert text == "SELECT 'x', 10 -(-5), '$not_me', 'u-alice'"
    with pytest.raises(QueryInvalidError, match="positional"):
        render("SELECT $1", {}, ALICE, _quoted)


def test_a_reading_login_has_no_finding() -> None:
    grants = [
        "GRANT USAGE ON *.* TO `reader`@`%` IDENTIFIED BY PASSWORD '*AB'",
        "GRANT SELECT, SHOW VIEW ON `shop`.* TO `reader`@`%`",
        "GRANT SELECT (id, name) ON `shop`.`people` TO `reader`@`%`",
        "GRANT EXECUTE ON FUNCTION `shop`.`tax` TO `reader`@`%`",
    ]
    assert findings_of(grants) == ([], [])


def test_privileges_beyond_reading_are_named() -> None:
    """FILE, ALL, SELECT on every database or on `mysql`, GRANT OPTION; roles to judge next."""
    found, roles = findings_of(
        [
            "GRANT FILE, PROCESS ON *.* TO `r`@`%`",
            "GRANT SELECT ON *.* TO `r`@`%`",
            "GRANT SELECT ON `mysql`.* TO `r`@`%`",
            "GRANT ALL PRIVILEGES ON `shop`.* TO `r`@`%` WITH GRANT OPTION",
            "GRANT `analyst`, `ops` TO `r`@`%`",
        ]
    )
    assert found == [
        "has FILE, PROCESS on *.*",
        "may read every database (SELECT on *.*)",
        "may read the mysql system schema (SELECT on `mysql`.*)",
        "has ALL PRIVILEGES on `shop`.*",
        "may grant its privileges on to others (WITH GRANT OPTION on `shop`.*)",
    ]
    assert roles == ["analyst", "ops"]


def test_decimal_precision_comes_from_the_display_width() -> None:
    """DECIMAL(12,2) is 14 wide signed, 13 unsigned; DECIMAL(5,0) is 6 wide signed."""
    signed = Column("p", 246, 14, 2, 0, binary=False)
    unsigned = Column("p", 246, 13, 2, 32, binary=False)
    whole = Column("p", 246, 6, 0, 0, binary=False)
    assert (signed.decimal_digits, unsigned.decimal_digits, whole.decimal_digits) == (12, 12, 5)
    assert signed.type_name == "DECIMAL(12,2)"


def test_time_values_become_microseconds() -> None:
    assert _microseconds(b"-838:59:59.5") == -((838 * 3600 + 59 * 60 + 59) * 1_000_000 + 500_000)
    assert _microseconds(b"00:00:01") == 1_000_000
    with pytest.raises(ValueError, match="TIME"):
        _microseconds(b"soon")


def test_without_mysqlclient_the_source_names_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `mysql` extra not installed: a ValueError saying what to install, not the URL."""
    monkeypatch.setitem(sys.modules, "MySQLdb", None)  # what `import MySQLdb` then raises
    with pytest.raises(ValueError, match=r"pip install 'qexport\[mysql\]'") as caught:
        from_url("m", "mysql://reader:s3cret@db/shop", Settings())
    assert "s3cret" not in str(caught.value)
