"""What a DuckDB file's catalogue says of the tables sensitive-table rules name
(domain/rule_check.py): `duckdb_tables()`, `duckdb_views()` and `duckdb_columns()` (its
`is_generated`), names compared as DuckDB compares them (ignoring case). What a view reads,
and what a generated column is computed from, are asked of the planner (duckdb/reads.py):
the same unoptimised plan a query's reads come from, so the refusal names exactly what a
rule should mark instead.

The identity of the data is the file's real path, links followed: one file backs one source
(services/sources.py refuses a second), so it only tells a source from the others.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import duckdb

from qexport.domain.failures import QExportError
from qexport.domain.rule_check import Catalogue, FoundTable, TableKind
from qexport.domain.sensitivity import Relation
from qexport.sources.duckdb.reads import planned_reads

_TABLE = """
SELECT schema_name, table_name FROM duckdb_tables()
WHERE database_name = current_database() AND lower(schema_name) = $schema
  AND lower(table_name) = $name
"""
_VIEW = """
SELECT schema_name, view_name FROM duckdb_views()
WHERE NOT internal AND database_name = current_database() AND lower(schema_name) = $schema
  AND lower(view_name) = $name
"""
_COLUMNS = """
SELECT column_name, is_generated FROM duckdb_columns()
WHERE database_name = current_database() AND schema_name = $schema AND table_name = $name
ORDER BY column_index
"""


def file_identity(path: Path) -> str:
    """The identity of the data a DuckDB source reaches: its file's real path."""
    return f"duckdb:{os.path.realpath(path)}"


def catalogue_of(
    con: duckdb.DuckDBPyConnection, tables: Sequence[tuple[str, str]], identity: str
) -> Catalogue:
    """What the database open on `con` holds of each `(schema, table)` (folded names)."""
    return Catalogue(identity, tuple(_found(con, schema, table) for schema, table in tables))


def _found(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> FoundTable:
    names = {"schema": schema.lower(), "name": table.lower()}
    row = con.execute(_TABLE, names).fetchone()
    if row is not None:
        held_schema, held_table = str(row[0]), str(row[1])
        columns = con.execute(_COLUMNS, {"schema": held_schema, "name": held_table}).fetchall()
        generated = {
            str(name).lower(): _computed_from(con, held_schema, held_table, str(name))
            for name, is_generated in columns
            if is_generated
        }
        return FoundTable(
            schema,
            table,
            TableKind.TABLE,
            columns=tuple(str(name).lower() for name, _ in columns),
            generated=generated,
        )
    row = con.execute(_VIEW, names).fetchone()
    if row is not None:
        reads = _planned(con, f"SELECT * FROM {_quoted(str(row[0]))}.{_quoted(str(row[1]))}")
        return FoundTable(schema, table, TableKind.VIEW, view_reads=reads)
    return FoundTable(schema, table, TableKind.MISSING)


def _computed_from(
    con: duckdb.DuckDBPyConnection, schema: str, table: str, column: str
) -> frozenset[str] | None:
    """The columns of its table the planner reports reading a generated column as."""
    reads = _planned(con, f"SELECT {_quoted(column)} FROM {_quoted(schema)}.{_quoted(table)}")
    if reads is None:
        return None
    found: set[str] = set()
    for relation in reads:
        if relation.columns is None:
            return None
        found |= relation.columns
    return frozenset(found)


def _planned(con: duckdb.DuckDBPyConnection, sql: str) -> frozenset[Relation] | None:
    """What the planner says `sql` reads; None when it cannot plan it (a view over a table
    dropped since): the refusal then says less, never nothing."""
    try:
        return planned_reads(con, sql)
    except (QExportError, duckdb.Error):
        return None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
