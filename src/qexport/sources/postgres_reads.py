"""What a PostgreSQL statement reads: the relations of `EXPLAIN (VERBOSE, FORMAT JSON)`.

The plan names every relation scanned (`Relation Name`, `Schema`, a unique `Alias`), views,
CTEs and subqueries already expanded, and, with VERBOSE, every expression deparsed with its
columns qualified by that alias (`customers.email`, or bare when the statement has one
relation). A column a scan reads is in that scan's own node: in its `Output` (what it hands
up) or in its `Filter`, `Index Cond`, `Recheck Cond` and the like (what it tests); whatever a
join, sort or aggregate uses above came out of some scan's `Output`. So the columns of a scan
are the names of its node's expressions that are columns of its table (from the catalogue);
`alias.*` (a whole row) is every column. PostgreSQL may list every column of a table it reads
whole (`count(*)`, a hash join's input): more than is used, never less.

What a plan does not show, and how each is closed:

- Partitions and inheritance children are scanned by their own names (`ev_2024` for `ev`):
  each is reported as every ancestor too (pg_inherits), so that a rule on `ev` holds.
- A materialised view is a copy of the tables it was made from: it is reported as those
  tables (pg_depend of its rewrite rule, through views and materialised views below it).
- A function that runs SQL of its own reads tables the plan never shows: the built-in ones
  that take SQL or a table by name (query_to_xml, table_to_xml, ts_stat, dblink ...), and any
  function or operator written in a procedural language (plpgsql, a non-inlined SQL function)
  outside pg_catalog. A plan that calls one reads what cannot be told: None.
- `pg_statistic` (read through pg_stats) holds sample values of every column: None.

(A cast or a type's input function written in plpgsql is not looked for.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from qexport.domain.sensitivity import Relation, merged

# Built-in (or common extension) functions that read tables named by text or SQL in text.
SQL_RUNNERS = frozenset(
    {
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "table_to_xml",
        "table_to_xmlschema",
        "table_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xmlschema",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xmlschema",
        "database_to_xml_and_xmlschema",
        "ts_stat",
        "dblink",
        "dblink_exec",
        "dblink_open",
        "dblink_fetch",
        "dblink_send_query",
        "dblink_get_result",
    }
)
# Catalogues that hold the values of other tables' columns (pg_stats' most common values).
VALUE_CATALOGUES = frozenset({"pg_statistic", "pg_statistic_ext_data"})
# What identifies a node rather than being one of its expressions.
_NOT_EXPRESSIONS = frozenset(
    {
        "Node Type",
        "Relation Name",
        "Schema",
        "Alias",
        "Index Name",
        "CTE Name",
        "Function Name",
        "Subplan Name",
        "Parent Relationship",
        "Join Type",
        "Strategy",
        "Partial Mode",
        "Scan Direction",
        "Operation",
        "Command",
        "Plans",
    }
)
# Deparsed expressions: strings, quoted names, names, `::`, `.*`, operators, punctuation.
_TOKEN = re.compile(
    r"""'(?:[^']|'')*'"""
    r'''|"(?:[^"]|"")*"'''
    r"|[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*"
    r"|::|\.\*"
    r"|[+\-*/<>=~!@#%^&|`?]+"
    r"|\S"
)
_OPERATOR = re.compile(r"[+\-*/<>=~!@#%^&|`?]+")
_NAME = re.compile(r"[A-Za-z_\u0080-\U0010ffff]")

