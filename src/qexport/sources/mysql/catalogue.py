"""What a MySQL/MariaDB server's catalogue says of the tables sensitive-table rules name
(domain/rule_check.py), and the identity of the data a source reaches.

Tables: information_schema.TABLES (BASE TABLE is what a plan names; a VIEW never is: its
plan names the tables it reads, asked of mysql/reads.py for the refusal; a SEQUENCE has no
rows a query reads), names compared ignoring case as mysql/reads.py folds them. Columns:
information_schema.COLUMNS. A generated column is accepted: a MySQL source reports tables,
not columns, so a column rule there holds for every read of its table anyway.

Identity: MySQL's `server_uuid` and the URL's database; MariaDB has no server UUID, so its
host name and port as the server reports them (@@hostname, @@port). Any login may read them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from qexport.domain.failures import QExportError
from qexport.domain.rule_check import Catalogue, FoundTable, TableKind
from qexport.domain.sensitivity import Relation
from qexport.sources.mysql.reads import Rows, planned_reads

_TABLE = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES"
    " WHERE lower(TABLE_SCHEMA) = lower({schema}) AND lower(TABLE_NAME) = lower({name})"
    " ORDER BY TABLE_SCHEMA, TABLE_NAME LIMIT 1"
)
_COLUMNS = (
    "SELECT COLUMN_NAME FROM information_schema.COLUMNS"
    " WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {name} ORDER BY ORDINAL_POSITION"
)
_KINDS = {"BASE TABLE": TableKind.TABLE, "VIEW": TableKind.VIEW, "SYSTEM VIEW": TableKind.VIEW}


def data_identity(rows: Rows, database: str | None) -> str:
    """The identity of the data the session reaches (module docstring)."""
    found = rows("SHOW VARIABLES LIKE 'server_uuid'")
    where = database or ""
    if found and found[0][1]:
        return f"mysql:server {found[0][1]}/{where}"
    host, port = rows("SELECT @@hostname, @@port")[0]
    return f"mysql:{host}:{port}/{where}"


def catalogue_of(
    rows: Rows,
    literal: Callable[[str], str],
    tables: Sequence[tuple[str, str]],
    database: str | None,
) -> Catalogue:
    """What the server holds of each `(database, table)` (folded names); raises what `rows`
    raises."""
    identity = data_identity(rows, database)
    return Catalogue(identity, tuple(_found(rows, literal, s, t) for s, t in tables))


def _found(rows: Rows, literal: Callable[[str], str], schema: str, table: str) -> FoundTable:
    held = rows(_TABLE.format(schema=literal(schema), name=literal(table)))
    if not held:
        return FoundTable(schema, table, TableKind.MISSING)
    held_schema, held_table, kind = (str(v) for v in held[0])
    found = _KINDS.get(kind.upper(), TableKind.OTHER)
    if found is TableKind.VIEW:
        written = f"`{held_schema.replace('`', '``')}`.`{held_table.replace('`', '``')}`"
        reads = _planned(rows, literal, f"SELECT * FROM {written}")
        return FoundTable(schema, table, TableKind.VIEW, view_reads=reads)
    if found is TableKind.OTHER:
        return FoundTable(schema, table, TableKind.OTHER, what=kind.lower())
    columns = rows(_COLUMNS.format(schema=literal(held_schema), name=literal(held_table)))
    return FoundTable(
        schema, table, TableKind.TABLE, columns=tuple(str(c[0]).lower() for c in columns)
    )


def _planned(
    rows: Rows, literal: Callable[[str], str], statement: str
) -> frozenset[Relation] | None:
    """What the view reads, as mysql/reads.py tells it; None when it cannot (the login may
    not SHOW VIEW it): the refusal then says less, never nothing."""
    try:
        return planned_reads(rows, statement, literal)
    except QExportError:
        return None
