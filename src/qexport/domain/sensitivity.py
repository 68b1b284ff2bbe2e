"""What a statement reads, as its source's own planner reports it, and the tables (and columns)
a workspace's policy marks sensitive.

Marking a query id sensitive protected that id only: the same SQL saved as a new query went
out without an approval. What is sensitive is the data, so a policy names tables of a source
(`{"source": "shop", "table": "main.customers", "columns": ["email"]}`) and every query is
judged by what it reads. Who says what it reads:

- Not a parser of the SQL: a view, a CTE, a macro or a search path is the engine's to resolve
  (`SELECT * FROM v` names no table of v's), and a parser that disagrees with the engine is
  a way around the rule.
- The engine's planner: it resolves views, CTEs and subqueries down to the base tables it
  scans, with the engine's own rules. Each source asks it (`Source.relations`) when a query
  is saved (recorded on the query), when it is previewed and before every run; a plan costs
  5 ms on DuckDB (a two-table join, statement check included) and 35 ms on PostgreSQL (its
  own connection, EXPLAIN and two catalogue reads; describing the same statement: 23 ms).
- A source whose planner cannot say (generic SQLAlchemy, Spark) reports None: a query on it
  reads, for the policy, every sensitive table of that source (fail closed).

A `Relation` is one table read, with the columns read (None: all of them, or the source
cannot say which). A rule with columns is hit by a statement that reads any of them, or that
reads the table without saying which columns; a rule without columns by any read of the
table. Names are compared as the source's engine compares them (`ReadsReporting`): DuckDB
and MySQL fold case, PostgreSQL folds unquoted names to lower case and keeps quoted ones.

Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from qexport.domain.failures import InvalidRequestError, Problems

MAX_SENSITIVE_TABLES = 200
MAX_RULE_COLUMNS = 100
MAX_NAME_CHARS = 128  # longer than any engine's identifier (PostgreSQL 63, MySQL 64)
# A plain identifier, written without quotes (an engine's `customers`, `order_items2`).
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_PLAIN_LOWER = re.compile(r"[a-z_][a-z0-9_$]*")


class ReadsReported(StrEnum):
    """How much a source's planner says of what a statement reads."""

    COLUMNS = "tables and columns"
    TABLES = "tables"
    NOTHING = "nothing"


@dataclass(frozen=True)
class ReadsReporting:
    """What a source reports of a statement's reads, and how its engine compares names.

    `default_schema`: the schema of a name written without one (DuckDB `main`, PostgreSQL
    `public`, MySQL the URL's database); None when a rule must name it. `case_sensitive`:
    quoted names keep their case (PostgreSQL); otherwise every name is compared folded."""

    reports: ReadsReported
    default_schema: str | None
    case_sensitive: bool = False

    def name(self, written: str) -> str:
        """One name part as the engine holds it: folded unless quoted on a case-sensitive
        engine (PostgreSQL folds unquoted names to lower case)."""
        if written.startswith('"') and written.endswith('"') and len(written) >= 2:
            inner = written[1:-1].replace('""', '"')
            return inner if self.case_sensitive else inner.lower()
        if written.startswith("`") and written.endswith("`") and len(written) >= 2:
            return written[1:-1].replace("``", "`").lower()
        return written.lower()


def shown_name(name: str) -> str:
    """A name part written so that every engine reads it back as `name`: as it is when a
    plain lower-case identifier, double-quoted otherwise."""
    if _PLAIN_LOWER.fullmatch(name):
        return name
    return '"' + name.replace('"', '""') + '"'


# What a source whose planner cannot say reports: nothing, and names compared folded.
CANNOT_SAY = ReadsReporting(ReadsReported.NOTHING, default_schema=None)


@dataclass(frozen=True)
class Relation:
    """A table a statement reads, as its source's planner names it: its schema, its name and
    the columns read (None: every column, or the planner cannot say which)."""

    schema: str
    table: str
    columns: frozenset[str] | None = None

    def to_json(self) -> dict[str, Any]:
        stored: dict[str, Any] = {"schema": self.schema, "table": self.table}
        if self.columns is not None:
            stored["columns"] = sorted(self.columns)
        return stored

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Relation:
        columns = data.get("columns")
        return cls(
            str(data["schema"]),
            str(data["table"]),
            None if columns is None else frozenset(str(c) for c in columns),
        )


