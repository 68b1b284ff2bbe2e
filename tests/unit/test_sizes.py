"""Sizes, read from the source files (nothing is imported): no module of src/qexport over
MAX_MODULE_LINES lines, and no function over MAX_FUNCTION_LINES lines unless it says why.

A function's length is its whole extent, from its `def` to its last line: signature,
docstring and body. One that stays longer says why in a comment on the line just above its
`def`, or above its first decorator, that starts with the marker `# long:` followed by the
reason, for instance:

    # long: one table of cases; splitting would scatter it
    def upgrade() -> None:

A marker above a function that is not long is stale, and fails too."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "qexport"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MARKER = "# long:"


@dataclass(frozen=True)
class Function:
    where: str  # path under src/qexport, line of its def
    name: str
    lines: int
    reason: str | None  # the text after the marker above it; None without a marker


@functools.cache
def _sources() -> tuple[tuple[Path, str], ...]:
    return tuple((path, path.read_text()) for path in sorted(SRC.rglob("*.py")))


def _reason_above(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The reason a `# long:` comment on the line above the function (or above its first
    decorator) gives; None when that line is no such comment."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    above = lines[first - 2].strip() if first >= 2 else ""
    return above.removeprefix(MARKER).strip() if above.startswith(MARKER) else None


def functions() -> Iterator[Function]:
    """Every function and method of src/qexport, nested ones included."""
    for path, text in _sources():
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                yield Function(
                    where=f"{path.relative_to(SRC)}:{node.lineno}",
                    name=node.name,
                    lines=node.end_lineno - node.lineno + 1,
                    reason=_reason_above(lines, node),
                )


def test_no_module_is_over_the_limit() -> None:
    """Every module of src/qexport fits in MAX_MODULE_LINES lines: a longer one is split by
    the concepts it holds, each in a module named by it."""
    over = [
        f"{path.relative_to(SRC)}: {len(text.splitlines())} lines"
        for path, text in _sources()
        if len(text.splitlines()) > MAX_MODULE_LINES
    ]
    assert over == []


def test_no_function_is_over_the_limit_without_a_reason() -> None:
    """A function longer than MAX_FUNCTION_LINES lines gives the reason it stays long, in a
    `# long: <reason>` comment just above it; otherwise it is split where a piece with a
    name of its own falls out."""
    unexplained = [
        f"{f.where} {f.name}: {f.lines} lines"
        for f in functions()
        if f.lines > MAX_FUNCTION_LINES and not f.reason
    ]
    assert unexplained == []


def test_every_long_marker_is_above_a_long_function() -> None:
    """A `# long:` comment stands only above a function over the limit: once the function is
    split, its marker goes too."""
    stale = [
        f"{f.where} {f.name}: {f.lines} lines"
        for f in functions()
        if f.reason is not None and f.lines <= MAX_FUNCTION_LINES
    ]
    assert stale == []


def test_the_checks_see_a_long_function_and_its_marker() -> None:
    """The checks read what they are meant to: a long function with its marker above its
    decorator, one without, and a short one."""
    source = "\n".join(
        [
            "# long: one table of cases",
            "@decorated",
            "def explained() -> None:",
            *["    pass"] * 70,
            "def unexplained() -> None:",
            *["    pass"] * 70,
            "def short() -> None:",
            "    pass",
        ]
    )
    lines = source.splitlines()
    found = {
        node.name: (node.end_lineno - node.lineno + 1 if node.end_lineno else 0, reason)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef)
        for reason in [_reason_above(lines, node)]
    }
    assert found == {
        "explained": (71, "one table of cases"),
        "unexplained": (71, None),
        "short": (2, None),
    }
