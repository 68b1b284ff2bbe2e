"""Spark SQL types as Arrow types, exactly, or refused naming the column.

| Spark                                   | Arrow                                   |
|-----------------------------------------|-----------------------------------------|
| BOOLEAN, TINYINT .. BIGINT, FLOAT, DOUBLE | bool, int8 .. int64, float32, float64 |
| DECIMAL(p, s)                           | decimal128(p, s): every digit kept      |
| STRING, CHAR(n), VARCHAR(n)             | string                                  |
| BINARY                                  | binary                                  |
| DATE                                    | date32                                  |
| TIMESTAMP (an instant)                  | timestamp[us, UTC] (the session is UTC) |
| TIMESTAMP_NTZ (a wall-clock time)       | timestamp[us], no time zone             |
| ARRAY, MAP, STRUCT, VARIANT             | string: the JSON text of Spark's to_json |
| VOID (a bare NULL)                      | string, all NULL                        |
| INTERVAL, TIME, GEOMETRY, ...           | refused, naming the column (CAST it)    |

The JSON rule is applied by the query qexport sends (`to_json(c)` in a projection over the
query): a file format of flat columns (CSV, XLSX) gets one readable value per cell, and Parquet
the same text, rather than a type some formats cannot hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as st

from qexport.domain.failures import QueryInvalidError, bounded_detail

_ATOMIC: tuple[tuple[type[st.DataType], pa.DataType], ...] = (
    (st.BooleanType, pa.bool_()),
    (st.ByteType, pa.int8()),
    (st.ShortType, pa.int16()),
    (st.IntegerType, pa.int32()),
    (st.LongType, pa.int64()),
    (st.FloatType, pa.float32()),
    (st.DoubleType, pa.float64()),
    (st.StringType, pa.string()),
    (st.CharType, pa.string()),
    (st.VarcharType, pa.string()),
    (st.BinaryType, pa.binary()),
    (st.DateType, pa.date32()),
    (st.TimestampNTZType, pa.timestamp("us")),
    (st.TimestampType, pa.timestamp("us", tz="UTC")),
)
_AS_JSON = (st.ArrayType, st.MapType, st.StructType, st.VariantType)


@dataclass(frozen=True)
class ExportColumn:
    """One result column: its name, Spark's type name, and what qexport makes of it."""

    name: str
    spark_type: str
    arrow: pa.DataType
    as_json: bool = False
    as_text: bool = False  # VOID: cast to STRING on the server

    @property
    def rewritten(self) -> bool:
        return self.as_json or self.as_text


def export_column(field: st.StructField) -> ExportColumn:
    """The column's export type; QueryInvalidError naming it when it has none."""
    kind = field.dataType
    name = kind.simpleString()
    if isinstance(kind, st.DecimalType):
        return ExportColumn(field.name, name, pa.decimal128(kind.precision, kind.scale))
    for spark, arrow in _ATOMIC:
        if isinstance(kind, spark):
            return ExportColumn(field.name, name, arrow)
    if isinstance(kind, _AS_JSON):
        return ExportColumn(field.name, name, pa.string(), as_json=True)
    if isinstance(kind, st.NullType):
        return ExportColumn(field.name, name, pa.string(), as_text=True)
    raise QueryInvalidError(
        bounded_detail(
            f"the column {field.name!r} is of type {name.upper()}, which cannot be exported"
            " exactly: CAST it to STRING in the query"
        )
    )


def export_columns(schema: st.StructType) -> list[ExportColumn]:
    return [export_column(field) for field in schema.fields]


def arrow_schema(columns: Sequence[ExportColumn]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.arrow) for c in columns])


def quoted(name: str) -> str:
    """A Spark identifier in backticks."""
    return "`" + name.replace("`", "``") + "`"


def _value(alias: str, column: ExportColumn, keep: int | None) -> str:
    if column.as_json:
        value = f"to_json({alias})"
    elif column.as_text:
        value = f"CAST({alias} AS STRING)"
    else:
        value = alias
    if keep is None or not (pa.types.is_string(column.arrow) or pa.types.is_binary(column.arrow)):
        return value
    return (
        f"left({value}, {int(keep)})"
        if pa.types.is_string(column.arrow)
        else (f"substr({value}, 1, {int(keep)})")
    )


def projection(columns: Sequence[ExportColumn], subquery: str, *, keep: int | None = None) -> str:
    """`subquery` (a text starting `SELECT * FROM (...) AS qexport_result`) as qexport sends
    it: unchanged when every column goes as Spark sends it, else a SELECT over it that writes
    nested columns as JSON (and, with `keep`, cuts texts to `keep` characters and binaries to
    `keep` bytes, for a preview). Its columns are renamed by position (`AS qexport_result(c0,
    c1, ...)`), so that two columns of one name are still told apart."""
    if keep is None and not any(c.rewritten for c in columns):
        return subquery
    inner = subquery.removeprefix("SELECT * FROM ")
    aliases = [f"c{i}" for i in range(len(columns))]
    selected = [
        f"{_value(alias, column, keep)} AS {quoted(column.name)}"
        for alias, column in zip(aliases, columns, strict=True)
    ]
    return f"SELECT {', '.join(selected)} FROM {inner}({', '.join(aliases)})"
