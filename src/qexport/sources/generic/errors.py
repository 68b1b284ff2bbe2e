"""The one place SQLAlchemy's (and its drivers') exceptions become qexport errors, and what to
install when a dialect or its driver is missing.

Drivers name the server in their own ways (`Can't connect to MySQL server on 'db:3306'`,
`[ODBC Driver 18]TCP Provider ... 10.0.0.5,1433`): members read what the failure means where
it is one of the known forms (withheld.network_reason), the driver's words without addresses
and paths otherwise; the operator's log has them whole."""

from __future__ import annotations

import re
from collections.abc import Iterable

import sqlalchemy as sa

from qexport.domain.failures import (
    QExportError,
    QueryInvalidError,
    QueryTimeoutError,
    SourceLoginError,
    SourceUnavailableError,
    bounded_detail,
)
from qexport.sources.generic.dialects import Rules
from qexport.sources.postgres.errors import scrub
from qexport.sources.withheld import logged, network_reason, told, without_layout

# The packages that provide the dialects SQLAlchemy does not ship, by the URL's dialect name.
_DIALECT_PACKAGES = {
    "snowflake": "snowflake-sqlalchemy",
    "trino": "trino[sqlalchemy]",
    "presto": "pyhive[presto]",
    "hive": "pyhive[hive]",
    "bigquery": "sqlalchemy-bigquery",
    "redshift": "sqlalchemy-redshift",
    "databricks": "databricks-sqlalchemy",
    "clickhouse": "clickhouse-sqlalchemy",
    "duckdb": "duckdb-engine",
    "cockroachdb": "sqlalchemy-cockroachdb",
    "hana": "sqlalchemy-hana",
    "db2": "ibm-db-sa",
    "ibm_db_sa": "ibm-db-sa",
    "teradatasql": "teradatasqlalchemy",
    "vertica": "sqlalchemy-vertica-python",
    "exasol": "sqlalchemy-exasol",
    "firebird": "sqlalchemy-firebird",
    "awsathena": "pyathena[sqlalchemy]",
}
# The packages of the drivers SQLAlchemy's own dialects use, by the module they import.
_DRIVER_PACKAGES = {
    "pymysql": "pymysql",
    "MySQLdb": "mysqlclient",
    "mysql": "mysql-connector-python",
    "mariadb": "mariadb",
    "psycopg": "psycopg[binary]",
    "psycopg2": "psycopg2-binary",
    "pg8000": "pg8000",
    "pyodbc": "pyodbc",
    "pymssql": "pymssql",
    "oracledb": "oracledb",
    "cx_Oracle": "cx-Oracle",
}


def missing_dialect(exc: sa.exc.NoSuchModuleError) -> ValueError:
    """SQLAlchemy has no dialect of that name: which package would add it."""
    found = re.search(r"sqlalchemy\.dialects:([\w.]+)", str(exc))
    dialect = found.group(1) if found else "?"
    family = dialect.partition(".")[0]
    package = _DIALECT_PACKAGES.get(family)
    advice = f"pip install {package}" if package else "install the package that provides it"
    return ValueError(f"the SQLAlchemy dialect {dialect!r} is not installed: {advice}")


def missing_driver(exc: ImportError) -> ValueError:
    """The dialect's driver (DB-API module) is not installed: which package has it."""
    module = (exc.name or "").partition(".")[0] or "?"
    package = _DRIVER_PACKAGES.get(module, module)
    return ValueError(f"the database driver {module!r} is not installed: pip install {package}")


def _reason(exc: BaseException, secrets: Iterable[str]) -> str:
    """The driver's own message (SQLAlchemy's wrapper adds the SQL and a link), scrubbed."""
    orig = getattr(exc, "orig", None) or exc
    return bounded_detail(scrub(str(orig), secrets) or type(orig).__name__)


def connect_error(
    name: str, exc: BaseException, rules: Rules, secrets: Iterable[str]
) -> SourceLoginError | SourceUnavailableError:
    """The source refused the login (where the dialect tells it: not retried, as for every
    source) or could not be reached (retried with backoff)."""
    reason = _reason(exc, secrets)
    logged("source_connect_failed", source=name, kind="sqlalchemy", reason=reason)
    if rules.is_login_refused(exc):
        return SourceLoginError(
            bounded_detail(
                f"the data source {name!r} refused qexport's login ({without_layout(reason)});"
                " check the user, password and database in the source URL"
            )
        )
    why = network_reason(reason) or without_layout(reason)
    return SourceUnavailableError(
        bounded_detail(
            f"the data source {name!r} cannot be reached: {why}; if that lasts, ask the operator"
        )
    )


def _told(name: str, reason: str) -> str:
    return told(name, "sqlalchemy", reason)


def timeout_error(seconds: float) -> QueryTimeoutError:
    return QueryTimeoutError(f"statement timeout of {seconds:g} s reached")


# Quoted literals in a data error quote row values: they must not reach failure_detail.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.|'')*'")
_SQLITE_BUSY = ("database is locked", "unable to open database file", "disk I/O error")


def query_error(  # noqa: PLR0911 - one return per kind of failure
    name: str,
    exc: BaseException,
    rules: Rules,
    secrets: Iterable[str],
    *,
    timed_out: bool,
    timeout_seconds: float,
    checking: bool = False,
) -> QExportError:
    """The qexport error for an exception raised while a statement ran or was read;
    `checking`: while it was only described (the dialect's `checked_error`)."""
    if isinstance(exc, QExportError):
        return exc
    if timed_out or rules.is_timeout(exc):
        return timeout_error(timeout_seconds)
    if not isinstance(exc, sa.exc.DBAPIError):
        return QExportError(f"the data source {name!r} failed unexpectedly: {type(exc).__name__}")
    reason = _reason(exc, secrets)
    if exc.connection_invalidated or reason.startswith(_SQLITE_BUSY):
        return SourceUnavailableError(f"the data source {name!r} went away: {_told(name, reason)}")
    if checking and (checked := rules.checked_error(name, exc, reason)) is not None:
        return checked
    if isinstance(exc, sa.exc.InternalError):
        return SourceUnavailableError(f"the data source {name!r} failed: {_told(name, reason)}")
    if isinstance(exc, sa.exc.DataError):
        return QueryInvalidError(_QUOTED.sub("'…'", reason))
    # ProgrammingError (syntax, missing table), OperationalError once connected (SQLite's
    # syntax errors, MySQL's unknown column), NotSupportedError, IntegrityError.
    return QueryInvalidError(reason)