# Functions and operators of the plan that run SQL of their own: written in a procedural
# language outside the system's schemas.
_OPAQUE = """
SELECT 1
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND l.lanname NOT IN ('internal', 'c')
  AND (p.proname = ANY(%(functions)s)
       OR p.oid IN (SELECT o.oprcode FROM pg_operator o WHERE o.oprname = ANY(%(operators)s)))
LIMIT 1
"""
# Each scanned relation's kind, columns and ancestors (partitions, inheritance).
_RELATIONS = """
SELECT s.schema, s.name, c.relkind::text,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
       (WITH RECURSIVE up(oid) AS (
            SELECT i.inhparent FROM pg_inherits i WHERE i.inhrelid = c.oid
            UNION SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.oid)
        SELECT coalesce(json_agg(json_build_array(pn.nspname, pc.relname)), '[]'::json)
        FROM up JOIN pg_class pc ON pc.oid = up.oid
        JOIN pg_namespace pn ON pn.oid = pc.relnamespace)
FROM unnest(%(schemas)s::text[], %(names)s::text[]) AS s(schema, name)
JOIN pg_namespace n ON n.nspname = s.schema
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.name
"""
# The tables (and columns: NULL for the whole table) a materialised view was made from,
# through the views and materialised views it reads.
_MADE_FROM = """
WITH RECURSIVE made(oid) AS (
    SELECT c.oid FROM unnest(%(schemas)s::text[], %(names)s::text[]) AS s(schema, name)
    JOIN pg_namespace n ON n.nspname = s.schema
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.name
    UNION
    SELECT d.refobjid FROM made
    JOIN pg_rewrite r ON r.ev_class = made.oid
    JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
        AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> made.oid
)
SELECT n.nspname, c.relname, c.relkind::text, a.attname::text
FROM made
JOIN pg_rewrite r ON r.ev_class = made.oid
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
    AND d.refclassid = 'pg_class'::regclass AND d.refobjid <> made.oid
JOIN pg_class c ON c.oid = d.refobjid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.refobjsubid
    AND d.refobjsubid > 0
"""
_MATERIALISED = "m"
_VIEW = "v"


@dataclass
class _Scan:
    """A relation a plan node scans, and the names its expressions use."""

    schema: str
    name: str
    alias: str
    names: set[str] = field(default_factory=set)  # bare, or qualified by its alias
    whole_row: bool = False


def planned_reads(conn: psycopg.Connection[Any], statement: str) -> frozenset[Relation] | None:
    """The relations (with the columns read) of `statement`, already rendered with its
    values, in the session's read-only transaction; None when the plan runs SQL it does not
    show. Raises psycopg's errors (the source translates them)."""
    with conn.cursor() as cursor:
        # binary: the extended protocol, which refuses a second statement.
        cursor.execute(f"EXPLAIN (VERBOSE, FORMAT JSON)\n{statement}", binary=True)
        row = cursor.fetchone()
    plan = row[0] if row else None
    if isinstance(plan, str | bytes):
        plan = json.loads(plan)
    nodes = list(_nodes(plan))
    scans: list[_Scan] = []
    functions: set[str] = set()
    operators: set[str] = set()
    for node in nodes:
        texts = list(_expressions(node))
        for text in texts:
            _calls(text, functions, operators)
        if isinstance(node.get("Relation Name"), str):
            scans.append(_scan(node, texts))
    if functions & SQL_RUNNERS or _opaque(conn, functions, operators):
        return None
    if any(s.schema == "pg_catalog" and s.name in VALUE_CATALOGUES for s in scans):
        return None
    return _relations(conn, scans)


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every plan node, depth first."""
    pending = [plan]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            if "Plan" in item:
                pending.append(item["Plan"])
            if "Node Type" in item:
                yield item
                pending.extend(item.get("Plans") or ())


def _expressions(node: dict[str, Any]) -> Iterator[str]:
    """The node's expressions as deparsed (every string value but its identity), and those
    of the index scans below a bitmap heap scan, which test its table's columns."""
    pending: list[Any] = [v for k, v in node.items() if k not in _NOT_EXPRESSIONS]
    if isinstance(node.get("Relation Name"), str):
        pending += [
            child
            for child in node.get("Plans") or ()
            if str(child.get("Node Type", "")).startswith("Bitmap")
        ]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(v for k, v in item.items() if k not in _NOT_EXPRESSIONS)
            pending.extend(
                c
                for c in item.get("Plans") or ()
                if str(c.get("Node Type", "")).startswith("Bitmap")
            )


