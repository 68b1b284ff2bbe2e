"""The MySQL/MariaDB source: `mysql://user:password@host[:port]/db` (or `mariadb://`, the same
source), each export on its own connection.

Every run: connect (mysqlclient, utf8mb4, one statement per call), `SET SESSION TRANSACTION
READ ONLY`, then in one SET the session's time zone (UTC: TIMESTAMP values are instants,
read as such), the statement timeout (MariaDB's max_statement_time, MySQL's
max_execution_time; qexport's own deadline runs KILL QUERY too), and the requester context
as the user variables `@qexport_user_id` and `@qexport_workspace_id` (for views:
`WHERE owner = @qexport_user_id`), then `START TRANSACTION READ ONLY` and the query itself,
unchanged, read unbuffered (`use_result`): the server streams the rows as they are read, so
memory stays flat whatever the row count.

Queries name parameters like every other source (`$customer_id`, `$user_id`,
`$workspace_id`); see mysql/statements.py for the check and the binding. MySQL has no
row-level security: a query can assign a user variable itself, so `@qexport_user_id` is a
convenience for views, not a boundary against the query's author.

Types (mysql/types.py): exact or refused naming the column; DECIMAL keeps its precision and
scale, TIMESTAMP is UTC, DATETIME has no zone, TIME is a duration, BIT a number, and a date
no calendar has (`0000-00-00`, `2024-00-10`, `2024-02-30`) is NULL.

Describe runs the query with `sql_select_limit = 0` (no row is produced unless the query
has a LIMIT of its own, and then none is read); preview with `sql_select_limit` = one row
more than shown, the query unchanged (a derived table would let MariaDB drop its ORDER BY).
The login is judged from SHOW GRANTS at every session, before the statement (mysql/role.py):
a grant made while a worker runs is seen at its next export.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qexport.config import Settings
    from qexport.sources.mysql.source import MySQLSource

INSTALL = "pip install 'qexport[mysql]' (mysqlclient, built against libmariadb or libmysqlclient)"


def from_url(
    name: str, url: str, settings: Settings, *, allow_privileged_role: bool = False
) -> MySQLSource:
    """The source over a `mysql://` or `mariadb://` URL (the `qexport.sources` entry point);
    ValueError, never echoing the URL, when it cannot be used or mysqlclient is missing."""
    try:
        import MySQLdb  # noqa: F401 - only whether it is there
    except ImportError:
        raise ValueError(f"the MySQL/MariaDB source needs mysqlclient: {INSTALL}") from None
    from qexport.sources.mysql.source import MySQLSource

    return MySQLSource(name, url, allow_privileged_role=allow_privileged_role)
