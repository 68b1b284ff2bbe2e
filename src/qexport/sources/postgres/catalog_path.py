"""qexport's own catalog statements on a PostgreSQL source's connection, whatever search_path
the login chose.

A login picks its search_path (`ALTER ROLE ... SET search_path`, or the source URL's
`options=-c search_path=...`), and one that may create objects in a schema it puts before
pg_catalog shadows the catalog for every name written without a schema: a view
`shadow.pg_roles` that says it is no superuser, an empty `shadow.pg_proc` that hides the
functions a query calls, a `shadow.pg_class` that hides a partition's parent. So qexport's
own catalog statements (the role check, the planner's lookups, the catalogue of sensitive
tables, a result's type names) name each relation, function and type with its schema
(`pg_catalog.pg_roles`, `pg_catalog.pg_has_role(...)`, `::pg_catalog.regclass`), and run
under `SET LOCAL search_path = pg_catalog, pg_temp` for what a name cannot carry (operators:
`=`, `LIKE`, `= ANY`, `||`). pg_temp is named last so that the session's temporary schema,
searched first for relations when left out, comes after the catalog; functions and operators
are never looked up in it.

The path is set in a savepoint that is rolled back at the end (outside a transaction, as
check_role is, in a transaction of its own, rolled back): the member's query, before or after,
runs with the login's own search_path, so what it names means what the login made it mean.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

_PINNED = "SET LOCAL search_path = pg_catalog, pg_temp"


@contextmanager
def catalog_path(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Run the block's statements with search_path pinned to the catalog, then restore the
    login's (the savepoint, or the transaction, is rolled back; errors are raised)."""
    with conn.transaction(force_rollback=True):
        conn.execute(_PINNED)
        yield
