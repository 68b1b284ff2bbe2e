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
from qexport.sources.mysql.role import findings_of, role_findings
from qexport.sources.mysql.statements import parse_mysql_query, render
from qexport.sources.mysql.types import Column, _microseconds

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
        "GRANT `analyst` TO `reader`@`%`",
    ]
    assert findings_of(grants) == []


def test_privileges_beyond_reading_are_named() -> None:
    """FILE, ALL, SELECT on every database or on `mysql`, GRANT OPTION, PROXY (another
    account to become), ADMIN OPTION (a role to hand on)."""
    found = findings_of(
        [
            "GRANT FILE, PROCESS ON *.* TO `r`@`%`",
            "GRANT SELECT ON *.* TO `r`@`%`",
            "GRANT SELECT ON `mysql`.* TO `r`@`%`",
            "GRANT ALL PRIVILEGES ON `shop`.* TO `r`@`%` WITH GRANT OPTION",
            "GRANT PROXY ON `admin`@`%` TO `r`@`%`",
            "GRANT `analyst`, `ops` TO `r`@`%` WITH ADMIN OPTION",
        ]
    )
    assert found == [
        "has FILE, PROCESS on *.*",
        "may read every database (SELECT on *.*)",
        "may read the mysql system schema (SELECT on `mysql`.*)",
        "has ALL PRIVILEGES on `shop`.*",
        "may grant its privileges on to others (WITH GRANT OPTION on `shop`.*)",
        "can become the account `admin`@`%` (PROXY: REVOKE PROXY ON `admin`@`%` FROM `r`@`%`)",
        "may grant the role analyst on to others"
        " (WITH ADMIN OPTION: REVOKE ADMIN OPTION FOR `analyst` FROM `r`@`%`)",
        "may grant the role ops on to others"
        " (WITH ADMIN OPTION: REVOKE ADMIN OPTION FOR `ops` FROM `r`@`%`)",
    ]


_MYSQL_SCHEMA = "may read the mysql system schema"
_STATEMENTS = "may read every session's statements"
DATABASE_TARGETS = [
    ("`my%`.*", [f"{_MYSQL_SCHEMA} (SELECT on `my%`.*, a pattern that matches mysql)"]),
    ("`%`.*", ["may read every database (SELECT on `%`.*, a pattern that matches any name)"]),
    (
        "`_%`.*",
        [
            f"{_MYSQL_SCHEMA} (SELECT on `_%`.*, a pattern that matches mysql)",
            f"{_STATEMENTS} (SELECT on `_%`.*, a pattern that matches performance_schema)",
        ],
    ),
    ("`MySQL`.*", [f"{_MYSQL_SCHEMA} (SELECT on `MySQL`.*)"]),
    ("`performance_schema`.*", [f"{_STATEMENTS} (SELECT on `performance_schema`.*)"]),
    ("`mysql`.`user`", [f"{_MYSQL_SCHEMA} (SELECT on `mysql`.`user`)"]),
    ("strange", ["has SELECT on a target qexport cannot read (strange)"]),
    ("`my\\_db`.*", []),
    ("`my_db`.*", []),
    ("`my%`.`user`", []),
    ("`sh%p`.*", []),
]


@pytest.mark.parametrize(
    ("target", "found"), DATABASE_TARGETS, ids=[t for t, _ in DATABASE_TARGETS]
)
def test_a_database_level_grant_is_read_as_a_like_pattern(target: str, found: list[str]) -> None:
    """`db`.* names databases with LIKE's `%` and `_` (`\\_` an underscore): one that can
    match a system schema, in any case, or every database, is found; a table's database is
    its literal name; a target that cannot be read is a finding rather than a pass."""
    assert findings_of([f"GRANT SELECT ON {target} TO `r`@`%`"]) == found


