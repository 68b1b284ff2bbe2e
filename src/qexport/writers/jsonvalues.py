"""Arrow values as JSON text, a column at a time.

Each value becomes its JSON fragment with pyarrow.compute (no Python loop over rows, except
for the rare strings that need escaping and for binary and interval values). Exactness
rules: decimals keep their decimal text (never a float), in plain notation with their
column's scale (never `1E-10`: textual.decimal_text), floats use the shortest text that
reads back to the same value; NaN and infinities, which JSON has no number for, become the
strings `"NaN"`, `"Infinity"` and `"-Infinity"` (see textual.non_finite_label).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from qexport.writers.textual import (
    base64_text,
    decimal_text,
    fallback_strings,
    is_binary_like,
    is_span,
    is_string_like,
    matches_anywhere,
    non_finite_labels,
    span_text,
    unwrap,
    utf8,
)

NULL = "null"
_NULL_TEXT = pa.scalar(None, pa.string())
# Characters JSON forbids raw inside a string: the quote, the backslash, C0 controls.
_NEEDS_ESCAPE_RE2 = r'[\x00-\x1f"\\]'
_TICKS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def json_fragments(array: pa.Array) -> pa.Array:
    """Each value as JSON text, `null` for NULL: a string array without nulls."""
    return pc.fill_null(_encode(array), NULL)


def json_key(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def quote_json(strings: pa.Array) -> pa.Array:
    """Strings as JSON string literals; NULL stays NULL."""
    wrapped = pc.binary_join_element_wise('"', strings, '"', "")
    if not matches_anywhere(strings, _NEEDS_ESCAPE_RE2):
        return wrapped
    mask = pc.fill_null(pc.match_substring_regex(strings, _NEEDS_ESCAPE_RE2), False)
    if not pc.any(mask).as_py():
        return wrapped
    # Rare in practice: json.dumps (C speed) escapes just the values that need it.
    escaped = [json.dumps(text, ensure_ascii=False) for text in strings.filter(mask).to_pylist()]
    return pc.replace_with_mask(wrapped, mask, pa.array(escaped, pa.string()))


def to_text(array: pa.Array) -> pa.Array:
    """Plain text for a value with no native cell type: nested values as JSON, binary as base64."""
    array = unwrap(array)
    arrow_type = array.type
    if is_string_like(arrow_type):
        return utf8(array)
    if is_binary_like(arrow_type):
        return base64_text(array)
    if is_span(arrow_type):
        return span_text(array)
    if _is_nested(arrow_type):
        return _encode(array)
    if isinstance(arrow_type, pa.BaseExtensionType) or pa.types.is_union(arrow_type):
        return pa.array(fallback_strings(array), pa.string())
    return decimal_text(array) if pa.types.is_decimal(arrow_type) else array.cast(pa.string())


def iso_timestamps(array: pa.Array, *, separator: str = "T") -> pa.Array:
    """ISO 8601 text: `2024-05-01T12:30:00.000000`, plus `+02:00` when the type has a zone.

    An aware timestamp is shown as wall-clock time in its zone with that zone's offset.
    (pc.strftime and casting aware timestamps to text look up the zone per value: 30x slower.)
    """
    if array.type.tz is None:
        return _naive_iso(array, separator)
    local = pc.local_timestamp(array)
    ticks = pc.subtract(local.cast(pa.int64()), array.cast(pa.int64()))
    offsets = pc.divide(ticks, _TICKS_PER_SECOND[array.type.unit])
    distinct = pc.unique(offsets)
    labels = pa.array([_offset_label(seconds) for seconds in distinct.to_pylist()], pa.string())
    suffixes = pc.take(labels, pc.index_in(offsets, distinct))
    return pc.binary_join_element_wise(_naive_iso(local, separator), suffixes, "")


def _naive_iso(array: pa.Array, separator: str) -> pa.Array:
    text = array.cast(pa.string())  # `2024-05-01 12:30:00.000000`
    if separator == " ":
        return text
    return pc.replace_substring(text, " ", separator, max_replacements=1)


def _offset_label(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    label = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{label}:{seconds:02d}" if seconds else label  # pre-1900 local mean times


def _encode(array: pa.Array) -> pa.Array:  # noqa: PLR0911 - one branch per Arrow type family
    array = unwrap(array)
    arrow_type = array.type
    if pa.types.is_null(arrow_type):
        return pa.nulls(len(array), pa.string())
    if is_string_like(arrow_type):
        return quote_json(utf8(array))
    if pa.types.is_boolean(arrow_type):
        return pc.if_else(array, "true", "false")
    if pa.types.is_integer(arrow_type):
        return array.cast(pa.string())
    if pa.types.is_decimal(arrow_type):
        return decimal_text(array)
    if pa.types.is_floating(arrow_type):
        return _floats(array)
    if pa.types.is_date(arrow_type):
        return _wrap(array.cast(pa.date32()).cast(pa.string()))
    if pa.types.is_timestamp(arrow_type):
        return _wrap(iso_timestamps(array))
    if pa.types.is_time(arrow_type):
        return _wrap(array.cast(pa.string()))
    if pa.types.is_struct(arrow_type):
        return _struct(array)
    if pa.types.is_map(arrow_type):
        return _map(array)
    if _is_nested(arrow_type):
        return _list(array)
    return quote_json(to_text(array))


def _floats(array: pa.Array) -> pa.Array:
    """Finite floats as JSON numbers, NaN and infinities as their label in a JSON string."""
    if pa.types.is_float16(array.type):
        array = array.cast(pa.float32())
    labels = non_finite_labels(array)
    numbers = array.cast(pa.string())
    if labels is None:
        return numbers
    return pc.coalesce(_wrap(labels), numbers)


def _wrap(text: pa.Array) -> pa.Array:
    """Quotes around text that never needs escaping (dates, base64, numbers as text)."""
    return pc.binary_join_element_wise('"', text, '"', "")


def _is_nested(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
        or pa.types.is_list_view(arrow_type)
        or pa.types.is_large_list_view(arrow_type)
        or pa.types.is_struct(arrow_type)
        or pa.types.is_map(arrow_type)
    )


def _struct(array: pa.StructArray) -> pa.Array:
    arrow_type = array.type
    if arrow_type.num_fields == 0:
        return pc.if_else(array.is_valid(), "{}", _NULL_TEXT)
    pieces: list[object] = []
    for index, child in enumerate(array.flatten()):
        opener = "{" if index == 0 else ","
        pieces += [opener + json_key(arrow_type.field(index).name) + ":", json_fragments(child)]
    joined = pc.binary_join_element_wise(*pieces, "}", "")
    return pc.if_else(array.is_valid(), joined, _NULL_TEXT)


def _list(array: pa.Array) -> pa.Array:
    arrow_type = array.type
    if pa.types.is_fixed_size_list(arrow_type):
        array = array.cast(pa.large_list(arrow_type.value_field))
    elif not (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        # List views are rare; rebuilding them as lists keeps one code path.
        array = pa.array(array.to_pylist(), pa.large_list(arrow_type.value_field))
    offsets, start, end = _child_range(array)
    items = json_fragments(array.values.slice(start, end - start))
    joined = pc.binary_join(_relist(offsets, items), ",")
    wrapped = pc.binary_join_element_wise("[", joined, "]", "")
    return pc.if_else(array.is_valid(), wrapped, _NULL_TEXT)


def _map(array: pa.MapArray) -> pa.Array:
    """A map as a JSON object; keys that are not strings are written as their text."""
    offsets, start, end = _child_range(array)
    keys = quote_json(to_text(array.keys.slice(start, end - start)))
    values = json_fragments(array.items.slice(start, end - start))
    entries = pc.binary_join_element_wise(keys, ":", values, "")
    joined = pc.binary_join(_relist(offsets, entries), ",")
    wrapped = pc.binary_join_element_wise("{", joined, "}", "")
    return pc.if_else(array.is_valid(), wrapped, _NULL_TEXT)


def _child_range(array: pa.Array) -> tuple[pa.Array, int, int]:
    """This (possibly sliced) array's offsets, rebased to 0, and the child range they cover."""
    offsets = array.offsets
    start = offsets[0].as_py()
    end = offsets[len(offsets) - 1].as_py()
    return pc.subtract(offsets, pa.scalar(start, offsets.type)), start, end


def _relist(offsets: pa.Array, values: pa.Array) -> pa.Array:
    if pa.types.is_int64(offsets.type):
        return pa.LargeListArray.from_arrays(offsets, values)
    return pa.ListArray.from_arrays(offsets, values)
