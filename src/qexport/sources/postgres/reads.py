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
- A function may read tables of its own: by SQL given as text, by a table's name, or in its
  body. The plan shows the call, never what it reads. So a function counts only when it is
  the system's, made with the cluster (oid below 16384, whatever its schema: an extension
  installed into pg_catalog is no exception) and not one of SQL_RUNNERS, or a member of a
  reviewed extension that only computes on its arguments (TRUSTED_EXTENSIONS: citext,
  pgcrypto, pg_trgm, hstore...). Any other, whatever its language, makes the reads unknown
  (None): plpgsql and SQL functions, and C ones like tablefunc's crosstab and connectby,
  xml2's xpath_table or dblink, which run SQL they are given as text.
- Not only functions called by name: an aggregate's or window function's support functions
  (pg_aggregate's transition, final, combine, (de)serial and moving-aggregate ones: a
  built-in looking `leak_agg` can hide a plpgsql transition function), an operator's
  function (by the operator's name, whatever its operand types: `=` of an untrusted
  extension makes every `=` unknown), and what a type used by the plan hides (a type cast
  to, `::t`, or of a column read, and the element, base and attribute types under them): a
  cast between such types (and built-in ones) through a function, and, for a type made
  after the cluster, its input and output functions, its operators, its btree and hash
  support functions (sorting, grouping, hashing) and its domain constraints.