class _Scripted:
    """A MySQLdb connection that answers each statement from a script (a statement sent
    again gets its next answer, if it has one), recording what was sent."""

    def __init__(self, server: str, answers: dict[str, list[list[str]]]) -> None:
        self.server, self.answers, self.sent = server, answers, list[str]()
        self._rows: tuple[tuple[bytes], ...] = ()

    def get_server_info(self) -> str:
        return self.server

    def query(self, statement: str) -> None:
        self.sent.append(statement)
        queued = self.answers.get(statement, [[]])
        lines = queued.pop(0) if len(queued) > 1 else queued[0]
        self._rows = tuple((line.encode(),) for line in lines)

    def store_result(self) -> _Scripted:
        return self

    def fetch_row(self, count: int) -> tuple[tuple[bytes], ...]:
        del count
        return self._rows


def test_mysql_shows_a_roles_grants_with_using_and_no_role_is_enabled() -> None:
    """On MySQL (not MariaDB), each granted role's privileges come from SHOW GRANTS ...
    USING, whose merged lines are put down to that role; nothing is SET."""
    conn = _Scripted(
        "8.0.36",
        {
            "SELECT CURRENT_USER() LIMIT 1": [["reader@%"]],
            "SHOW GRANTS": [
                [
                    "GRANT USAGE ON *.* TO `reader`@`%`",
                    "GRANT SELECT ON `shop`.* TO `reader`@`%`",
                    "GRANT `analyst`@`%`,`filer`@`%` TO `reader`@`%`",
                ]
            ],
            "SHOW GRANTS FOR CURRENT_USER() USING `analyst`@`%`": [
                [
                    "GRANT USAGE ON *.* TO `reader`@`%`",
                    "GRANT SELECT, SHOW VIEW ON `shop`.* TO `reader`@`%`",
                    "GRANT `analyst`@`%`,`filer`@`%` TO `reader`@`%`",
                ]
            ],
            "SHOW GRANTS FOR CURRENT_USER() USING `filer`@`%`": [
                [
                    "GRANT FILE ON *.* TO `reader`@`%`",
                    "GRANT SELECT ON `shop`.* TO `reader`@`%`",
                    "GRANT `analyst`@`%`,`filer`@`%` TO `reader`@`%`",
                ]
            ],
        },
    )
    assert role_findings(conn) == [
        "has FILE on *.*, through the role filer"
        " (reader -> filer: REVOKE `filer`@`%` FROM `reader`@`%`)"
    ]
    assert not any(s.startswith("SET ROLE") for s in conn.sent)


def test_mariadb_enables_each_role_once_and_sets_the_sessions_back() -> None:
    """On MariaDB, a granted role not shown yet is enabled for one SHOW GRANTS (which also
    shows the roles under it), then the session's own role is set back."""
    own = ["GRANT `mid` TO `reader`@`%`", "GRANT USAGE ON *.* TO `reader`@`%`"]
    under_mid = [
        *own,
        "GRANT `filer` TO `mid`",
        "GRANT USAGE ON *.* TO `mid`",
        "GRANT FILE ON *.* TO `filer`",
    ]
    conn = _Scripted(
        "10.11.19-MariaDB",
        {
            "SELECT CURRENT_USER() LIMIT 1": [["reader@%"]],
            "SHOW GRANTS": [own, under_mid],
            "SELECT CURRENT_ROLE() LIMIT 1": [["ok`s"]],
        },
    )
    assert role_findings(conn) == [
        "has FILE on *.*, through the role filer"
        " (reader -> mid -> filer: REVOKE `filer` FROM `mid`)"
    ]
    assert conn.sent[-4:] == [
        "SELECT CURRENT_ROLE() LIMIT 1",
        "SET ROLE `mid`",
        "SHOW GRANTS",
        "SET ROLE `ok``s`",
    ]


def test_too_many_roles_refuse_rather_than_judge_part() -> None:
    """Past 20 granted roles, the login is refused saying so, before any is enabled."""
    roles = ",".join(f"`r{i}`" for i in range(21))
    conn = _Scripted(
        "10.11.19-MariaDB",
        {
            "SELECT CURRENT_USER() LIMIT 1": [["reader@%"]],
            "SHOW GRANTS": [[f"GRANT {roles} TO `reader`@`%`"]],
        },
    )
    assert role_findings(conn) == [
        "is granted 21 roles, more than the 20 qexport judges (grant it fewer)"
    ]
    assert not any(s.startswith("SET ROLE") for s in conn.sent)


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
