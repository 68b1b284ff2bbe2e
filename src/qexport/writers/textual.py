"""Arrow types as the writers see them, and text for values that have no native form.

Text formats and spreadsheets have cells for numbers, booleans, dates and strings; anything
else (binary, intervals, extension types) is written as text, the same text in every format.
"""

from __future__ import annotations

import base64
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_NANOS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
NANOS_PER_SECOND = 1_000_000_000


def unwrap(array: pa.Array) -> pa.Array:
    """An extension array whose storage is text (JSON, ...) reads as its plain storage."""
    if isinstance(array.type, pa.BaseExtensionType) and is_string_like(array.type.storage_type):
        return array.storage
    return array


def is_string_like(arrow_type: pa.DataType) -> bool:
    """Strings in any Arrow layout, dictionary-encoded strings (DuckDB ENUM) included."""
    if pa.types.is_dictionary(arrow_type):
        return is_string_like(arrow_type.value_type)
    return bool(
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_string_view(arrow_type)
    )


def is_binary_like(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
        or pa.types.is_binary_view(arrow_type)
    )


def is_span(arrow_type: pa.DataType) -> bool:
    """Durations and intervals: lengths of time, written as ISO 8601 durations."""
    return bool(pa.types.is_duration(arrow_type) or pa.types.is_interval(arrow_type))


def utf8(array: pa.Array) -> pa.Array:
    """A string-like array as plain `string`, the layout every compute kernel accepts."""
    array = unwrap(array)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_string(array.type):
        return array
    return array.cast(pa.string())


# Arrow writes a decimal with an exponent when its scale is negative or its value is below
# 10^-6 in magnitude (Java's BigDecimal.toString rule: `1E-10`, `-1E-10`, `0E-10` in a
# DECIMAL(38,10)); at a scale of 0 to 6 never.
MAX_PLAIN_SCALE = 6


def may_use_an_exponent(arrow_type: pa.DataType) -> bool:
    """Whether Arrow's text of this decimal type may have an exponent (decimal_text fixes)."""
    return bool(pa.types.is_decimal(arrow_type)) and not 0 <= arrow_type.scale <= MAX_PLAIN_SCALE


def has_exponent_values(array: pa.Array) -> bool:
    """Whether Arrow prints any of these decimals with an exponent: a negative scale, or a
    value below 10^-6 in magnitude (a comparison: 0.003 s of CPU per 1M values, against
    0.05 s to print them and look)."""
    if not may_use_an_exponent(array.type):
        return False
    if array.type.scale < 0:
        return True
    bound = pa.scalar(Decimal(1).scaleb(-MAX_PLAIN_SCALE), array.type)
    return bool(pc.any(pc.less(pc.abs(array), bound)).as_py())


def decimal_text(array: pa.Array) -> pa.Array:
    """Decimals in plain notation with the column's scale, as DuckDB and PostgreSQL print
    them: `0.0000000001`, `-0.0000000001`, `0.0000000000` in a DECIMAL(38,10); a negative
    scale's trailing zeros written out (`12300`). NULL stays NULL.

    The values Arrow gives an exponent (below 10^-6: few in most columns) are written from
    their unscaled integer, read by viewing the same 16 or 32 bytes as a decimal of scale 0,
    which Arrow prints plainly; the rest keep Arrow's text. CPU time for 1M values of
    DECIMAL(38,10): 0.04 s for Arrow's text alone, 0.07 s with 1,000 of them rewritten,
    0.12 s with all of them (only cutting the exponent off Arrow's text with a regular
    expression took 0.17 s; Python's `format(Decimal, "f")`, 0.67 s).
    """
    text = array.cast(pa.string())
    if not may_use_an_exponent(array.type):
        return text
    exponent = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(exponent).as_py():
        return text
    small = array.filter(exponent)
    arrow_type, scale = small.type, small.type.scale
    unscaled_type = (
        pa.decimal128(arrow_type.precision, 0)
        if pa.types.is_decimal128(arrow_type)
        else pa.decimal256(arrow_type.precision, 0)
    )
    unscaled = pa.Array.from_buffers(
        unscaled_type, len(small), small.buffers(), small.null_count, small.offset
    ).cast(pa.string())
    digits = pc.replace_substring(unscaled, "-", "")
    if scale > 0:  # an exponent means a value below 10^-6: no integer digits
        plain = pc.binary_join_element_wise("0.", pc.ascii_lpad(digits, scale, "0"), "")
    else:
        zeros = pc.binary_join_element_wise(digits, "0" * -scale, "")
        plain = pc.if_else(pc.equal(digits, "0"), "0", zeros)
    sign = pc.if_else(pc.starts_with(unscaled, "-"), "-", "")
    return pc.replace_with_mask(text, exponent, pc.binary_join_element_wise(sign, plain, ""))


