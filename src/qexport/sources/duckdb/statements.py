"""What a DuckDB source accepts: one SELECT that reads no files, and the values bound to its
named parameters.

`enable_external_access = false` does not keep a query out of the folders DuckDB itself must
use: the pipes folder (an allowed directory, so that COPY can write exports into it), the spill
folder (`temp_directory`) and the database file. A query could list them (`glob`), read them
(`read_blob`, `read_csv`, a replacement scan `FROM '/path/x.csv'`: reading a concurrent
export's named pipe steals its bytes and corrupts that file) and learn their paths
(`current_setting('temp_directory')`, `duckdb_databases()`). So before anything runs, the
statement's parse tree, from DuckDB's own parser (`json_serialize_sql`), is walked node by node:

- Table functions (`FROM f(...)`) are allowlisted. DuckDB 2.0 offers over 100, most of them file
  readers (read_*, parquet_*, glob, sniff_csv), introspection that shows paths or settings
  (duckdb_databases, duckdb_settings, duckdb_extensions, duckdb_temporary_files, duckdb_logs,
  which_secret), statements in disguise (query, query_table, json_execute_serialized_sql,
  checkpoint, enable_logging) or test hooks: an allowlist of the few that only compute or
  describe the catalogue is short and stays safe when a new DuckDB adds more readers. (A
  table macro defined in the database file is refused too; its views and scalar macros run.)
- Scalar, aggregate and window functions are too many (~1000) to allowlist and, but for the
  few below, compute on their arguments only: those few are refused by name.
- A table reference with a path in its name (`/`, `\\`, `~`, `:` or a `.` as in `"x.csv"`) is a
  replacement scan that reads a file; so is a qualified one that names no table or view
  (`FROM main.csv` reads ./main.csv). Both are refused, as are the system views over paths
  and settings (duckdb_databases, pragma_database_list, pg_settings, duckdb_logs).

Names are compared case-insensitively and whatever their schema or catalogue
(`system.main.glob` is `glob`). A statement the serialiser cannot represent is refused, never
let through unchecked. (pragma_table_info and pragma_show are left out: they take a table name
as text, and DESCRIBE does the same.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import duckdb

from qexport.domain.failures import QueryInvalidError, bounded_detail
from qexport.domain.queries import CONTEXT_PARAMETERS, fold_name
from qexport.sources.duckdb.errors import query_invalid
from qexport.sources.duckdb.lake import LAKE_READERS, literal_paths

if TYPE_CHECKING:
    from qexport.domain.exports import Requester

# Table functions that compute rows or describe the catalogue, and reveal no path or setting.
TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "generate_series",
        "unnest",
        "repeat",
        "repeat_row",
        "json_each",
        "json_tree",
        "duckdb_columns",
        "duckdb_constraints",
        "duckdb_dependencies",
        "duckdb_functions",
        "duckdb_indexes",
        "duckdb_keywords",
        "duckdb_schemas",
        "duckdb_sequences",
        "duckdb_tables",
        "duckdb_types",
        "duckdb_views",
        "pragma_version",
        "pg_timezone_names",
        "icu_calendar_names",
    }
)

# Functions outside FROM that read a setting (temp_directory, allowed_directories), plan or run
# SQL given as text (which would escape this check: binding read_csv reads the file), write to
# DuckDB's log, or are DuckDB's internals. DuckDB 2.0 refuses a table function outside FROM
# ("used as a scalar function"); the readers and the SQL runners are named here anyway, so
# that a scalar twin in a later DuckDB is refused too.
REFUSED_FUNCTIONS = frozenset(
    {
        "current_setting",
        "getvariable",
        "json_serialize_plan",
        "json_execute_serialized_sql",
        "write_log",
        "query",
        "query_table",
        "glob",
        "read_blob",
        "read_text",
    }
)
_INTERNAL_PREFIX = "__internal"

# System views over duckdb_databases(), duckdb_settings() and duckdb_logs().
REFUSED_VIEWS = frozenset(
    {"duckdb_databases", "pragma_database_list", "pg_settings", "duckdb_logs"}
)

_PATH_CHARACTERS = ("/", "\\", "~", ":", ".")

_REFUSAL = "queries may not read files or show the server's paths and settings"

# Judges a file a lake query reads (QueryInvalidError if it may not); None: no lake, no file.
PathCheck = Callable[[str], None]


def single_select(con: duckdb.DuckDBPyConnection, sql: str, reads: PathCheck | None = None) -> Any:
    """Parse `sql` and return its one statement; QueryInvalidError unless it is a single SELECT
    that reads no files (but those `reads` allows, on a lake) and reveals no paths or
    settings."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise query_invalid(str(exc), sql) from exc
    except ValueError as exc:
        raise _unknown_kind() from exc
    if not statements:
        raise QueryInvalidError("the query is empty")
    if len(statements) > 1:
        raise QueryInvalidError(
            f"only a single SELECT statement is allowed; got {len(statements)} statements"
        )
    statement = statements[0]
    try:
        kind = statement.type
    except ValueError as exc:
        raise _unknown_kind() from exc
    if kind != duckdb.StatementType.SELECT:
        raise QueryInvalidError(f"only a single SELECT statement is allowed; got {kind.name}")
    check_reads_no_files(con, statement.query, reads)
    return statement