- PostgreSQL folds an IMMUTABLE function given constants into its result while it plans:
  the plan then shows the value (a mislabelled plpgsql function's emails as a constant),
  not the call. So the names the statement itself calls (read with PostgreSQL's lexis,
  strings and comments left out), its operators, and the functions and operators of the
  views it names (pg_depend of their rewrite rules, through views below them) are judged
  too. A name written with Unicode escapes (`U&"..."`) cannot be compared: None.
- `pg_statistic` (read through pg_stats) holds sample values of every column: None.

SQL_RUNNERS, from an audit of pg_proc on PostgreSQL 15 (the functions whose C code runs SPI
or reads a relation named by an argument): the query_to_xml, table_to_xml, cursor_to_xml,
schema_to_xml and database_to_xml families (with their _xmlschema and
_and_xmlschema twins), ts_stat(query text) and ts_rewrite(tsquery, text), which run the
query they are given; and dblink's, should it be installed into pg_catalog. Checked and left
out: currtid2 (a tuple id by a table's name, no values), the lo_* functions (large objects
by oid, not tables), pg_get_viewdef and the like (definitions, not rows), ts_debug and
obj_description (catalogue reads), pg_relation_size and friends (sizes).

Judging it all is one more catalogue query on the plan's connection, its catalog names
written with their schema and run with search_path pinned (postgres/catalog_path.py): a
login's own `pg_proc` or `pg_class` view, first on its path, hides nothing. A plan's
connection is new, so the query loads catalogues the plan did not use: 14 ms (7 planning it,
7 running it; 4 ms on a warm connection), medians on a 2-core machine at a load of 9, where
asking for a join's reads took 25-30 ms before and 39-48 ms now. Where functions are looked
up by name, a function of the database that shares a name with one the statement calls
counts, whatever its arguments: more unknowns, never fewer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from qexport.domain.sensitivity import Relation, merged
from qexport.sources.other_sessions import refuse_postgres_plan
from qexport.sources.postgres.catalog_path import catalog_path
from qexport.sources.postgres.statements import code_only

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
        "ts_rewrite",
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
# A name in a statement's code (`U&` before a quoted one), and whether a `.` comes before it
# or a `(` after it: `f(x)` and `x.f` (attribute notation, `f(x)` for a composite x) are calls.
_WRITTEN_NAME = re.compile(
    r"(\.\s*)?(U&)?"
    r'("(?:[^"]|"")*"|[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*)(\s*\()?',
    re.IGNORECASE,
)

# Objects made when the cluster was (initdb) have oids below this (FirstNormalObjectId): a
# function of the system, not of an extension or a user, whatever its schema or language.
FIRST_NORMAL_OID = 16384
# Extensions whose functions compute on their arguments only (reviewed: no SPI, no table or
# file read by name; their SQL functions call pg_catalog's or their own C ones).
TRUSTED_EXTENSIONS = frozenset(
    {
        "btree_gin",
        "btree_gist",
        "citext",
        "cube",
        "earthdistance",
        "fuzzystrmatch",
        "hstore",
        "intarray",
        "isn",
        "ltree",
        "pg_trgm",
        "pgcrypto",
        "seg",
        "unaccent",
        "uuid-ossp",
    }
)
# A function the plan may call that is neither the system's nor a trusted extension's: by a
# name the plan calls (an aggregate with its support functions), an operator's name, or hidden
# in a type the plan uses (the types cast to, those of the columns read, and the element,
# base and attribute types under them): a cast between such types (or built-in ones), the
# input and output functions, operators, btree/hash support functions (sorting, grouping,
# hashing) and domain constraints of a user-defined one.
_OPAQUE = """
WITH RECURSIVE types(oid) AS (
    SELECT t.oid FROM pg_catalog.pg_type t WHERE t.typname = ANY(%(type_names)s)
    UNION
    SELECT pg_catalog.unnest(%(type_oids)s::pg_catalog.oid[])
    UNION
    SELECT under.oid FROM types JOIN pg_catalog.pg_type t ON t.oid = types.oid
    CROSS JOIN LATERAL (
        SELECT t.typelem UNION ALL SELECT t.typbasetype
        UNION ALL
        SELECT a.atttypid FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
    ) AS under(oid)
    WHERE under.oid <> 0
),
own_types AS (SELECT oid FROM types WHERE oid >= %(first)s),
views(oid) AS (
    SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relkind = 'v' AND c.relname = ANY(%(names)s)
    UNION
    SELECT c.oid FROM views
    JOIN pg_catalog.pg_rewrite r ON r.ev_class = views.oid
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
        AND d.objid = r.oid AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
    JOIN pg_catalog.pg_class c ON c.oid = d.refobjid AND c.relkind = 'v'
),
in_views AS (
    SELECT d.refclassid, d.refobjid FROM views
    JOIN pg_catalog.pg_rewrite r ON r.ev_class = views.oid
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
        AND d.objid = r.oid
),
named AS (
    SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.proname = ANY(%(functions)s)
    UNION
    SELECT refobjid FROM in_views WHERE refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
),
used(oid) AS (
    SELECT oid FROM named
    UNION
    SELECT pg_catalog.unnest(ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn,
        a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn, a.aggmfinalfn]::pg_catalog.oid[])
    FROM pg_catalog.pg_aggregate a WHERE a.aggfnoid IN (SELECT oid FROM named)
    UNION
    SELECT o.oprcode FROM pg_catalog.pg_operator o
    WHERE o.oprname = ANY(%(operators)s)
       OR o.oid IN (
           SELECT refobjid FROM in_views
           WHERE refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
       )
       OR o.oprleft IN (SELECT oid FROM own_types)
       OR o.oprright IN (SELECT oid FROM own_types)
    UNION
    SELECT c.castfunc FROM pg_catalog.pg_cast c
    WHERE c.castfunc <> 0
      AND (c.castsource < %(first)s OR c.castsource IN (SELECT oid FROM types))
      AND (c.casttarget < %(first)s OR c.casttarget IN (SELECT oid FROM types))
    UNION
    SELECT pg_catalog.unnest(ARRAY[t.typinput, t.typoutput]::pg_catalog.oid[])
    FROM pg_catalog.pg_type t WHERE t.oid IN (SELECT oid FROM own_types)
    UNION
    SELECT ap.amproc FROM pg_catalog.pg_amproc ap
    JOIN pg_catalog.pg_opfamily f ON f.oid = ap.amprocfamily
    JOIN pg_catalog.pg_am am ON am.oid = f.opfmethod AND am.amname IN ('btree', 'hash')
    WHERE ap.amproclefttype IN (SELECT oid FROM own_types)
       OR ap.amprocrighttype IN (SELECT oid FROM own_types)
    UNION
    SELECT d.refobjid FROM pg_catalog.pg_constraint k
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass
        AND d.objid = k.oid AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    WHERE k.contypid IN (SELECT oid FROM own_types)
)
SELECT used.oid::pg_catalog.regprocedure::pg_catalog.text
FROM used
CROSS JOIN LATERAL (
    SELECT pg_catalog.count(*) AS trusted FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = ANY(%(trusted)s)
    WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = used.oid
      AND d.objsubid = 0 AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
      AND d.deptype = 'e'
) AS member
WHERE used.oid >= %(first)s AND member.trusted = 0
LIMIT 1
"""
# Each scanned relation's kind, columns (and their types), row type and ancestors
# (partitions, inheritance).
_RELATIONS = """
SELECT s.schema, s.name, c.relkind::pg_catalog.text,
       ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum),
       ARRAY(SELECT a.atttypid FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum),
       c.reltype,
       (WITH RECURSIVE up(oid) AS (
            SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid
            UNION SELECT i.inhparent FROM pg_catalog.pg_inherits i JOIN up ON i.inhrelid = up.oid)
        SELECT coalesce(
            pg_catalog.json_agg(pg_catalog.json_build_array(pn.nspname, pc.relname)),
            '[]'::pg_catalog.json
        )
        FROM up JOIN pg_catalog.pg_class pc ON pc.oid = up.oid
        JOIN pg_catalog.pg_namespace pn ON pn.oid = pc.relnamespace)
FROM ROWS FROM (
    pg_catalog.unnest(%(schemas)s::pg_catalog.text[]),
    pg_catalog.unnest(%(names)s::pg_catalog.text[])
) AS s(schema, name)
JOIN pg_catalog.pg_namespace n ON n.nspname = s.schema
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.name
"""
# The tables (and columns: NULL for the whole table) a materialised view was made from,
# through the views and materialised views it reads.
_MADE_FROM = """
WITH RECURSIVE made(oid) AS (
    SELECT c.oid
    FROM ROWS FROM (
        pg_catalog.unnest(%(schemas)s::pg_catalog.text[]),
        pg_catalog.unnest(%(names)s::pg_catalog.text[])
    ) AS s(schema, name)
    JOIN pg_catalog.pg_namespace n ON n.nspname = s.schema
    JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.name
    UNION
    SELECT d.refobjid FROM made
    JOIN pg_catalog.pg_rewrite r ON r.ev_class = made.oid
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
        AND d.objid = r.oid AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
        AND d.refobjid <> made.oid
)
SELECT n.nspname, c.relname, c.relkind::pg_catalog.text, a.attname::pg_catalog.text
FROM made
JOIN pg_catalog.pg_rewrite r ON r.ev_class = made.oid
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
    AND d.objid = r.oid AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
    AND d.refobjid <> made.oid
JOIN pg_catalog.pg_class c ON c.oid = d.refobjid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.refobjsubid
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


@dataclass
class _Calls:
    """What a plan's expressions call: functions and operators by name, and the types cast to
    (`::name`, or each name of `::schema.name`)."""

    functions: set[str] = field(default_factory=set)
    operators: set[str] = field(default_factory=set)
    types: set[str] = field(default_factory=set)


@dataclass
class _Written:
    """What a statement as written names: every name, those called, its operators. A call
    PostgreSQL folded into a constant while planning (an IMMUTABLE function given constants)
    is no longer in the plan."""

    names: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)
    operators: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Known:
    """A scanned relation as the catalogue has it."""

    kind: str
    columns: dict[str, int]  # name -> type oid
    row_type: int
    parents: list[tuple[str, str]]


def planned_reads(conn: psycopg.Connection[Any], statement: str) -> frozenset[Relation] | None:
    """The relations (with the columns read) of `statement`, already rendered with its
    values, in the session's read-only transaction; None when the plan runs SQL it does not
    show. QueryInvalidError for a plan that reads other sessions' statements; raises
    psycopg's errors (the source translates them)."""
    with conn.cursor() as cursor:
        # binary: the extended protocol, which refuses a second statement.
        cursor.execute(f"EXPLAIN (VERBOSE, FORMAT JSON)\n{statement}", binary=True)
        row = cursor.fetchone()
    plan = row[0] if row else None
    if isinstance(plan, str | bytes):
        plan = json.loads(plan)
    scans: list[_Scan] = []
    calls = _Calls()
    for node in _nodes(plan):
        texts = list(_expressions(node))
        for text in texts:
            _calls(text, calls)
        if isinstance(node.get("Function Name"), str):
            calls.functions.add(str(node["Function Name"]))
        if isinstance(node.get("Relation Name"), str):
            scans.append(_scan(node, texts))
    refuse_postgres_plan(calls.functions)
    written = _written(statement)
    if written is None:
        return None
    calls.functions |= written.functions
    calls.operators |= written.operators
    if calls.functions & SQL_RUNNERS:
        return None
    if any(s.schema == "pg_catalog" and s.name in VALUE_CATALOGUES for s in scans):
        return None
    # The plan above, with the login's search_path (what the query names means what it will
    # mean when it runs); the catalogue below, with the path pinned to the catalog.
    with catalog_path(conn):
        known = _catalogue(conn, scans)
        reads, types = _reads(scans, known)
        if _opaque(conn, calls, types, written.names):
            return None
        materialised = [
            (s.schema, s.name)
            for s in scans
            if known.get((s.schema, s.name), _UNKNOWN).kind == _MATERIALISED
        ]
        if materialised:
            reads += _made_from(conn, materialised)
    return merged(reads)


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


def _calls(text: str, calls: _Calls) -> None:
    """Add the functions `text` calls, its operators and the types it casts to."""
    tokens = _tokens(text)
    for index, piece in enumerate(tokens):
        after = tokens[index + 1] if index + 1 < len(tokens) else ""
        if piece == "::":
            at = index + 1
            while at < len(tokens) and _is_name(tokens[at]):
                calls.types.add(_unquoted(tokens[at]))
                if tokens[at + 1 : at + 2] != ["."]:
                    break
                at += 2
        elif _OPERATOR.fullmatch(piece):
            calls.operators.add(piece)
        elif _is_name(piece) and after == "(":
            calls.functions.add(_unquoted(piece))


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


def _written(statement: str) -> _Written | None:
    """What the statement as written names (strings and comments left out); None when it
    names something with Unicode escapes (`U&"..."`), which cannot be compared by name."""
    written = _Written()
    code = code_only(statement)
    for found in _WRITTEN_NAME.finditer(code):
        attribute, escaped, name, call = found.groups()
        if escaped:
            return None
        name = _unquoted(name) if name.startswith('"') else name.lower()
        written.names.add(name)
        if attribute or call:
            written.functions.add(name)
    written.operators.update(_OPERATOR.findall(code))
    return written


def _opaque(conn: psycopg.Connection[Any], calls: _Calls, types: set[int], names: set[str]) -> bool:
    """Whether the plan may call a function that is neither the system's nor a trusted
    extension's: by name, or hidden in an operator, an aggregate, a type it uses, or a view
    the statement names (whose calls PostgreSQL may have folded into constants)."""
    params = {
        "names": sorted(names),
        "functions": sorted(calls.functions),
        "operators": sorted(calls.operators),
        "type_names": sorted(calls.types),
        "type_oids": sorted(types),
        "first": FIRST_NORMAL_OID,
        "trusted": sorted(TRUSTED_EXTENSIONS),
    }
    return conn.execute(_OPAQUE, params).fetchone() is not None


_UNKNOWN = _Known("", {}, 0, [])


def _catalogue(conn: psycopg.Connection[Any], scans: list[_Scan]) -> dict[tuple[str, str], _Known]:
    """Each scanned relation's kind, columns with their types, row type and ancestors."""
    if not scans:
        return {}
    keys = sorted({(s.schema, s.name) for s in scans})
    params = {"schemas": [k[0] for k in keys], "names": [k[1] for k in keys]}
    known: dict[tuple[str, str], _Known] = {}
    for schema, name, kind, columns, types, row_type, ancestors in conn.execute(_RELATIONS, params):
        parents = [(str(a[0]), str(a[1])) for a in ancestors or ()]
        typed = dict(zip(columns, (int(t) for t in types), strict=True))
        known[(schema, name)] = _Known(kind, typed, int(row_type or 0), parents)
    return known


def _reads(
    scans: list[_Scan], known: dict[tuple[str, str], _Known]
) -> tuple[list[Relation], set[int]]:
    """What each scan reads (as every ancestor of its relation too), and the types of the
    columns (and whole rows) read."""
    found: list[Relation] = []
    types: set[int] = set()
    for scan in scans:
        relation = known.get((scan.schema, scan.name), _UNKNOWN)
        columns = frozenset(relation.columns)
        read = None if scan.whole_row or not columns else frozenset(scan.names & columns)
        types.update(relation.columns[c] for c in (columns if read is None else read))
        if scan.whole_row and relation.row_type:
            types.add(relation.row_type)
        for schema, name in [(scan.schema, scan.name), *relation.parents]:
            found.append(Relation(schema, name, read))
    return found, types


def _made_from(conn: psycopg.Connection[Any], views: list[tuple[str, str]]) -> list[Relation]:
    """The tables the materialised views were made from, with the columns they used."""
    params = {"schemas": [v[0] for v in views], "names": [v[1] for v in views]}
    found: list[Relation] = []
    for schema, name, kind, column in conn.execute(_MADE_FROM, params):
        if kind in (_VIEW, _MATERIALISED):
            continue  # followed down to its own tables
        found.append(Relation(schema, name, None if column is None else frozenset({column})))
    return found
