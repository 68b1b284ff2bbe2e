"""PostgreSQL result columns as qexport writes them: Arrow types, and the SQL of the csv path.

Type mapping (the Arrow batches of `execute`, see postgres/arrow.py):

- bool, int2/int4/int8, float4/float8, date, time, timestamp: their Arrow twins; timestamptz:
  timestamp[us, tz=UTC]; bytea: binary; oid: int64.
- numeric(p, s): decimal128(p, s) up to 38 digits, decimal256 up to 76, exact. An
  unconstrained `numeric` (what `sum()` or arithmetic returns) has no fixed scale that a
  decimal column could hold exactly, so it is written as its exact text; cast it in the
  query (`sum(total)::numeric(18, 2)`) to get a decimal column. NaN in a numeric(p, s)
  column cannot be a decimal either: the export fails query_invalid and says so.
- everything else (text types, uuid, json/jsonb, interval, arrays, enums, ranges, ...):
  PostgreSQL's own text for the value (intervals as ISO 8601 durations, see
  postgres/session.py).

The csv/tsv COPY path writes the same text PostgreSQL prints, except booleans (`true` and
`false`, as the other writers), bytea (base64, as the other writers) and, when asked, cells
that a spreadsheet would evaluate: every column that is not a number, boolean, date, time or
uuid (those can never start like a formula) gets the rule of writers/neutralize.py in SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from psycopg.postgres import types as pg_types

from qexport.writers.neutralize import looks_like_formula


def _oid(name: str) -> int:
    return pg_types[name].oid


BOOL, BYTEA, NUMERIC = _oid("bool"), _oid("bytea"), _oid("numeric")

_ARROW: dict[int, pa.DataType] = {
    BOOL: pa.bool_(),
    _oid("int2"): pa.int16(),
    _oid("int4"): pa.int32(),
    _oid("int8"): pa.int64(),
    _oid("oid"): pa.int64(),
    _oid("float4"): pa.float32(),
    _oid("float8"): pa.float64(),
    _oid("date"): pa.date32(),
    _oid("time"): pa.time64("us"),
    _oid("timestamp"): pa.timestamp("us"),
    _oid("timestamptz"): pa.timestamp("us", tz="UTC"),
    BYTEA: pa.binary(),
}
# Types whose text can never start with = + - @ TAB CR LF, or that are numbers (never touched).
_NEVER_FORMULAS = frozenset(
    _oid(name)
    for name in (
        "int2",
        "int4",
        "int8",
        "oid",
        "float4",
        "float8",
        "numeric",
        "date",
        "time",
        "timetz",
        "timestamp",
        "timestamptz",
        "uuid",
    )
)
# The same set as writers/neutralize.py (= + - @ TAB CR LF), as code points for ascii(); all
# of them are below 65 ('A').
_FORMULA_CODES = "9, 10, 13, 43, 45, 61, 64"
_DECIMAL128_DIGITS = 38
_DECIMAL256_DIGITS = 76


@dataclass(frozen=True)
class Column:
    """One column of the query's result as PostgreSQL describes it."""

    name: str
    oid: int
    precision: int | None = None
    scale: int | None = None


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def positional_names(count: int) -> list[str]:
    """Names the result's columns are renamed to, so duplicate or odd names never clash."""
    return [f"c{index}" for index in range(1, count + 1)]


def decimal_type(column: Column) -> pa.DataType | None:
    """The exact Arrow decimal for a numeric(p, s) column; None when there is none."""
    if column.oid != NUMERIC or column.precision is None or column.scale is None:
        return None
    precision, scale = column.precision, column.scale
    # PostgreSQL 15 allows a negative scale (rounded to tens, hundreds...) and a scale above
    # the precision (only small fractions): both fit a decimal with scale >= 0 exactly.
    digits = precision - scale if scale < 0 else max(precision, scale)
    scale = max(scale, 0)
    if digits <= _DECIMAL128_DIGITS:
        return pa.decimal128(digits, scale)
    if digits <= _DECIMAL256_DIGITS:
        return pa.decimal256(digits, scale)
    return None


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type `execute` gives the column (see the module docstring)."""
    return decimal_type(column) or _ARROW.get(column.oid) or pa.string()


def csv_select(columns: Sequence[Column], *, neutralize: bool) -> list[str]:
    """The SELECT list that COPY writes as csv/tsv; the header carries the query's names."""
    exprs = []
    for column, alias in zip(columns, positional_names(len(columns)), strict=True):
        name = column.name
        if neutralize and looks_like_formula(name):
            name = "'" + name
        if column.oid == BOOL:
            expr = f"{alias}::text"
        elif column.oid == BYTEA:
            # encode() wraps base64 every 76 characters; the other writers do not.
            expr = f"translate(encode({alias}, 'base64'), E'\\n', '')"
        elif column.oid in _NEVER_FORMULAS:
            expr = alias
        else:
            expr = f"{alias}::text"
        if neutralize and column.oid not in _NEVER_FORMULAS and column.oid != BOOL:
            # Text starting with a letter (most text) is settled by the first comparison.
            # Measured on 5M values: 558 ms of server time against 549 ms for no check at
            # all, where `ascii(x) IN (...)` alone took 700 ms and a regular expression more.
            first = f"ascii({expr})"
            expr = (
                f"CASE WHEN {first} < 65 AND {first} IN ({_FORMULA_CODES})"
                f" THEN '''' || {expr} ELSE {expr} END"
            )
        exprs.append(f"{expr} AS {ident(name)}")
    return exprs


def preview_select(columns: Sequence[Column], *, max_chars: int) -> list[str]:
    """The SELECT list of a preview: each value as `execute` reads it, but text cut to
    `max_chars` + 1 characters and bytea to as many bytes in the server, so that a long value
    costs no more than it shows (the caller marks it cut). Unconstrained numerics, which read
    as their text too, are never cut: every digit counts."""
    keep = max_chars + 1
    exprs = []
    for column, alias in zip(columns, positional_names(len(columns)), strict=True):
        if column.oid == BYTEA:
            exprs.append(f"substring({alias} FROM 1 FOR {keep})")
        elif pa.types.is_string(arrow_type(column)) and column.oid != NUMERIC:
            exprs.append(f"left({alias}::text, {keep})")
        else:
            exprs.append(alias)
    return exprs