def check_reads_no_files(
    con: duckdb.DuckDBPyConnection, sql: str, reads: PathCheck | None = None
) -> None:
    """QueryInvalidError naming the first function or table reference in `sql` that reads a
    file or reveals a path or setting, or if DuckDB cannot serialise its parse tree. With
    `reads`, the lake readers may read the files it allows (duckdb/lake.py)."""
    try:
        # fetchall: DuckDB 2.0 refuses the cursor's next statement while a result is unread.
        rows = con.execute("SELECT json_serialize_sql($sql)", {"sql": sql}).fetchall()
    except duckdb.Error as exc:
        raise QueryInvalidError(bounded_detail(str(exc))) from exc
    tree = json.loads(rows[0][0]) if rows else {"error": True}
    if tree.get("error") is not False or not tree.get("statements"):
        reason = tree.get("error_message") or "no parse tree"
        raise QueryInvalidError(
            bounded_detail(f"the query cannot be checked for file access: {reason}")
        )
    qualified: list[tuple[str, str, str]] = []
    for node in _nodes(tree["statements"]):
        refused = _refused(node) if reads is None else _refused_on_lake(node, reads)
        if refused is not None:
            raise QueryInvalidError(bounded_detail(f"{refused} is not allowed: {_REFUSAL}"))
        if node.get("type") == "BASE_TABLE" and (
            node.get("catalog_name") or node.get("schema_name")
        ):
            qualified.append((node["catalog_name"], node["schema_name"], node["table_name"]))
    if qualified:
        _check_in_catalog(con, qualified)