def _unquoted(token: str) -> str:
    return token[1:-1].replace('""', '"') if token.startswith('"') else token


def _is_name(token: str) -> bool:
    return token.startswith('"') or bool(_NAME.match(token))


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if not t.startswith("'")]


def _calls(text: str, functions: set[str], operators: set[str]) -> None:
    """Add the names of the functions `text` calls, and its operators."""
    tokens = _tokens(text)
    for index, token in enumerate(tokens):
        if _OPERATOR.fullmatch(token):
            operators.add(token)
        elif _is_name(token) and index + 1 < len(tokens) and tokens[index + 1] == "(":
            functions.add(_unquoted(token))


def _scan(node: dict[str, Any], texts: list[str]) -> _Scan:
    """The relation a scan node reads and the names its expressions use: bare ones, those
    qualified by its alias, and whether a whole row (`alias.*`) is."""
    alias = str(node.get("Alias") or node["Relation Name"])
    scan = _Scan(str(node.get("Schema") or ""), str(node["Relation Name"]), alias)
    for text in texts:
        tokens = _tokens(text)
        for index, token in enumerate(tokens):
            if not _is_name(token):
                continue
            before = tokens[index - 1] if index else ""
            after = tokens[index + 1] if index + 1 < len(tokens) else ""
            if after == ".*" and _unquoted(token) == alias:
                scan.whole_row = True
            elif before == "." and index >= 2:
                if _unquoted(tokens[index - 2]) == alias:
                    scan.names.add(_unquoted(token))
            elif before != "::" and after not in (".", "(", ".*"):
                scan.names.add(_unquoted(token))
    return scan


def _opaque(conn: psycopg.Connection[Any], functions: set[str], operators: set[str]) -> bool:
    """Whether any function or operator the plan uses runs SQL of its own."""
    if not functions and not operators:
        return False
    params = {"functions": sorted(functions), "operators": sorted(operators)}
    return conn.execute(_OPAQUE, params).fetchone() is not None


def _relations(conn: psycopg.Connection[Any], scans: list[_Scan]) -> frozenset[Relation]:
    if not scans:
        return frozenset()
    keys = sorted({(s.schema, s.name) for s in scans})
    params = {"schemas": [k[0] for k in keys], "names": [k[1] for k in keys]}
    known: dict[tuple[str, str], tuple[str, frozenset[str], list[tuple[str, str]]]] = {}
    for schema, name, kind, columns, ancestors in conn.execute(_RELATIONS, params):
        parents = [(str(a[0]), str(a[1])) for a in ancestors or ()]
        known[(schema, name)] = (kind, frozenset(columns), parents)
    found: list[Relation] = []
    materialised: list[tuple[str, str]] = []
    for scan in scans:
        kind, columns, parents = known.get((scan.schema, scan.name), ("", frozenset(), []))
        read = None if scan.whole_row or not columns else frozenset(scan.names & columns)
        for schema, name in [(scan.schema, scan.name), *parents]:
            found.append(Relation(schema, name, read))
        if kind == _MATERIALISED:
            materialised.append((scan.schema, scan.name))
    if materialised:
        found += _made_from(conn, materialised)
    return merged(found)


def _made_from(conn: psycopg.Connection[Any], views: list[tuple[str, str]]) -> list[Relation]:
    """The tables the materialised views were made from, with the columns they used."""
    params = {"schemas": [v[0] for v in views], "names": [v[1] for v in views]}
    found: list[Relation] = []
    for schema, name, kind, column in conn.execute(_MADE_FROM, params):
        if kind in (_VIEW, _MATERIALISED):
            continue  # followed down to its own tables
        found.append(Relation(schema, name, None if column is None else frozenset({column})))
    return found