def base64_text(array: pa.Array) -> pa.Array:
    """Binary values as standard base64 text; NULL stays NULL."""
    return pa.array(
        [
            None if value is None else base64.b64encode(value).decode("ascii")
            for value in array.to_pylist()
        ],
        pa.string(),
    )


def span_text(array: pa.Array) -> pa.Array:
    """Durations and intervals as ISO 8601 durations (`P1M2DT3.5S`); NULL stays NULL."""
    if pa.types.is_duration(array.type):
        factor = _NANOS_PER_UNIT[array.type.unit]
        nanos = array.cast(pa.int64()).to_pylist()
        texts = [None if n is None else iso_duration(0, 0, n * factor) for n in nanos]
    elif array.type == pa.month_day_nano_interval():
        texts = [
            None if v is None else iso_duration(v.months, v.days, v.nanoseconds)
            for v in array.to_pylist()
        ]
    else:
        texts = fallback_strings(array)
    return pa.array(texts, pa.string())


def iso_duration(months: int, days: int, nanoseconds: int) -> str:
    """ISO 8601 duration; Arrow intervals may mix signs, so each part keeps its own."""
    text = "P"
    if months:
        text += f"{months}M"
    if days:
        text += f"{days}D"
    if nanoseconds or text == "P":
        sign = "-" if nanoseconds < 0 else ""
        seconds, fraction = divmod(abs(nanoseconds), NANOS_PER_SECOND)
        digits = f".{fraction:09d}".rstrip("0") if fraction else ""
        text += f"T{sign}{seconds}{digits}S"
    return text


def fallback_strings(array: pa.Array) -> list[str | None]:
    """`str()` of each Python value: for types no writer knows (UUID extension, unions...)."""
    values: list[Any] = array.to_pylist()
    return [None if value is None else str(value) for value in values]


def value_bounds(strings: pa.Array) -> tuple[int, int]:
    """Where this (possibly sliced) string array's values start and end in its data buffer."""
    width = pa.int64() if pa.types.is_large_string(strings.type) else pa.int32()
    offsets = pa.Array.from_buffers(
        width, len(strings) + 1, [None, strings.buffers()[1]], offset=strings.offset
    )
    return offsets[0].as_py(), offsets[len(strings)].as_py()


def matches_anywhere(strings: pa.Array, pattern: str) -> bool:
    """Whether `pattern` (RE2) matches anywhere in the values' bytes: one scan, not one per row.

    A cheap pre-check before per-row work: a match may span two values (or a NULL slot's
    leftover bytes), so True means "look closer" while False is certain.
    """
    data = strings.buffers()[2]
    if data is None or len(strings) == 0:
        return False
    start, end = value_bounds(strings)
    width = pa.int64() if pa.types.is_large_string(strings.type) else pa.int32()
    bounds = pa.array([start, end], width).buffers()[1]
    whole = pa.Array.from_buffers(strings.type, 1, [None, bounds, data])
    return bool(pc.match_substring_regex(whole, pattern)[0].as_py())


# NaN and the infinities have no JSON number and no spreadsheet number: jsonl and xlsx write
# these strings where the number would be (csv, tsv and parquet keep the float itself).
NAN_TEXT = "NaN"
INFINITY_TEXT = "Infinity"
NEGATIVE_INFINITY_TEXT = "-Infinity"


def non_finite_label(value: float) -> str:
    """The text a NaN or infinite float is written as: `NaN`, `Infinity` or `-Infinity`."""
    if math.isnan(value):
        return NAN_TEXT
    return INFINITY_TEXT if value > 0 else NEGATIVE_INFINITY_TEXT


def non_finite_labels(array: pa.Array) -> pa.Array | None:
    """Per float: its `non_finite_label` where it is NaN or infinite, NULL elsewhere (finite
    or NULL); None when the array holds no such value, the usual case (one cheap scan)."""
    if pa.types.is_float16(array.type):
        array = array.cast(pa.float32())
    outside = pc.invert(pc.is_finite(array))
    if not pc.any(outside).as_py():
        return None
    infinite = pc.if_else(pc.greater(array, 0), INFINITY_TEXT, NEGATIVE_INFINITY_TEXT)
    labels = pc.if_else(pc.is_nan(array), NAN_TEXT, infinite)
    return pc.if_else(outside, labels, pa.scalar(None, pa.string()))