def _check_in_catalog(con: duckdb.DuckDBPyConnection, refs: list[tuple[str, str, str]]) -> None:
    """A qualified name that is no table or view is a replacement scan: DuckDB reads the file
    named by the dotted name (`main.csv`, `x.parquet`), so every one must be in the catalogue."""
    try:
        rows = con.execute(
            "SELECT database_name, schema_name, table_name FROM duckdb_tables()"
            " UNION ALL SELECT database_name, schema_name, view_name FROM duckdb_views()"
        ).fetchall()
    except duckdb.Error as exc:
        raise QueryInvalidError(bounded_detail(str(exc))) from exc
    known = {tuple(str(part).lower() for part in row) for row in rows}
    for catalog, schema, table in refs:
        c, s, t = catalog.lower(), schema.lower(), table.lower()
        # `a.b` names schema a of the default database, or the default schema of database a.
        found = (c, s, t) in known if c else any(s in (kc, ks) and t == kt for kc, ks, kt in known)
        if not found:
            name = ".".join(part for part in (catalog, schema, table) if part)
            raise QueryInvalidError(
                bounded_detail(f"reading the file {name!r} is not allowed: {_REFUSAL}")
            )


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every object in the parse tree, depth first (iteratively: a deep tree is no error)."""
    pending = [tree]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            yield item
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)


def _refused(node: dict[str, Any]) -> str | None:
    """What in `node` is refused, as the message names it; None if nothing."""
    kind = node.get("type")
    if kind == "TABLE_FUNCTION":
        function = node.get("function")
        name = function.get("function_name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            return "a table function call of an unknown form"
        if name.lower() not in TABLE_FUNCTIONS:
            return f"table function {name}()"
    elif kind in ("BASE_TABLE", "SHOW_REF"):
        table = node.get("table_name")
        if isinstance(table, str) and table:
            if any(ch in table for ch in _PATH_CHARACTERS):
                return f"reading the file {table!r}"
            if table.lower() in REFUSED_VIEWS:
                return f"view {table}"
    name = node.get("function_name")
    if isinstance(name, str):
        folded = name.lower()
        if folded in REFUSED_FUNCTIONS or folded.startswith(_INTERNAL_PREFIX):
            return f"function {name}()"
    return None


def _refused_on_lake(node: dict[str, Any], reads: PathCheck) -> str | None:
    """As `_refused`, but a lake reader given literal paths, and a replacement scan of an
    absolute path, read the files `reads` allows (it raises for any other)."""
    kind = node.get("type")
    function = node.get("function")
    name = function.get("function_name") if isinstance(function, dict) else None
    if kind == "TABLE_FUNCTION" and isinstance(name, str) and name.lower() in LAKE_READERS:
        assert isinstance(function, dict)  # name came from it
        paths = literal_paths(function.get("arguments"))
        if paths is None:
            return f"{name}() of anything but a path written out ('/data/lake/x.parquet')"
        for path in paths:
            reads(path)
        return None
    table = node.get("table_name")
    if kind == "BASE_TABLE" and isinstance(table, str) and table.startswith("/"):
        reads(table)
        return None
    return _refused(node)


def _unknown_kind() -> QueryInvalidError:
    """A statement type newer than the Python binding's enum (UPDATE EXTENSIONS in 2.0):
    DuckDB parsed it, the binding cannot name it, and it is not a SELECT either way."""
    return QueryInvalidError(
        "only a single SELECT statement is allowed; got a statement of another kind"
    )


def bound_values(
    used: set[str], parameters: Mapping[str, Any], requester: Requester
) -> dict[str, Any]:
    """The value of every parameter the statement uses (`used`, as the parser reports them).

    Only used names are bound because DuckDB refuses a value for a parameter the statement does
    not mention; a report's queries share one set of parameters and each uses its own subset.
    """
    given = {fold_name(name): value for name, value in parameters.items()}
    shadowing = sorted(name for name in parameters if fold_name(name) in CONTEXT_PARAMETERS)
    if shadowing:
        names = ", ".join(f"${name}" for name in shadowing)
        raise QueryInvalidError(f"parameter {names} is reserved for the requester context")
    context = {"user_id": requester.user_id, "workspace_id": requester.workspace_id}
    values: dict[str, Any] = {}
    missing: list[str] = []
    for name in sorted(used):
        if name.isdigit():
            raise QueryInvalidError(
                "positional parameters ($1, ?) are not supported; use named ones like $customer_id"
            )
        folded = fold_name(name)
        if folded in context:
            values[name] = context[folded]
        elif folded in given:
            values[name] = given[folded]
        else:
            missing.append(f"${name}")
    if missing:
        # Every declared parameter is bound (None when optional and not given): what is
        # missing is a $name the query does not declare.
        such = "such parameter" if len(missing) == 1 else "such parameters"
        raise QueryInvalidError(
            f"the SQL uses {', '.join(missing)}, but the query declares no {such}"
        )
    return values
