"""What a MySQL/MariaDB statement reads: the tables of `EXPLAIN FORMAT=JSON`, named as the
server's own rewriting of the statement names them.

`EXPLAIN FORMAT=JSON` lists a `table` per table read, views merged into the statement and the
inside of materialised ones (`<derived2>`) included; but its `table_name` is the table's alias
where it has one (`FROM customers orders` shows `orders`), with no database, and a statement
the optimiser proves empty shows none (`Impossible WHERE`). The statement as the server
rewrote it (the note 1003 after EXPLAIN: MySQL's own, MariaDB's after `EXPLAIN EXTENDED`)
names every table by database and name, and each alias beside it
(`` `shop`.`customers` `orders` ``). So:

- the tables are the `database`.`table` references of the rewritten statement, and of the
  definitions of the views among them (information_schema.VIEWS, in the same rewritten
  form), recursively;
- and every name in the statement as written that is a table or view (a column that shares
  a table's name only over-counts): the optimiser runs a subquery it can answer from an
  index while it plans (`WHERE (SELECT min(email) FROM customers) = 'x'` is rewritten
  `WHERE 1`, its plan says "Select tables optimized away"), so neither the plan nor the
  rewritten statement names that table;
- every name EXPLAIN reports must be one of those tables or aliases: one that is not (an
  alias inside a view whose definition qexport may not read) means the statement cannot be
  told: None;
- a stored function reads tables no plan shows: a statement (or view) calling one: None;
- a table that shows other sessions' statements (PROCESSLIST, through a view too) is refused
  (other_sessions.py);
- MySQL needs SHOW VIEW on a view to EXPLAIN a statement over it (error 1345) and to read
  its definition: without it, None (the source is said to read every sensitive table).

No columns: MariaDB's plan has none (MySQL's `used_columns` leaves out filter columns), so a
column rule of a MySQL source is hit by any read of its table. Names are folded to lower case
(the server compares them so unless lower_case_table_names = 0, where this only over-counts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from qexport.domain.sensitivity import Relation
from qexport.sources.other_sessions import refuse_mysql_plan

ER_SPECIFIC_ACCESS_DENIED = 1345  # EXPLAIN over a view without SHOW VIEW on it
REWRITTEN_NOTE = 1003
_MAX_VIEW_DEPTH = 32  # views over views: deeper than any schema means a loop
_TOKEN = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|\s+|.", re.S)

Rows = Callable[[str], Sequence[tuple[Any, ...]]]
# The statement as written: names (quoted or not), strings, comments, dots.
_WORD = re.compile(
    r"`(?:[^`]|``)*`"
    r"|'(?:[^'\\]|\\.|'')*'"
    r'|"(?:[^"\\]|\\.|"")*"'
    r"|/\*.*?\*/|#[^\n]*|--(?:[\x00-\x20][^\n]*|$)"
    r"|[A-Za-z0-9_$\u0080-\uffff]+|\.",
    re.S,
)


@dataclass
class _Named:
    """What a rewritten statement names: tables, the aliases of each, functions called."""

    tables: set[tuple[str, str]] = field(default_factory=set)
    aliases: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    calls: set[str] = field(default_factory=set)


def planned_reads(
    rows: Rows, statement: str, literal: Callable[[str], str]
) -> frozenset[Relation] | None:
    """The tables `statement` (rendered with its values) reads; None when they cannot be
    told. `rows` runs one statement on the source's session and returns its rows (raising
    the driver's errors, which the source translates); `literal` quotes a value for it."""
    plan = json.loads(str(rows(f"EXPLAIN FORMAT=JSON {statement}")[0][0]))
    rewritten = _note(rows("SHOW WARNINGS"))
    if rewritten is None:  # MariaDB writes it for EXPLAIN EXTENDED only
        rows(f"EXPLAIN EXTENDED {statement}")
        rewritten = _note(rows("SHOW WARNINGS"))
    if rewritten is None:
        return None
    schemas = {
        str(r[0]).lower() for r in rows("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
    }
    named = _Named()
    _parse(rewritten, schemas, named)
    named.tables |= _written_tables(rows, statement, literal)
    expanded = _expand_views(rows, schemas, named)
    refuse_mysql_plan(named.tables)
    if not expanded:
        return None
    functions = {
        str(r[0]).lower()
        for r in rows(
            "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_TYPE = 'FUNCTION'"
        )
    }
    if named.calls & functions:
        return None
    known = set(named.aliases) | {table for _, table in named.tables}
    if any(name.lower() not in known for name in _plan_tables(plan)):
        return None
    return frozenset(Relation(schema, table, None) for schema, table in named.tables)


def _note(warnings: Sequence[tuple[Any, ...]]) -> str | None:
    for row in warnings:
        if len(row) >= 3 and int(row[1]) == REWRITTEN_NOTE:
            return str(row[2])
    return None


def _parse(text: str, schemas: set[str], named: _Named) -> None:
    """Add what the rewritten `text` names: `db`.`table` references (and the alias written
    after each), and the functions it calls."""
    tokens = [t for t in _TOKEN.findall(text) if not t.startswith(("'", '"'))]
    solid = [(i, t) for i, t in enumerate(tokens) if not t.isspace()]
    for at, (_, token) in enumerate(solid):
        nxt = solid[at + 1][1] if at + 1 < len(solid) else ""
        if token.startswith("`") and nxt == "(":
            named.calls.add(_name(token))
        if not (token.startswith("`") and nxt == "."):
            continue
        prev = solid[at - 1][1] if at else ""
        if prev == "." or at + 2 >= len(solid):
            continue
        second = solid[at + 2][1]
        after = solid[at + 3][1] if at + 3 < len(solid) else ""
        if not second.startswith("`") or after == ".":
            continue  # a column: `db`.`table`.`column`
        if after == "(":
            continue  # a function of a database: `db`.`f`(...)
        schema, table = _name(token), _name(second)
        if schema not in schemas:
            continue  # a column of a derived table or CTE: `t`.`column`
        named.tables.add((schema, table))
        named.aliases.setdefault(table, set()).add((schema, table))
        spaced = solid[at + 3][0] > solid[at + 2][0] + 1 if at + 3 < len(solid) else False
        if after.startswith("`") and spaced:
            named.aliases.setdefault(_name(after), set()).add((schema, table))


def _written_tables(
    rows: Rows, statement: str, literal: Callable[[str], str]
) -> set[tuple[str, str]]:
    """The tables and views named in the statement as written: `db.name`, or `name` in the
    connection's database."""
    words = [w for w in _WORD.findall(statement) if not w.startswith(("'", '"', "/*", "#", "--"))]
    names: set[tuple[str | None, str]] = set()
    for index, word in enumerate(words):
        if word == ".":
            continue
        if index >= 2 and words[index - 1] == ".":  # `db . name`
            names.add((_folded(words[index - 2]), _folded(word)))
        else:
            names.add((None, _folded(word)))
    if not names:
        return set()
    wanted = ", ".join(literal(n) for n in sorted({n for _, n in names}))
    found = rows(
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_SCHEMA = DATABASE() FROM information_schema.TABLES"
        f" WHERE TABLE_NAME IN ({wanted})"
    )
    tables: set[tuple[str, str]] = set()
    for schema, table, current in found:
        key = (str(schema).lower(), str(table).lower())
        if (key[0], key[1]) in names or (str(current) == "1" and (None, key[1]) in names):
            tables.add(key)
    return tables


def _folded(word: str) -> str:
    """A name as written, quoted or not, folded."""
    return _name(word) if word.startswith("`") else word.lower()


def _name(token: str) -> str:
    return token[1:-1].replace("``", "`").lower()


def _expand_views(rows: Rows, schemas: set[str], named: _Named) -> bool:
    """Add the tables of the views named, through views over views; False when a view's
    definition cannot be read (no SHOW VIEW on it) or the views go deeper than any schema."""
    definitions = {
        (str(s).lower(), str(t).lower()): str(d or "")
        for s, t, d in rows(
            "SELECT TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS"
        )
    }
    done: set[tuple[str, str]] = set()
    for _ in range(_MAX_VIEW_DEPTH):
        views = [t for t in named.tables if t in definitions and t not in done]
        if not views:
            return True
        for view in views:
            done.add(view)
            if not definitions[view].strip():
                return False
            _parse(definitions[view], schemas, named)
    return False


def _plan_tables(plan: Any) -> Iterator[str]:
    """Every `table_name` the plan reports but its own (`<derived2>`, `<subquery3>`)."""
    pending = [plan]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            name = item.get("table_name")
            if isinstance(name, str) and not name.startswith("<"):
                yield name
            pending.extend(item.values())
