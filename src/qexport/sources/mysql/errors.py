"""The one place mysqlclient's exceptions become qexport errors, for the MySQL/MariaDB source.

Codes, as for PostgreSQL (postgres/errors.py):
- the server cannot be reached, drops the connection, runs out of connections, shuts down, or
  picks the statement as a deadlock or lock-wait victim: source_unavailable (retried);
- the server refuses qexport's login (wrong password, unknown user or database, no grant on
  the database): `SourceLoginError`, access_lost, as PostgreSQL's refused login is: another
  attempt would be refused the same way until the source URL is fixed. The detail keeps the
  server's words (`Access denied for user 'reader'`), never the password nor the address
  qexport connected from (`@'10.0.0.5'`): where the server and qexport are is for the
  operator's log only (withheld.py), members read `cannot be reached: connection refused`;
- the query is refused (syntax, unknown table or column, no SELECT on a table, a write in
  the read-only transaction, a value the server cannot convert): query_invalid; while the
  statement is only checked (describe, plan), with the server's text for the errors made of
  the statement's and the catalogue's words only (mysql/checking.py);
- max_statement_time / max_execution_time, or qexport's own deadline: query_timeout.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import MySQLdb

from qexport.domain.failures import (
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceLoginError,
    SourceUnavailableError,
    bounded_detail,
)
from qexport.sources.mysql.checking import checked_error
from qexport.sources.postgres.errors import scrub
from qexport.sources.withheld import logged, network_reason, told, without_layout

# Server errors (include/mysqld_error.h).
ER_ACCESS_DENIED = 1045
ER_DBACCESS_DENIED = 1044
ER_BAD_DB = 1049
ER_QUERY_INTERRUPTED = 1317
ER_STATEMENT_TIMEOUT = 1969  # MariaDB: max_statement_time exceeded
ER_QUERY_TIMEOUT = 3024  # MySQL: max_execution_time exceeded
_LOGIN = frozenset(
    {
        ER_ACCESS_DENIED,
        ER_DBACCESS_DENIED,
        ER_BAD_DB,
        1130,  # host not allowed to connect
        1251,  # client does not support the authentication protocol
        1698,  # access denied (unix_socket / auth plugin)
        1820,  # the password must be changed first
        1862,  # the password expired
        3118,  # the account is locked
        4151,  # MariaDB: the account is locked
    }
)
_TRANSIENT = frozenset(
    {
        1040,  # too many connections
        1053,  # server shutdown in progress
        1205,  # lock wait timeout
        1213,  # deadlock
        1927,  # MariaDB: connection was killed
        1152,  # aborted connection
        1161,  # net write timeout
        1159,  # net read timeout
        1037,  # out of memory
        1041,  # out of memory
        1203,  # max_user_connections
        1226,  # a resource limit of the user exceeded
    }
)
# Errors about values (a truncated or incorrect value, out of range): their quoted parts may
# be row data and stay out of failure_detail.
_VALUES = frozenset({1264, 1292, 1366, 1365, 1406, 1411, 1690, 3140, 4025, 4038})
# The client library's own errors (2000-2999) mean the server was never reached or went away.
_CLIENT_ERRORS = range(2000, 3000)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.|'')*'")


def errno_of(exc: BaseException) -> int | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return args[0] if args and isinstance(args[0], int) else None


def _reason(exc: BaseException, secrets: Iterable[str]) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    text = str(args[1]) if len(args) > 1 else str(exc)
    return bounded_detail(scrub(text, secrets) or type(exc).__name__)


def connect_error(name: str, exc: BaseException, secrets: Iterable[str]) -> QExportError:
    """The qexport error for a failure to open a session on the source: the reason without
    the server's place (or qexport's) for members, the client's whole text for the log."""
    reason = _reason(exc, secrets)
    logged("source_connect_failed", source=name, kind="mysql", reason=reason)
    if errno_of(exc) in _LOGIN:
        return SourceLoginError(
            bounded_detail(
                f"MySQL source {name!r} refused qexport's login ({without_layout(reason)});"
                " check the user, password and database in the source URL"
            )
        )
    # "Can't connect to server on 'db' (111)": the number is the system's error (111 refused,
    # 110 timed out; MariaDB's client says 115 for a refused non-blocking connect).
    why = network_reason(reason) or without_layout(reason)
    return SourceUnavailableError(
        bounded_detail(
            f"MySQL source {name!r} cannot be reached: {why}; if that lasts, ask the operator"
        )
    )


def _told(name: str, reason: str) -> str:
    return told(name, "mysql", reason)


def timeout_error(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(f"statement timeout of {seconds:g} s reached")


def query_error(  # noqa: PLR0911 - one return per kind of failure
    name: str,
    exc: BaseException,
    secrets: Iterable[str],
    *,
    interrupted: bool,
    timed_out: bool,
    timeout_seconds: float,
    checking: bool = False,
) -> QExportError:
    """The qexport error for a failure while a statement ran or was read.

    `interrupted`: qexport stopped it (the export's lease); `timed_out`: its deadline passed;
    `checking`: the statement was being described or planned, not run (mysql/checking.py).
    """
    if isinstance(exc, QExportError):
        return exc
    code = errno_of(exc)
    if timed_out or code in (ER_STATEMENT_TIMEOUT, ER_QUERY_TIMEOUT):
        return timeout_error(timeout_seconds)
    if interrupted:
        return QExportError("the statement was interrupted")
    if not isinstance(exc, MySQLdb.MySQLError):
        return QExportError(f"the MySQL source {name!r} failed unexpectedly: {type(exc).__name__}")
    reason = _reason(exc, secrets)
    if code in _LOGIN:
        return connect_error(name, exc, secrets)
    if code is None or code in _CLIENT_ERRORS or code in _TRANSIENT:
        shown = _told(name, reason)
        return SourceUnavailableError(bounded_detail(f"MySQL source {name!r} failed: {shown}"))
    if code == ER_QUERY_INTERRUPTED:  # KILL QUERY by someone else (an operator)
        return SourceUnavailableError(
            bounded_detail(f"MySQL source {name!r} stopped the statement: {_told(name, reason)}")
        )
    if checking:
        return checked_error(name, code, reason, said=f"MySQL source {name!r}")
    if code in _VALUES or isinstance(exc, MySQLdb.DataError):
        return QueryInvalidError(bounded_detail(_QUOTED.sub("'…'", reason)))
    # Syntax (1064), unknown table (1146) or column (1054), no privilege (1142, 1143), a write
    # in the read-only transaction (1792), and every other refusal of the statement.
    return QueryInvalidError(reason)
