"""The statement check that refuses reading other sessions' SQL (sources/other_sessions.py),
on the text alone: what counts as naming pg_stat_activity or MySQL's PROCESSLIST, and what
does not (a comment, another database's table of the same name)."""

from __future__ import annotations

import re

import pytest

from qexport.domain.failures import QueryInvalidError, TextPosition
from qexport.sources.other_sessions import (
    refuse_mysql_plan,
    refuse_mysql_readers,
    refuse_postgres_plan,
    refuse_postgres_readers,
)


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ("SELECT query FROM pg_stat_activity", "pg_stat_activity"),
        ("select s.query from PG_CATALOG.PG_STAT_ACTIVITY s", "pg_stat_activity"),
        ('SELECT query FROM "pg_stat_activity"', "pg_stat_activity"),
        ("SELECT * FROM pg_stat_get_activity(NULL)", "pg_stat_get_activity"),
        ("SELECT pg_stat_get_backend_activity(b) FROM generate_series(1, 9) b", None),
        ("SELECT query FROM pg_stat_statements", "pg_stat_statements"),
        # in a string: functions that run SQL given as text take it so
        ("SELECT query_to_xml('select query from pg_stat_activity', true, false, '')", None),
        ("SELECT query_to_xml($q$select * from pg_stat_activity$q$, true, false, '')", None),
        ("SELECT 1 AS n /* harmless */ FROM pg_stat_activity", None),
    ],
)
def test_postgresql_statements_naming_them_are_refused(sql: str, name: str | None) -> None:
    """Quoted or not, qualified or not, any case, called, or inside a string literal (dollar
    quoted too): refused as query_invalid naming what it reads."""
    with pytest.raises(QueryInvalidError, match="may not read pg_stat_") as refused:
        refuse_postgres_readers(sql)
    if name is not None:
        assert f"may not read {name} " in str(refused.value)
    assert "other sessions' statements and the values of their parameters" in str(refused.value)


def test_the_refusal_says_where_the_query_names_it() -> None:
    """The position is the name's, as line and column, for the editor to point at."""
    sql = "SELECT query\nFROM pg_catalog.pg_stat_activity"
    with pytest.raises(QueryInvalidError) as refused:
        refuse_postgres_readers(sql)
    assert refused.value.position == TextPosition(2, 17)
    assert "(line 2, column 17)" in str(refused.value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) AS n FROM orders -- not from pg_stat_activity",
        "SELECT count(*) AS n FROM orders /* pg_stat_statements /* nested */ */",
        "SELECT my_pg_stat_activity_copy FROM orders",
        "SELECT * FROM pg_stat_statements_info",
        "SELECT * FROM pg_locks",
    ],
)
def test_postgresql_statements_that_only_mention_them_pass(sql: str) -> None:
    """In a comment, inside a longer name, or another view (no SQL in pg_locks, none of
    other sessions' in pg_stat_statements_info): not refused."""
    refuse_postgres_readers(sql)


def test_a_postgresql_plan_calling_them_is_refused() -> None:
    """A view or a function over pg_stat_activity shows in the plan as a call of
    pg_stat_get_activity; other calls pass."""
    with pytest.raises(QueryInvalidError, match="may not read pg_stat_get_activity"):
        refuse_postgres_plan({"lower", "pg_stat_get_activity"})
    refuse_postgres_plan({"lower", "count"})


@pytest.mark.parametrize(
    ("sql", "name"),
    [
        ("SELECT info FROM information_schema.PROCESSLIST", "information_schema.processlist"),
        ("SELECT info FROM `information_schema`.`processlist`", "information_schema.processlist"),
        (
            "SELECT info FROM INFORMATION_SCHEMA /* x */ . # y\n PROCESSLIST",
            "information_schema.processlist",
        ),
        ('SELECT info FROM "information_schema"."processlist"', "information_schema.processlist"),
        ("SELECT trx_query FROM information_schema.innodb_trx", "information_schema.innodb_trx"),
        ("SELECT * FROM performance_schema.threads", "performance_schema.threads"),
        ("SELECT * FROM performance_schema.processlist", "performance_schema.processlist"),
        (
            "SELECT sql_text FROM performance_schema.events_statements_history_long",
            "performance_schema.events_statements_history_long",
        ),
        (
            "SELECT query_sample_text FROM performance_schema.events_statements_summary_by_digest",
            "performance_schema.events_statements_summary_by_digest",
        ),
        (
            "SELECT sql_text FROM performance_schema.prepared_statements_instances",
            "performance_schema.prepared_statements_instances",
        ),
        ("SELECT * FROM sys.processlist", "sys.processlist"),
        ("SELECT * FROM sys.`x$session`", "sys.x$session"),
        ("SELECT query FROM sys.statement_analysis", "sys.statement_analysis"),
        ("SELECT query FROM sys.statements_with_sorting", "sys.statements_with_sorting"),
        ("SELECT argument FROM mysql.general_log", "mysql.general_log"),
        ("SELECT sql_text FROM mysql.slow_log", "mysql.slow_log"),
    ],
)
def test_mysql_statements_naming_them_are_refused(sql: str, name: str) -> None:
    """By database and name, whatever the quoting, case, blanks and comments between."""
    with pytest.raises(QueryInvalidError, match=re.escape(f"may not read {name} ")):
        refuse_mysql_readers(sql, "shop")


def test_mysql_names_alone_are_refused_in_that_database_only() -> None:
    """`processlist` alone is the source's own database's table: refused when that database
    is information_schema, a table of the shop's own otherwise."""
    with pytest.raises(QueryInvalidError, match=r"may not read information_schema\.processlist"):
        refuse_mysql_readers("SELECT info FROM processlist", "information_schema")
    with pytest.raises(QueryInvalidError, match=r"may not read sys\.session"):
        refuse_mysql_readers("SELECT * FROM `session`", "sys")
    refuse_mysql_readers("SELECT info FROM processlist", "shop")
    refuse_mysql_readers("SELECT * FROM threads JOIN session USING (id)", None)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id AS threads FROM orders # performance_schema.threads",
        "SELECT id FROM orders -- information_schema.processlist",
        "SELECT * FROM sys.session_ssl_status",
        "SELECT * FROM performance_schema.events_waits_current",
        "SELECT * FROM shop.processlist",
        "SELECT table_name FROM information_schema.tables",
    ],
)
def test_mysql_statements_that_only_mention_them_pass(sql: str) -> None:
    """Comments (`#`, `-- `), the same names in another database, and the system tables
    that hold no statement text pass."""
    refuse_mysql_readers(sql, "shop")


def test_a_mysql_plan_reading_them_is_refused() -> None:
    """The tables a view expands to (the server's rewritten statement) are judged too."""
    with pytest.raises(QueryInvalidError, match=r"may not read information_schema\.processlist"):
        refuse_mysql_plan({("shop", "orders"), ("information_schema", "processlist")})
    refuse_mysql_plan({("shop", "orders"), ("shop", "processlist")})
