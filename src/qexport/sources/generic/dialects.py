"""What the generic SQLAlchemy source knows of a few dialects: how to make a connection
read-only, how to bound a statement's time and stop it, and how to read the cursor's column
types. Any other dialect gets none of it (see `Rules`): it runs with the role's own rights, and
its timeout is only checked between batches.

| dialect    | read-only                                    | timeout, and stop                  |
|------------|----------------------------------------------|------------------------------------|
| SQLite     | the file opened `mode=ro`, PRAGMA query_only | interrupt() at the deadline        |
| MariaDB    | START TRANSACTION READ ONLY                  | max_statement_time, KILL QUERY     |
| MySQL      | START TRANSACTION READ ONLY                  | max_execution_time, KILL QUERY     |
| PostgreSQL | SET TRANSACTION READ ONLY                    | statement_timeout, cancel()        |

On MySQL, MariaDB and PostgreSQL a query that reads other sessions' statements is refused as
on their own sources (other_sessions.py): their drivers write the values into the text too.
On MySQL and MariaDB, the server's text of an error met while a statement is described is
shown only where it cannot hold values, as on their own source (mysql/checking.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import sqlalchemy as sa

from qexport.domain.failures import QExportError
from qexport.sources.generic.arrow import Described, decimal_type
from qexport.sources.mysql.checking import checked_error
from qexport.sources.other_sessions import refuse_mysql_readers, refuse_postgres_readers

Interrupt = Callable[[], None]


def _deadline_ms(seconds: float) -> int:
    """A server-side limit in milliseconds; 0 (none) for 0 or infinity."""
    if seconds == 0 or math.isinf(seconds):
        return 0
    return max(1, math.ceil(seconds * 1000))


def _errno(exc: BaseException) -> Any:
    orig = getattr(exc, "orig", None)
    args = getattr(orig, "args", ())
    return args[0] if args else None


class Rules:
    """A dialect qexport knows nothing particular of."""

    read_only = False  # whether the server itself refuses a write
    server_timeout = False  # whether the server itself stops a statement at its timeout

    def check_statement(self, sql: str, database: str | None) -> None:
        """Refuse (QueryInvalidError) what the engine lets a query read but qexport does not:
        other sessions' statements (other_sessions.py); `database`: the URL's."""

    def begin(self, conn: sa.Connection, timeout_seconds: float) -> None:
        """Set the connection up for one read-only statement of at most `timeout_seconds`."""

    def interrupter(self, conn: sa.Connection, engine: sa.Engine) -> Interrupt | None:
        """A function that stops the connection's running statement from another thread."""
        dbapi = conn.connection.dbapi_connection
        cancel = getattr(dbapi, "cancel", None)
        return cancel if callable(cancel) else None

    def is_timeout(self, exc: BaseException) -> bool:
        """Whether the server ended the statement at its own timeout."""
        return False

    def is_login_refused(self, exc: BaseException) -> bool:
        """Whether connecting failed because the server refused the credentials or the
        database (not worth another attempt); False where the dialect cannot tell."""
        return False

    def checked_error(self, name: str, exc: BaseException, reason: str) -> QExportError | None:
        """The error a member reads when the server refused a statement it was only checking
        (describe), where the engine's message may hold values it evaluated meanwhile; None:
        the same as when the statement runs."""
        return None

    def arrow_type(self, column: Described) -> pa.DataType | None:
        """The column's Arrow type as the cursor's description tells it; None: from values."""
        return None

    def type_name(self, column: Described) -> str:
        """The column's type as the engine names it, for describe and preview."""
        code = column.type_code
        return code if isinstance(code, str) else ""


class SQLiteRules(Rules):
    read_only = True

    def begin(self, conn: sa.Connection, timeout_seconds: float) -> None:
        conn.exec_driver_sql("PRAGMA query_only = ON")

    def interrupter(self, conn: sa.Connection, engine: sa.Engine) -> Interrupt | None:
        dbapi = conn.connection.dbapi_connection
        return getattr(dbapi, "interrupt", None)

    def type_name(self, column: Described) -> str:
        return "ANY"  # SQLite gives a result column no type: each value has its own


