"""`qexport queries preview NAME`: a query's first rows in the terminal, run with the
requester's rights exactly as the API's preview (locally, or on a server when QEXPORT_URL and
QEXPORT_TOKEN are set). Locally too the statement runs in a process of its own, forked for
it, whose memory is bounded; the preview is recorded in the audit trail and counts toward
the member's previews per minute.

The table fits the terminal: each cell stays on one line, cut with "…" where its column is too
narrow; `--json` prints the API's answer, every cell whole (up to the preview's own caps).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from qexport.cli.client import ApiError
from qexport.cli.common import BAD_INPUT, client_of, fail_api, out, parse_kv
from qexport.services import preview as service

# Columns narrower than this are not shown at all (and said so); rich pads each side by one.
_MIN_WIDTH = 6
_GAP = 2


def queries_preview(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Query name, id or the start of its id.")],
    param: Annotated[
        list[str] | None, typer.Option(help="NAME=VALUE, repeatable; the default otherwise.")
    ] = None,
    limit: Annotated[
        int,
        typer.Option(min=1, max=service.MAX_ROWS, help="Rows shown at most.", metavar="<int>"),
    ] = service.MAX_ROWS,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """Show a query's first rows (at most 100), run with your rights; nothing is saved."""
    parameters = parse_kv(param or [])
    with client_of(ctx) as client, _refused():
        found = client.preview_query(name, parameters, limit=limit)
    if as_json:
        print(json.dumps(found, indent=2, ensure_ascii=False))
        return
    _print_table(found)


@contextlib.contextmanager
def _refused() -> Iterator[None]:
    """A refused preview as one line ending with its code (a line per mistake when several),
    a parameter's led by its option (`--param n: ...`): exit 2 for the values given (a bad
    parameter, a query not found), 1 for anything else (a statement its source refuses, too
    many previews, the source or the server down), locally as through a server."""
    try:
        yield
    except ApiError as exc:
        fail_api(exc, BAD_INPUT if exc.code in _BAD_INPUT else 1, _option_of)


# What says the values given were wrong (the API's 422 also names a statement its source
# refused, `query_invalid`, which no other value would put right).
_BAD_INPUT = ("invalid_request", "not_found")


def _option_of(field: str | None) -> str:
    """`--param n: ` before a mistake in parameter `n`, `--limit: ` in the limit."""
    if field and field.startswith("parameters."):
        return f"--param {field.removeprefix('parameters.')}: "
    return "--limit: " if field == "limit" else ""


def _print_table(found: dict[str, Any]) -> None:
    columns, rows = found["columns"], found["rows"]
    cells = [[_cell(value) for value in row] for row in rows]
    natural = [
        max([cell_len(c["name"]), cell_len(c["type"]), *(row[i].cell_len for row in cells)])
        for i, c in enumerate(columns)
    ]
    shown = _fitting(len(columns), out.width)
    widths = _widths(natural[:shown], out.width - _GAP * (shown - 1))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for index, column in enumerate(columns[:shown]):
        numeric = service.is_number_column(column["type"], [row[index] for row in rows])
        table.add_column(
            Text.assemble(column["name"], "\n", (column["type"], "dim")),
            width=widths[index],
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if numeric else "left",
        )
    for row in cells:
        table.add_row(*row[:shown])
    out.print(table)
    hidden = len(columns) - shown
    words = _summary(found)
    if hidden:
        words += f"; {hidden} more column{'' if hidden == 1 else 's'} did not fit (see --json)"
    out.print(words, highlight=False)


def _fitting(count: int, width: int) -> int:
    """How many columns fit the terminal, each at least _MIN_WIDTH wide (at least one)."""
    fits = (width + _GAP) // (_MIN_WIDTH + _GAP)
    return max(1, min(count, fits))


def _widths(natural: list[int], room: int) -> list[int]:
    """Each column its natural width while they all fit; else the narrow ones keep theirs and
    the wide ones share what is left equally."""
    widths = [0] * len(natural)
    left = room
    order = sorted(range(len(natural)), key=natural.__getitem__)
    for done, index in enumerate(order):
        share = left // (len(order) - done)
        widths[index] = max(1, min(natural[index], share))
        left -= widths[index]
    return widths


def _cell(value: Any) -> Text:
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, bool):
        return Text("true" if value else "false")
    if isinstance(value, str):
        # One line per row: a line break inside a value would read as a row of its own.
        return Text(value.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t"))
    return Text(str(value))


def _summary(found: dict[str, Any]) -> str:
    count = found["row_count"]
    words = f"{count:,} row{'' if count == 1 else 's'}"
    if found["more_rows"]:
        words = f"the first {count:,} rows; the result goes on (an export holds every row)"
    if found["cut_cells"]:
        chars = found["limits"]["cell_chars"]
        words += f"; {found['cut_cells']:,} texts longer than {chars:,} characters cut"
    return f"{words}; nothing was saved"
