"""The statement a DuckDB preview runs: the query as a subquery, its long values cut in DuckDB.

A LIMIT alone bounds the rows, not their size: `SELECT repeat('x', 50000000) FROM range(100)`
made a 10-row batch of 500 MB, and the process grew to 5 GB, for a preview that shows a
thousand characters of each. So the query runs as `SELECT <cut columns> FROM (<query>) AS
qexport_result(c1, …, cn) LIMIT n`: text to `keep` characters, blobs to `keep` bytes, nested
values (lists, structs, maps) as their JSON text and unions as their text, cut the same;
numbers, dates and the like as they are. The query's own trailing `;` and comments are left
out first (a `;` inside the parentheses would not parse); the wrapped statement then goes
through the same statement check as any query before it runs (duckdb/statements.py), so
whatever the trimming did, what runs is one SELECT that reads no files.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

# Values of these kinds are cut as text: nested ones become their JSON text first (as the
# preview shows them from Arrow), unions and bit strings their text.
_TEXT = frozenset({"varchar"})
_BYTES = frozenset({"blob"})
_NESTED = frozenset({"list", "struct", "map", "array"})
_OTHER_TEXT = frozenset({"union", "bit"})


def without_trailing(sql: str) -> str:
    """`sql` without the `;` and comments after its last token (DuckDB's tokenizer decides
    what is a comment or a string; its positions are UTF-8 byte offsets)."""
    data = sql.encode("utf-8")
    end = len(data)
    for position, kind in reversed(duckdb.tokenize(sql)):
        is_semicolon = kind == duckdb.token_type.operator and data[position:end].strip() == b";"
        if kind != duckdb.token_type.comment and not is_semicolon:
            break
        end = position
    return data[:end].decode("utf-8").rstrip()


def _cut(alias: str, kind: str, keep: int) -> str:
    if kind in _TEXT:
        return f"left({alias}, {keep})"
    if kind in _BYTES:
        return f"array_slice({alias}, 1, {keep})"
    if kind in _NESTED:
        return f"left(to_json({alias})::VARCHAR, {keep})"
    if kind in _OTHER_TEXT:
        return f"left({alias}::VARCHAR, {keep})"
    return alias


def preview_sql(sql: str, kinds: Sequence[str], *, keep: int, limit: int) -> str:
    """The preview statement for `sql`, whose result columns are of DuckDB type ids `kinds`
    (`varchar`, `blob`, `list`, …): at most `limit` rows, long values cut to `keep`."""
    aliases = [f"c{index}" for index in range(1, len(kinds) + 1)]
    select = ", ".join(_cut(alias, kind, keep) for alias, kind in zip(aliases, kinds, strict=True))
    return (
        f"SELECT {select} FROM (\n{without_trailing(sql)}\n)"
        f" AS qexport_result({', '.join(aliases)}) LIMIT {int(limit)}"
    )
