"""Statements that read other sessions' SQL are refused, on PostgreSQL and MySQL/MariaDB.

Every export of a source runs on the source's one login, and qexport writes a run's parameter
values into its statement as literals (COPY takes no parameters: postgres/statements.py;
mysqlclient binds client-side). A login sees the statements of its own other sessions with
no privilege at all: PostgreSQL's pg_stat_activity shows the `query` of every session of the
same role, MySQL's and MariaDB's PROCESSLIST the `INFO` of every thread of the same user. So
a member could read, while it runs, the SQL and the values of another member's export, of a
members-only query, or of another workspace's where the source is shared: on PostgreSQL 15,
`SELECT query FROM pg_stat_activity` returned a concurrent export's COPY statement with the
literal 'victim-secret@corp.com' in it; on MariaDB 10.11, `SELECT info FROM
information_schema.PROCESSLIST` the same. These are refused (query_invalid, naming the object
and where the query names it) when a query is saved, previewed and run:

- PostgreSQL: pg_stat_activity and the functions under it (pg_stat_get_activity,
  pg_stat_get_backend_activity), and pg_stat_statements (every statement's normalised SQL,
  a members-only query's included). Left alone: pg_locks (no SQL), pg_prepared_statements
  and pg_cursors (this session's own), pg_get_backend_memory_contexts (this backend's own).
- MySQL/MariaDB: information_schema's PROCESSLIST, INNODB_TRX (`trx_query`) and
  QUERY_CACHE_INFO (MariaDB's cached statements); performance_schema's threads, processlist,
  events_statements_* and prepared_statements_instances; sys's processlist, session,
  statement_analysis, statements_with_* and ps_digest_* views and their x$ twins; and
  mysql.general_log and mysql.slow_log (the statement logs, when written to tables).

How: the text is read with the engine's lexis, comments blanked out, and the names looked for
everywhere else, string literals included: a PostgreSQL function that runs SQL given as text
(`query_to_xml('select query from pg_stat_activity', ...)`) takes it in one. A MySQL table
is looked for by database and name (`performance_schema . threads`, quoted or not), and by
name alone when the source's own database is that system database. Wherever the plan is read
(a query is always planned when saved; before a preview or run on a source with sensitive
tables), the plan is checked too: it sees through a view or an inlined SQL function over
them and a name spelled with escapes (`U&"..."`), as PostgreSQL's plan calls
pg_stat_get_activity and MySQL's rewritten statement names the table (which refuses
pg_stat_ssl and pg_stat_gssapi too: views over pg_stat_get_activity without its query).

What no check of the text can see is SQL assembled at run time inside a function that runs
SQL given as text (`query_to_xml('select query from pg_stat_' || 'activity', ...)`), or a
function of the database that reads them (plpgsql, a MySQL stored function); their reads
count as unknown, which a policy takes as every sensitive table (approval), but nothing
refuses them. The complete fix is one login per workspace (README, "Sources and
roles"): PostgreSQL shows a session's query only to its own role (and pg_read_all_stats),
MySQL only to its own user (and PROCESS), and qexport refuses a source whose login has those.
"""

from __future__ import annotations

import re

from qexport.domain.failures import QueryInvalidError, TextPosition
from qexport.sources.mysql.statements import mysql_without_comments
from qexport.sources.postgres.statements import without_comments

_SHOWS = "it shows other sessions' statements and the values of their parameters"

# Functions a PostgreSQL plan calls to read them (pg_stat_activity is a view over the first).
POSTGRES_PLAN_READERS = frozenset(
    {"pg_stat_get_activity", "pg_stat_get_backend_activity", "pg_stat_statements"}
)
# (`$` may end a name, but also a dollar quote's tag: `$q$select ... pg_stat_activity$q$`.)
_POSTGRES = re.compile(
    r"(?<!\w)pg_stat_(?:activity|get_activity|get_backend_activity|statements)(?!\w)",
    re.IGNORECASE,
)

# MySQL's and MariaDB's tables and views of other sessions' statements, by database.
MYSQL_READERS = {
    "information_schema": re.compile(r"processlist|innodb_trx|query_cache_info"),
    "performance_schema": re.compile(
        r"threads|processlist|events_statements_[\w$]*|prepared_statements_instances"
    ),
    "sys": re.compile(
        r"(?:x\$)?(?:processlist|session|statement_analysis|statements_with_[\w$]*"
        r"|ps_digest_[\w$]*)"
    ),
    "mysql": re.compile(r"general_log|slow_log"),
}
_QUOTE = r"[`\"]?"
_MYSQL_QUALIFIED = re.compile(
    rf"(?<![\w$]){_QUOTE}({'|'.join(MYSQL_READERS)}){_QUOTE}\s*\.\s*{_QUOTE}([\w$]+)",
    re.IGNORECASE,
)
_MYSQL_WORD = re.compile(r"(?<![\w$])[\w$]+")


def refuse_postgres_readers(sql: str) -> None:
    """QueryInvalidError if `sql` names pg_stat_activity, its functions or
    pg_stat_statements outside a comment (in a string literal too)."""
    found = _POSTGRES.search(without_comments(sql))
    if found is not None:
        raise _refused(sql, found.start(), found.group().lower())


def refuse_postgres_plan(functions: set[str]) -> None:
    """QueryInvalidError if a plan calls a function that reads other sessions' SQL."""
    for name in sorted(functions & POSTGRES_PLAN_READERS):
        raise QueryInvalidError(
            f"queries may not read {name} (the query's plan calls it, through a view or a"
            f" function perhaps): {_SHOWS}"
        )


def refuse_mysql_readers(sql: str, database: str | None) -> None:
    """QueryInvalidError if `sql` names one of MYSQL_READERS outside a comment: with its
    database, or alone when `database` (the source's own, if any) is that database."""
    text = mysql_without_comments(sql)
    for found in _MYSQL_QUALIFIED.finditer(text):
        schema, table = found.group(1).lower(), found.group(2).lower()
        if MYSQL_READERS[schema].fullmatch(table):
            raise _refused(sql, found.start(), f"{schema}.{table}")
    own = MYSQL_READERS.get((database or "").lower())
    if own is None:
        return
    for found in _MYSQL_WORD.finditer(text):
        if own.fullmatch(found.group().lower()):
            raise _refused(sql, found.start(), f"{database}.{found.group().lower()}")


def refuse_mysql_plan(tables: set[tuple[str, str]]) -> None:
    """QueryInvalidError if a plan reads one of MYSQL_READERS ((database, table), folded)."""
    for schema, table in sorted(tables):
        pattern = MYSQL_READERS.get(schema)
        if pattern is not None and pattern.fullmatch(table):
            raise QueryInvalidError(
                f"queries may not read {schema}.{table} (the query's plan reads it, through a"
                f" view perhaps): {_SHOWS}"
            )


def _refused(sql: str, offset: int, name: str) -> QueryInvalidError:
    position = TextPosition.at(sql, offset)
    return QueryInvalidError(
        f"queries may not read {name} ({position.words()}): {_SHOWS}", position=position
    )