# MySQL's column type codes (include/mysql.h, the same in every driver), by name.
_MYSQL_TYPES = {
    0: "DECIMAL",
    1: "TINYINT",
    2: "SMALLINT",
    3: "INT",
    4: "FLOAT",
    5: "DOUBLE",
    6: "NULL",
    7: "TIMESTAMP",
    8: "BIGINT",
    9: "MEDIUMINT",
    10: "DATE",
    11: "TIME",
    12: "DATETIME",
    13: "YEAR",
    15: "VARCHAR",
    16: "BIT",
    245: "JSON",
    246: "DECIMAL",
    247: "ENUM",
    248: "SET",
    249: "TINYBLOB",
    250: "MEDIUMBLOB",
    251: "LONGBLOB",
    252: "BLOB",
    253: "VARCHAR",
    254: "CHAR",
    255: "GEOMETRY",
}
_MYSQL_DECIMALS = frozenset({0, 246})
_MYSQL_ARROW: dict[Any, pa.DataType] = {
    **dict.fromkeys((1, 2, 3, 8, 9, 13), pa.int64()),
    **dict.fromkeys((4, 5), pa.float64()),
    7: pa.timestamp("us", tz="UTC"),  # TIMESTAMP: an instant, read in UTC (see begin)
    12: pa.timestamp("us"),  # DATETIME: a wall-clock time of no zone
    10: pa.date32(),
    11: pa.duration("us"),  # TIME is a length of time: -838:59:59 to 838:59:59
    **dict.fromkeys((245, 247, 248), pa.string()),  # JSON, ENUM and SET arrive as text
}
# MariaDB: ER_STATEMENT_TIMEOUT; MySQL: ER_QUERY_TIMEOUT (max_execution_time).
_MYSQL_TIMEOUTS = frozenset({1969, 3024})
# ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_BAD_DB_ERROR,
# ER_ACCESS_DENIED_NO_PASSWORD_ERROR: the login or its database refused.
_MYSQL_LOGIN_REFUSED = frozenset({1044, 1045, 1049, 1698})
_MYSQL_DECIMAL_POINT_AND_SIGN = 2


class MySQLRules(Rules):
    """MySQL and MariaDB: TIMESTAMP read in UTC, the statement bounded by the server."""

    read_only = True
    server_timeout = True

    def check_statement(self, sql: str, database: str | None) -> None:
        refuse_mysql_readers(sql, database)

    def begin(self, conn: sa.Connection, timeout_seconds: float) -> None:
        # TIMESTAMP values are instants that the server turns into the session's zone.
        conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")
        ms = _deadline_ms(timeout_seconds)
        # The dialect tells MariaDB from MySQL by the server's version, once connected.
        if getattr(conn.dialect, "is_mariadb", False):
            conn.exec_driver_sql(f"SET SESSION max_statement_time = {ms / 1000:.3f}")
        else:
            conn.exec_driver_sql(f"SET SESSION max_execution_time = {ms}")
        conn.exec_driver_sql("START TRANSACTION READ ONLY")

    def interrupter(self, conn: sa.Connection, engine: sa.Engine) -> Interrupt | None:
        thread = int(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one())

        def kill() -> None:
            # From a connection of its own: the export's is busy with the statement.
            with contextlib.suppress(sa.exc.SQLAlchemyError), engine.connect() as other:
                other.exec_driver_sql(f"KILL QUERY {thread}")

        return kill

    def is_timeout(self, exc: BaseException) -> bool:
        return _errno(exc) in _MYSQL_TIMEOUTS

    def is_login_refused(self, exc: BaseException) -> bool:
        return _errno(exc) in _MYSQL_LOGIN_REFUSED

    def checked_error(self, name: str, exc: BaseException, reason: str) -> QExportError | None:
        # The number alone for most errors, as on the MySQL source (mysql/checking.py).
        code = _errno(exc)
        return checked_error(
            name,
            code if isinstance(code, int) else None,
            reason,
            said=f"data source {name!r}",
        )

    def arrow_type(self, column: Described) -> pa.DataType | None:
        if column.type_code in _MYSQL_DECIMALS and column.scale is not None:
            # The driver gives the display width (digits, point and sign): wide enough.
            return decimal_type(column.precision, column.scale)
        # Strings and blobs are not here: text or bytes, as the driver decodes them.
        return _MYSQL_ARROW.get(column.type_code)

    def type_name(self, column: Described) -> str:
        name = _MYSQL_TYPES.get(column.type_code, "")
        if column.type_code in _MYSQL_DECIMALS and column.precision and column.scale is not None:
            digits = column.precision - _MYSQL_DECIMAL_POINT_AND_SIGN + (column.scale == 0)
            return f"DECIMAL({max(digits, 1)},{column.scale})"
        return name


# PostgreSQL's SQLSTATE for a statement cancelled (statement_timeout, or a cancel request).
_PG_CANCELLED = "57014"


class PostgresRules(Rules):
    read_only = True
    server_timeout = True

    def check_statement(self, sql: str, database: str | None) -> None:
        refuse_postgres_readers(sql)

    def begin(self, conn: sa.Connection, timeout_seconds: float) -> None:
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {_deadline_ms(timeout_seconds)}")
        conn.exec_driver_sql("SET LOCAL TIME ZONE 'UTC'")

    def is_timeout(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None)
        return _PG_CANCELLED in (getattr(orig, "sqlstate", None), getattr(orig, "pgcode", None))

    def is_login_refused(self, exc: BaseException) -> bool:
        # Class 28 (invalid authorization), 3D000 (no such database); libpq gives no
        # SQLSTATE for a failed password check, only its message.
        orig = getattr(exc, "orig", None)
        state = str(getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or "")
        return state.startswith("28") or state == "3D000" or "authentication failed" in str(orig)


def rules_for(dialect: sa.Dialect) -> Rules:
    """The rules of `dialect`."""
    name = dialect.name
    if name == "sqlite":
        return SQLiteRules()
    if name in ("mysql", "mariadb"):
        return MySQLRules()
    if name == "postgresql":
        return PostgresRules()
    return Rules()