def merged(relations: Iterable[Relation]) -> frozenset[Relation]:
    """One relation per table, with the columns read anywhere in the statement (None when
    any read of it is of unknown columns)."""
    found: dict[tuple[str, str], frozenset[str] | None] = {}
    for relation in relations:
        key = (relation.schema, relation.table)
        if key not in found:
            found[key] = relation.columns
            continue
        before = found[key]
        found[key] = (
            None if before is None or relation.columns is None else before | relation.columns
        )
    return frozenset(Relation(s, t, c) for (s, t), c in found.items())


def reads_to_json(reads: frozenset[Relation] | None) -> list[dict[str, Any]] | None:
    """A query's recorded reads as stored (None: unknown)."""
    if reads is None:
        return None
    return [r.to_json() for r in sorted(reads, key=lambda r: (r.schema, r.table))]


def reads_from_json(stored: Sequence[Mapping[str, Any]] | None) -> frozenset[Relation] | None:
    return None if stored is None else frozenset(Relation.from_json(r) for r in stored)


# What the run that made a file read, by source: the tables (and columns) each source's
# planner reported just before the run (None: that source could not say). A report's file
# holds the union of its sections' runs. Recorded on the export (`ExportRecord.reads`), so
# that the file is judged by what it was made from, not by what its query reads now.
FileReads = Mapping[str, frozenset[Relation] | None]


def joined_reads(
    runs: Iterable[tuple[str, frozenset[Relation] | None]],
) -> dict[str, frozenset[Relation] | None]:
    """What several runs read (a report's sections), by source: the tables of each source
    merged (`merged`), None for a source any run of which could not say."""
    found: dict[str, frozenset[Relation] | None] = {}
    for source, reads in runs:
        if source not in found:
            found[source] = reads
            continue
        before = found[source]
        found[source] = None if before is None or reads is None else merged(before | reads)
    return found


def file_reads_to_json(reads: FileReads | None) -> list[dict[str, Any]] | None:
    """A file's reads as stored (None: not on record)."""
    if reads is None:
        return None
    return [{"source": s, "reads": reads_to_json(r)} for s, r in sorted(reads.items())]


def file_reads_from_json(
    stored: Sequence[Mapping[str, Any]] | None,
) -> dict[str, frozenset[Relation] | None] | None:
    if stored is None:
        return None
    return {str(entry["source"]): reads_from_json(entry.get("reads")) for entry in stored}


def reads_words(reads: frozenset[Relation] | None) -> str:
    """What a query reads, as people read it ("main.orders, main.customers (email)")."""
    if reads is None:
        return "unknown (its source cannot say)"
    if not reads:
        return "no table"
    return ", ".join(
        f"{r.schema}.{r.table}" + (f" ({', '.join(sorted(r.columns))})" if r.columns else "")
        for r in sorted(reads, key=lambda r: (r.schema, r.table))
    )


@dataclass(frozen=True)
class SensitiveTable:
    """A table of a source the policy marks sensitive: all of it, or only `columns`.

    `identity`: the data its source reaches (`Catalogue.identity`: a PostgreSQL cluster's
    system identifier and database, a DuckDB file's real path...), as the source said when
    the rule was checked; `also`: the workspace's other sources that reach the same data,
    which the rule covers as well (services/sensitive_rules.py keeps both)."""

    source: str
    schema: str
    table: str
    columns: frozenset[str] | None = None  # None: the whole table
    identity: str | None = None
    also: frozenset[str] = frozenset()

    def covers(self, source: str) -> bool:
        """Whether the rule holds for statements on `source`: its own, or one over the same
        data."""
        return source == self.source or source in self.also

    @property
    def key(self) -> tuple[str, str, str, frozenset[str] | None]:
        """What the rule marks, as written (its source, table and columns)."""
        return (self.source, self.schema, self.table, self.columns)

    def hit_by(self, source: str, reads: frozenset[Relation] | None) -> bool:
        """Whether a statement on `source` reading `reads` (None: the source cannot say)
        reads what this rule marks."""
        if not self.covers(source):
            return False
        if reads is None:
            return True  # a source that cannot say reads, for the policy, every table of it
        for relation in reads:
            if (relation.schema, relation.table) != (self.schema, self.table):
                continue
            if self.columns is None or relation.columns is None:
                return True
            if not self.columns.isdisjoint(relation.columns):
                return True
        return False

    def words(self) -> str:
        """The rule as written in the policy page's list and the CLI (`shop: main.customers
        (email, phone)`)."""
        columns = (
            f" ({', '.join(shown_name(c) for c in sorted(self.columns))})" if self.columns else ""
        )
        return f"{self.source}: {self.written_table}{columns}"

    @property
    def written_table(self) -> str:
        """`schema.table`, each part quoted where it needs to be."""
        return f"{shown_name(self.schema)}.{shown_name(self.table)}"

    def to_json(self) -> dict[str, Any]:
        stored: dict[str, Any] = {"source": self.source, "schema": self.schema, "table": self.table}
        if self.columns is not None:
            stored["columns"] = sorted(self.columns)
        if self.identity is not None:
            stored["identity"] = self.identity
        if self.also:
            stored["also"] = sorted(self.also)
        return stored

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SensitiveTable:
        columns = data.get("columns")
        identity = data.get("identity")
        return cls(
            str(data["source"]),
            str(data["schema"]),
            str(data["table"]),
            None if columns is None else frozenset(str(c) for c in columns),
            None if identity is None else str(identity),
            frozenset(str(s) for s in data.get("also") or ()),
        )

    def view(self) -> dict[str, Any]:
        """As the API shows it: `table` written as `schema.table` (quoted where needed), which
        the API takes back as it is."""
        return {
            "source": self.source,
            "table": self.written_table,
            "columns": None
            if self.columns is None
            else [shown_name(c) for c in sorted(self.columns)],
            "also": sorted(self.also),
        }


