"""The formula-neutralisation rule (OWASP "CSV injection"), shared by CSV, TSV and XLSX.

A spreadsheet application evaluates a text cell that starts with `=`, `+`, `-`, `@`, TAB,
CR or LF as a formula. Such strings are neutralised: CSV and TSV prefix them with a single
quote; XLSX keeps the exact value and marks the cell "quote prefixed" (Excel's own "this is
text" flag). Numbers are never touched: the rule applies only to values written as text.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

# RE2 syntax for pyarrow.compute; the same set as the Python pattern below.
FORMULA_START_RE2 = r"^[=+\-@\t\r\n]"
_FORMULA_START = re.compile(r"[=+\-@\t\r\n]")

QUOTE = "'"


def looks_like_formula(text: str) -> bool:
    """True when a spreadsheet would evaluate `text` as a formula."""
    return _FORMULA_START.match(text) is not None


def formula_mask(strings: pa.Array) -> pa.Array:
    """Per value: does it look like a formula? NULL counts as no."""
    return pc.fill_null(pc.match_substring_regex(strings, FORMULA_START_RE2), False)


def prefix_formulas(strings: pa.Array) -> pa.Array:
    """Prefix formula-looking strings with a single quote; other values are kept as they are."""
    mask = formula_mask(strings)
    if not pc.any(mask).as_py():
        return strings
    quoted = pc.binary_join_element_wise(QUOTE, strings, "")
    return pc.if_else(mask, quoted, strings)
