"""What a PostgreSQL database's catalogue says of the tables sensitive-table rules name
(domain/rule_check.py), and the identity of the data a source reaches.

Tables: `pg_class` by exact name (PostgreSQL keeps the case of quoted names; a rule's
unquoted `Customers` is `customers`), its relkind read as a plan reads it: r, p, m, f (a
table, a partition, a materialised view, a foreign table) are named by the plans that read
them; v (a view) never is, and what it reads is asked of the planner (postgres/reads.py);
anything else (a sequence, an index, a type) has no rows a query reads. A name missing as
written but present in another case is named in the refusal. Generated columns are stored
(PostgreSQL has no virtual ones before 18): a plan reads them like any column.

Identity: the cluster's system identifier (pg_control_system(), which any login may call
unless the operator revoked it) and the database's name; without it, the server's address
and port as this connection reached it (inet_server_addr(), inet_server_port(): any login).
Two sources whose logins reach one database by different addresses, and of which one may not
call pg_control_system(), have different identities: the system identifier is what tells
one cluster, whatever the address (`localhost` or `127.0.0.1`, a replica or its primary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from qexport.domain.rule_check import Catalogue, FoundTable, TableKind
from qexport.domain.sensitivity import Relation, shown_name
from qexport.sources.postgres.catalog_path import catalog_path
from qexport.sources.postgres.reads import planned_reads

# Catalog names with their schema, and (on the PostgreSQL source) with search_path pinned:
# postgres/catalog_path.py.
_TABLES = """
SELECT s.i, c.relkind::pg_catalog.text,
       ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum)
FROM ROWS FROM (
    pg_catalog.unnest(%(schemas)s::pg_catalog.text[]),
    pg_catalog.unnest(%(names)s::pg_catalog.text[])
) WITH ORDINALITY AS s(schema, name, i)
JOIN pg_catalog.pg_namespace n ON n.nspname = s.schema
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.name
"""
_OTHER_CASE = """
SELECT n.nspname, c.relname
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE pg_catalog.lower(n.nspname) = pg_catalog.lower(%(schema)s)
  AND pg_catalog.lower(c.relname) = pg_catalog.lower(%(name)s)
  AND c.relkind IN ('r', 'p', 'm', 'f', 'v')
ORDER BY n.nspname, c.relname LIMIT 1
"""
_CAN_READ_CLUSTER = (
    "SELECT pg_catalog.has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')"
)
_CLUSTER = (
    "SELECT system_identifier::pg_catalog.text, pg_catalog.current_database()"
    " FROM pg_catalog.pg_control_system()"
)
_ADDRESS = (
    "SELECT coalesce(pg_catalog.host(pg_catalog.inet_server_addr()), 'local'),"
    " coalesce(pg_catalog.inet_server_port()::pg_catalog.text,"
    " pg_catalog.current_setting('port')), pg_catalog.current_database()"
)
# Runs one statement and returns its rows.
Rows = Callable[[str], Sequence[tuple[Any, ...]]]
_READ_AS_TABLES = frozenset({"r", "p", "m", "f"})
_KIND_WORDS = {
    "S": "sequence",
    "i": "index",
    "I": "partitioned index",
    "c": "composite type",
    "t": "TOAST table",
}


def data_identity(rows: Rows) -> str:
    """The identity of the data a session reaches (module docstring); `rows` runs one
    statement on it and returns its rows (the PostgreSQL source's, or a generic source's
    over PostgreSQL: both say the same)."""
    allowed = rows(_CAN_READ_CLUSTER)
    if allowed and allowed[0][0]:
        cluster = rows(_CLUSTER)
        if cluster:
            return f"postgresql:cluster {cluster[0][0]}/{cluster[0][1]}"
    address = rows(_ADDRESS)[0]
    return f"postgresql:{address[0]}:{address[1]}/{address[2]}"


def catalogue_of(conn: psycopg.Connection[Any], tables: Sequence[tuple[str, str]]) -> Catalogue:
    """What the database holds of each `(schema, table)` (names as PostgreSQL holds them),
    in the connection's transaction, with search_path pinned to the catalog; raises psycopg's
    errors (the source translates them)."""
    with catalog_path(conn):
        return _catalogue_of(conn, tables)


def _catalogue_of(conn: psycopg.Connection[Any], tables: Sequence[tuple[str, str]]) -> Catalogue:
    identity = data_identity(lambda statement: conn.execute(statement).fetchall())
    if not tables:
        return Catalogue(identity)
    params = {"schemas": [t[0] for t in tables], "names": [t[1] for t in tables]}
    rows = {
        int(i): (str(kind), tuple(columns)) for i, kind, columns in conn.execute(_TABLES, params)
    }
    found: list[FoundTable] = []
    for index, (schema, table) in enumerate(tables, start=1):
        held = rows.get(index)
        if held is None:
            found.append(_missing(conn, schema, table))
            continue
        kind, columns = held
        if kind in _READ_AS_TABLES:
            found.append(FoundTable(schema, table, TableKind.TABLE, columns=columns))
        elif kind == "v":
            reads = _view_reads(conn, schema, table)
            found.append(FoundTable(schema, table, TableKind.VIEW, view_reads=reads))
        else:
            what = _KIND_WORDS.get(kind, f"relation of kind {kind!r}")
            found.append(FoundTable(schema, table, TableKind.OTHER, what=what))
    return Catalogue(identity, tuple(found))


def _missing(conn: psycopg.Connection[Any], schema: str, table: str) -> FoundTable:
    """A name not held as written: missing, with the name it has in another case, if any."""
    row = conn.execute(_OTHER_CASE, {"schema": schema, "name": table}).fetchone()
    other = None if row is None else f"{shown_name(str(row[0]))}.{shown_name(str(row[1]))}"
    return FoundTable(schema, table, TableKind.MISSING, other_case=other)


def _view_reads(
    conn: psycopg.Connection[Any], schema: str, view: str
) -> frozenset[Relation] | None:
    """What the planner says the view reads; None when it cannot be planned (the login may
    not read the view): its savepoint keeps the transaction usable."""
    statement = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(view))
    try:
        with conn.transaction():
            return planned_reads(conn, statement.as_string(conn))
    except psycopg.Error:
        return None