# ---------------------------------------------------------------- the rule as written


def split_name(written: str) -> list[str]:
    """`schema.table` cut at the dots outside quotes ("a.b", `"x.y".t`, `` `a`.`b` ``);
    InvalidRequestError for an unterminated quote or an empty part."""
    parts: list[str] = []
    current: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(written):
        char = written[index]
        if quote is not None:
            current.append(char)
            if char == quote:
                if index + 1 < len(written) and written[index + 1] == quote:
                    current.append(quote)
                    index += 1
                else:
                    quote = None
        elif char in '"`':
            quote = char
            current.append(char)
        elif char == ".":
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        index += 1
    if quote is not None:
        raise InvalidRequestError(f"{written[:80]!r} has an unterminated quote")
    parts.append("".join(current).strip())
    if any(not part for part in parts):
        raise InvalidRequestError(f"{written[:80]!r} is not a table name (schema.table)")
    return parts


def _part(written: str, reporting: ReadsReporting, what: str) -> str:
    quoted = written[:1] in '"`'
    if not quoted and not _PLAIN.fullmatch(written):
        raise InvalidRequestError(
            f"{written[:80]!r} is not a {what} name (quote it if it holds other characters)"
        )
    name = reporting.name(written)
    if not name or len(name) > MAX_NAME_CHARS:
        raise InvalidRequestError(f"a {what} name has 1 to {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        raise InvalidRequestError(f"a {what} name cannot hold control characters")
    return name


def table_rule(index: int, value: Any, reporting: Mapping[str, ReadsReporting]) -> SensitiveTable:
    """One entry of `sensitive_tables` (`{"source", "table", "columns"?}`) checked against
    the workspace's sources (`reporting`: by name, what each reports) and written as its
    engine holds the names: the schema defaulting per engine, case folded as it folds."""
    field = f"sensitive_tables[{index}]"
    if not isinstance(value, Mapping):
        raise InvalidRequestError(
            'an entry is {"source": ..., "table": ..., "columns": [...]}', field=field
        )
    unknown = sorted(set(value) - {"source", "table", "columns"})
    if unknown:
        raise InvalidRequestError(
            f"unknown key {unknown[0][:40]!r} (keys: source, table, columns)", field=field
        )
    source = value.get("source")
    if not isinstance(source, str) or source not in reporting:
        known = ", ".join(sorted(reporting)) or "none"
        given = str(source)[:80] if source is not None else "no source"
        raise InvalidRequestError(
            f"unknown source {given!r} (the workspace's sources: {known})", field=f"{field}.source"
        )
    engine = reporting[source]
    table = value.get("table")
    if not isinstance(table, str) or not table.strip():
        raise InvalidRequestError("table is a table's name (schema.table)", field=f"{field}.table")
    try:
        names = _table_name(table.strip(), engine)
    except InvalidRequestError as exc:
        raise InvalidRequestError(exc.detail, field=f"{field}.table") from None
    if len(names) == 1:
        if engine.default_schema is None:
            raise InvalidRequestError(
                f"name the schema of {table[:80]!r} (schema.table): the source {source!r} has"
                " no default one",
                field=f"{field}.table",
            )
        names.insert(0, engine.default_schema)
    return SensitiveTable(
        source, names[0], names[1], _rule_columns(value.get("columns"), engine, field)
    )


def _table_name(written: str, engine: ReadsReporting) -> list[str]:
    """`[schema.]table` as the engine holds its parts."""
    parts = split_name(written)
    if len(parts) > 2:
        raise InvalidRequestError(
            f"{written[:80]!r} names more than a schema and a table (schema.table)"
        )
    last = len(parts) - 1
    return [_part(p, engine, "table" if i == last else "schema") for i, p in enumerate(parts)]


def _rule_columns(value: Any, engine: ReadsReporting, field: str) -> frozenset[str] | None:
    if value is None:
        return None
    where = f"{field}.columns"
    if not isinstance(value, list | tuple) or not value:
        raise InvalidRequestError(
            "columns is a non-empty list of column names (left out: the whole table)", field=where
        )
    if len(value) > MAX_RULE_COLUMNS:
        raise InvalidRequestError(f"at most {MAX_RULE_COLUMNS} columns a table", field=where)
    found: set[str] = set()
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise InvalidRequestError("a column is its name", field=where)
        try:
            found.add(_part(item.strip(), engine, "column"))
        except InvalidRequestError as exc:
            raise InvalidRequestError(exc.detail, field=where) from None
    return frozenset(found)


def table_rules(value: Any, reporting: Mapping[str, ReadsReporting]) -> tuple[SensitiveTable, ...]:
    """The whole `sensitive_tables` rule: each entry checked (`table_rule`; every entry's
    mistake at once), two entries of one table merged (the whole table wins over columns),
    in a stable order."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise InvalidRequestError(
            'sensitive_tables is a list of {"source", "table", "columns"} ([] or null: none)',
            field="sensitive_tables",
        )
    if len(value) > MAX_SENSITIVE_TABLES:
        raise InvalidRequestError(
            f"at most {MAX_SENSITIVE_TABLES} sensitive tables", field="sensitive_tables"
        )
    found: dict[tuple[str, str, str], frozenset[str] | None] = {}
    problems = Problems()
    rules: list[SensitiveTable] = []
    for index, item in enumerate(value):
        with problems.check():
            rules.append(table_rule(index, item, reporting))
    problems.raise_any()
    for rule in rules:
        key = (rule.source, rule.schema, rule.table)
        if key in found:
            before = found[key]
            found[key] = None if before is None or rule.columns is None else before | rule.columns
        else:
            found[key] = rule.columns
    return tuple(SensitiveTable(s, sc, t, c) for (s, sc, t), c in sorted(found.items()))


MAX_LINE_CHARS = 2_000  # far more than a table and a hundred column names take


def written_rule(line: str) -> dict[str, Any]:
    """A rule as a person writes it on a line (the policy page, the CLI) as the API takes it:
    `shop: main.customers (email, phone)` or `shop: payments`; InvalidRequestError when it
    does not read as one. Read in one pass (a parenthesis inside quotes is a name's)."""
    text = line.strip()
    source, colon, rest = text.partition(":")
    opening = _outside_quotes(rest, "(")
    table = (rest if opening < 0 else rest[:opening]).strip()
    columns = None if opening < 0 else rest[opening + 1 :].rstrip()
    if (
        len(text) > MAX_LINE_CHARS
        or not colon
        or not source.strip()
        or not table
        or (columns is not None and not columns.endswith(")"))
    ):
        raise InvalidRequestError(
            f"{text[:80]!r} is not a table: write SOURCE: SCHEMA.TABLE, and the columns in"
            " parentheses for only some of them (shop: main.customers (email, phone))"
        )
    rule: dict[str, Any] = {"source": source.strip(), "table": table}
    if columns is not None:
        rule["columns"] = [c.strip() for c in _split_outside_quotes(columns[:-1]) if c.strip()]
    return rule


def _outside_quotes(text: str, wanted: str) -> int:
    """Where `wanted` first is in `text` outside double quotes or backticks (-1: nowhere)."""
    quote: str | None = None
    for index, char in enumerate(text):
        if quote is not None:
            quote = None if char == quote else quote
        elif char in '"`':
            quote = char
        elif char == wanted:
            return index
    return -1


def _split_outside_quotes(text: str) -> list[str]:
    """`text` cut at its commas outside quotes."""
    parts: list[str] = []
    while (comma := _outside_quotes(text, ",")) >= 0:
        parts.append(text[:comma])
        text = text[comma + 1 :]
    return [*parts, text]
