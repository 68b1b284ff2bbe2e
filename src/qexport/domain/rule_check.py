"""Whether a sensitive-table rule can ever match: what its source's catalogue says of the
table and columns it names, and the identity of the data the source reaches.

A rule is compared with what a source's planner reports a statement reads
(domain/sensitivity.py), and a planner reports base tables and the columns it scans: never a
view (it is expanded to the tables it reads), never a generated column DuckDB computes from
others (it reports the columns it is computed from), never a table that does not exist. A
rule naming one of those protects nothing, silently: `{"table": "v"}` over a view let `SELECT
* FROM v` out without an approval. So each rule is looked up in its source's catalogue when
the policy changes, and refused (422, naming the entry and why, every mistake at once)
unless it names what a plan can report:

- a base table, a partition, a materialised view or a foreign table (PostgreSQL relkinds r,
  p, m, f; DuckDB's tables; MySQL's BASE TABLE), named as the engine holds the name
  (PostgreSQL compares quoted names exactly: `Customers` unquoted is `customers`, and the
  refusal names `"Customers"` when only that exists);
- columns it has; on DuckDB none generated (`g AS (upper(e))` is reported as `e`).

A view is refused rather than expanded to the tables it reads, and the refusal names them
(from the planner): the rule then says what it marks, and a view redefined later does not
silently change what a rule written over it protects. A generated column likewise names the
columns to mark. A source whose planner cannot say (generic SQLAlchemy, Spark) has no
catalogue to check against: every query on it already reads, for the policy, every marked
table of it.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from qexport.domain.sensitivity import Relation, SensitiveTable, reads_words, shown_name

MAX_COLUMNS_SHOWN = 20  # a refusal lists a table's columns up to this many


class TableKind(StrEnum):
    """What a name is in a source's catalogue, as a plan sees it."""

    TABLE = "table"  # a plan names it when it is read
    VIEW = "view"  # a plan names the tables it reads, never it
    OTHER = "other"  # a sequence, an index, a type: no query reads rows of it
    MISSING = "missing"


@dataclass(frozen=True)
class FoundTable:
    """What a source's catalogue says of the table a rule names (`schema`, `table` as the
    rule holds them).

    `columns`: its columns as the engine holds them, in order; `generated`: those a plan
    never names, each with the columns it is computed from (as the planner reports them);
    `view_reads`: for a view, the tables it reads (None: not known); `what`: the engine's
    word for an OTHER (`sequence`); `other_case`: for a MISSING name, a table of the same
    name in another case, written as the rule should name it."""

    schema: str
    table: str
    kind: TableKind
    columns: tuple[str, ...] = ()
    generated: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    view_reads: frozenset[Relation] | None = None
    what: str = ""
    other_case: str | None = None


@dataclass(frozen=True)
class Catalogue:
    """What a source says of the tables rules name, and the identity of the data it reaches
    (None: it cannot say), which rules on other sources over the same data share."""

    identity: str | None
    tables: tuple[FoundTable, ...] = ()

    def found(self, schema: str, table: str) -> FoundTable | None:
        return next((t for t in self.tables if (t.schema, t.table) == (schema, table)), None)


@dataclass(frozen=True)
class RuleProblem:
    """Why a rule can never match: on its table (`part` "table") or its columns."""

    part: str
    message: str


def rule_problems(
    rule: SensitiveTable, found: FoundTable, *, case_sensitive: bool
) -> list[RuleProblem]:
    """Why `rule` can never match on its source, as `found` in its catalogue; [] if it can.
    `case_sensitive`: the engine keeps the case of quoted names (PostgreSQL)."""
    written = rule.written_table
    where = f"the source {rule.source!r}"
    if found.kind is TableKind.MISSING:
        hint = (
            f"; it has {found.other_case}: write the name as that, in double quotes, to keep"
            " its case"
            if found.other_case
            else ""
        )
        return [RuleProblem("table", f"{where} has no table {written}{hint}")]
    if found.kind is TableKind.VIEW:
        reads = (
            f" (it reads {reads_words(found.view_reads)})"
            if found.view_reads
            else " (see its definition)"
        )
        return [
            RuleProblem(
                "table",
                f"{written} is a view of {where}: a query's plan names the tables a view"
                f" reads, never the view, so mark those tables instead{reads}",
            )
        ]
    if found.kind is TableKind.OTHER:
        what = found.what or "not a table"
        return [RuleProblem("table", f"{written} is a {what} of {where}, not a table queries read")]
    return _column_problems(rule, found, case_sensitive=case_sensitive)


def _column_problems(
    rule: SensitiveTable, found: FoundTable, *, case_sensitive: bool
) -> list[RuleProblem]:
    problems: list[RuleProblem] = []
    held = {c if case_sensitive else c.lower(): c for c in found.columns}
    for column in sorted(rule.columns or ()):
        name = held.get(column if case_sensitive else column.lower())
        if name is None:
            problems.append(RuleProblem("columns", _no_column(rule, found, column)))
            continue
        if name in found.generated:
            inputs = found.generated[name]
            computed = f" ({', '.join(sorted(inputs))})" if inputs else ""
            problems.append(
                RuleProblem(
                    "columns",
                    f"{shown_name(name)} of {rule.written_table} is a generated column: a"
                    f" query's plan names the columns it is computed from{computed}, never"
                    " it, so mark those instead",
                )
            )
    return problems


def _no_column(rule: SensitiveTable, found: FoundTable, column: str) -> str:
    other = next((c for c in found.columns if c.lower() == column.lower() and c != column), None)
    hint = (
        f"; it has {shown_name(other)}: write the name as that, in double quotes, to keep its case"
        if other is not None
        else ""
    )
    shown = ", ".join(shown_name(c) for c in found.columns[:MAX_COLUMNS_SHOWN])
    more = ", ..." if len(found.columns) > MAX_COLUMNS_SHOWN else ""
    return (
        f"{rule.written_table} has no column {shown_name(column)}{hint} (its columns:"
        f" {shown}{more})"
    )
