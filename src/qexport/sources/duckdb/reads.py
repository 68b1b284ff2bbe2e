"""What a DuckDB statement reads: the table scans of its unoptimised logical plan.

Three ways DuckDB can tell, measured on `SELECT name FROM customers WHERE email LIKE '%x'`, on
`SELECT count(*) FROM customers` and through a view and a CTE (DuckDB 2.0):

- `EXPLAIN (FORMAT JSON)`, the physical plan: a SEQ_SCAN per table with its `Projections`,
  views and CTEs resolved; but a column used only to filter is left out of `Projections`
  (`Projections: name`, `Filters: suffix(email, 'x')`: an author could learn the emails by
  filtering on them), and the optimiser answers `count(*)` from the table's statistics with
  no scan of it at all (a COLUMN_DATA_SCAN): the table does not appear.
- the optimised logical plan: the same two gaps (columns pruned, the scan folded away).
- the unoptimised logical plan, `json_serialize_plan(sql, optimize := false)`: one
  LOGICAL_GET per table scan, naming its catalogue, schema and table, and the columns it
  binds (`column_indexes` into the table's `names`): those of the select list, of filters,
  joins and sorts alike; views, CTEs, subqueries, macros and generated columns are expanded
  to the tables and columns they read. Chosen: 4.5 ms for a two-table join with the
  statement check (describing it: 0.6 ms), and nothing runs. It may name a column the
  optimiser would prune (`SELECT id FROM v` of a view over id and email names both): more
  than is read, never less.

`json_serialize_plan` takes no parameters, and a parameter whose type DuckDB cannot infer
(`SELECT $since AS since`) stops the plan ("parameters need to have a known value"): the
statement is planned with each `$name` written as its bound value's literal, found by DuckDB's
own tokenizer (never inside a string or a comment), quoted as SQL quotes it. The unoptimised
plan does not depend on the values; a literal keeps each one's type.

Only the tables of the database file are named (ATTACH is refused, so there is one catalogue);
the table functions a query may call (duckdb_statements.TABLE_FUNCTIONS, and a lake's readers,
whose files a policy cannot name) read no table. Any other LOGICAL_GET, or a plan DuckDB cannot
serialise, is a statement whose reads cannot be told: None, which a policy reads as every
table (fails closed).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import duckdb

from qexport.domain.failures import QueryInvalidError, bounded_detail
from qexport.domain.queries import fold_name
from qexport.domain.sensitivity import Relation, merged
from qexport.sources.duckdb.lake import LAKE_READERS
from qexport.sources.duckdb.statements import TABLE_FUNCTIONS

_ROW_ID = 2**64 - 1  # DuckDB's COLUMN_IDENTIFIER_ROW_ID: the row id, no column of the table
_READS_NO_TABLE = TABLE_FUNCTIONS | LAKE_READERS


def planned_reads(con: duckdb.DuckDBPyConnection, sql: str) -> frozenset[Relation] | None:
    """The tables (with the columns bound) that the already checked statement `sql` scans,
    names folded to lower case as DuckDB compares them; None when the plan holds a scan of
    something else. QueryInvalidError when DuckDB cannot plan it."""
    rows = con.execute(
        "SELECT json_serialize_plan($sql, optimize := false)", {"sql": sql}
    ).fetchall()
    plan = json.loads(rows[0][0]) if rows else {"error": True}
    if plan.get("error") is not False:
        reason = plan.get("error_message") or "no plan"
        raise QueryInvalidError(bounded_detail(f"the query cannot be planned: {reason}"))
    found: list[Relation] = []
    pending: list[Any] = [plan.get("plans")]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        pending.extend(item.values())
        if item.get("type") != "LOGICAL_GET":
            continue
        relation = _scanned(item)
        if relation is None:
            if _function_name(item) in _READS_NO_TABLE:
                continue
            return None
        found.append(relation)
    return merged(found)


def with_values(sql: str, values: Mapping[str, Any]) -> str:
    """`sql` with each of its `$name` parameters written as the literal of its value in
    `values` (names compared as the sources compare them); nothing else changes."""
    data = sql.encode("utf-8")
    names = sorted(((fold_name(n).encode("utf-8"), v) for n, v in values.items()), reverse=True)
    tokens = duckdb.tokenize(sql)
    starts = [position for position, _ in tokens[1:]] + [len(data)]
    pieces: list[bytes] = []
    done = 0
    for (position, kind), following in zip(tokens, starts, strict=True):
        if kind != duckdb.token_type.operator or data[position : position + 1] != b"$":
            continue
        if following != position + 1:
            continue  # `$` with nothing named after it
        written = data[position + 1 :]
        folded = fold_name(written[:256].decode("utf-8", "ignore")).encode("utf-8")
        for name, value in names:
            end = len(name)
            if folded.startswith(name) and not _name_goes_on(written[end : end + 1]):
                pieces += [data[done:position], _literal(value).encode("utf-8")]
                done = position + 1 + end
                break
    return (b"".join(pieces) + data[done:]).decode("utf-8")


def _name_goes_on(following: bytes) -> bool:
    return bool(following) and (following.isalnum() or following in b"_$" or following[0] >= 0x80)


def _literal(value: Any) -> str:  # noqa: PLR0911 - one literal per type
    """A bound value as a DuckDB literal of its type, in parentheses."""
    if value is None:
        return "(NULL)"
    if isinstance(value, bool):
        return "(TRUE)" if value else "(FALSE)"
    if isinstance(value, int):
        return f"({value}::HUGEINT)" if abs(value) >= 2**63 else f"({value}::BIGINT)"
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        scale = min(max(-exponent, 0), 37) if isinstance(exponent, int) else 0
        return f"('{value}'::DECIMAL(38, {scale}))"
    if isinstance(value, float):
        return f"('{value!r}'::DOUBLE)"
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMPTZ" if value.tzinfo is not None else "TIMESTAMP"
        return f"('{value.isoformat(sep=' ')}'::{kind})"
    if isinstance(value, dt.date):
        return f"('{value.isoformat()}'::DATE)"
    text = str(value)
    return (
        "("
        + " || chr(0) || ".join("'" + p.replace("'", "''") + "'" for p in text.split("\x00"))
        + ")"
    )


def _scanned(get: dict[str, Any]) -> Relation | None:
    """The table a LOGICAL_GET scans, with the columns it binds; None if it scans no table."""
    data = get.get("function_data")
    if not isinstance(data, dict) or not isinstance(data.get("table"), str):
        return None
    schema = data.get("schema")
    names = get.get("names")
    if not isinstance(schema, str) or not isinstance(names, list):
        return None
    columns: set[str] = set()
    for column in get.get("column_indexes") or ():
        index = column.get("index") if isinstance(column, dict) else None
        if index == _ROW_ID:
            continue
        if not isinstance(index, int) or not 0 <= index < len(names):
            return Relation(schema.lower(), data["table"].lower(), None)  # cannot say which
        columns.add(str(names[index]).lower())
    return Relation(schema.lower(), data["table"].lower(), frozenset(columns))


def _function_name(get: dict[str, Any]) -> str:
    qname = get.get("qname")
    path = qname.get("path") if isinstance(qname, dict) else None
    return str(path[-1]).lower() if isinstance(path, list) and path else ""
