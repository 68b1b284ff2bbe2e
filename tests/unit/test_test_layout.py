"""The tests' own layout, checked over their syntax trees (nothing is imported): a fixture name
means one thing across the suite, and the helpers the tests share live in tests/support.

A fixture defined twice (in two modules, or in a conftest.py and again in a module under it)
makes a test's parameter mean what the nearest definition says, which a reader cannot tell
from the test."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# What may sit directly in tests/: what pytest itself looks for there.
FLAT_ALLOWED = frozenset({"__init__.py", "conftest.py"})

# Fixture names deliberately defined more than once, each with why. None today: a contract
# suite takes its backend from one parametrized fixture (`store`, `sql_store`, `api_both`)
# rather than from a base suite that each backend's module overrides.
OVERRIDES: dict[str, str] = {}

# A fixture named by a literal string, in request.getfixturevalue or pytest.mark.usefixtures.
ASKED = re.compile(r"""(?:getfixturevalue|usefixtures)\(\s*["']([A-Za-z_][A-Za-z_0-9]*)["']""")


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts)


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name a function is registered under as a fixture (its `name=` or its own), or
    None when it is not decorated with pytest.fixture."""
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call is not None else decorator
        named = (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
            isinstance(target, ast.Name) and target.id == "fixture"
        )
        if not named:
            continue
        for keyword in call.keywords if call is not None else ():
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
        return node.name
    return None


def _functions(body: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions of a module or class body, and those of the classes in it."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body)


@dataclass(frozen=True)
class Suite:
    defined: dict[str, list[str]]  # fixture name -> where each definition is ("path:line")
    asked: dict[str, list[str]]  # fixture name given as a string -> where ("path:line")


@functools.cache
def _suite() -> Suite:
    """The suite's fixtures, and the names asked for as strings (`getfixturevalue(NAME)`,
    `usefixtures(NAME)`), read once per test session."""
    defined: dict[str, list[str]] = defaultdict(list)
    asked: dict[str, list[str]] = defaultdict(list)
    for path in _sources():
        text = path.read_text()
        if "fixture" not in text:
            continue  # parsing is the slow part; most test modules name no fixture
        where = path.relative_to(TESTS.parent)
        for node in _functions(ast.parse(text, str(path)).body):
            name = _fixture_name(node)
            if name is not None:
                defined[name].append(f"{where}:{node.lineno}")
        for match in ASKED.finditer(text):
            asked[match.group(1)].append(f"{where}:{text.count(chr(10), 0, match.start()) + 1}")
    return Suite(defined, asked)


def test_each_fixture_name_is_defined_once() -> None:
    """A second definition of a fixture name, anywhere under tests/, fails with both places;
    a module-local fixture takes a name of its own (`spark_source`, `files_acme`)."""
    twice = {
        name: where
        for name, where in _suite().defined.items()
        if len(where) > 1 and name not in OVERRIDES
    }
    assert not twice, "fixtures defined more than once:\n" + "\n".join(
        f"  {name}: {', '.join(where)}" for name, where in sorted(twice.items())
    )


def test_each_fixture_named_in_a_string_is_defined() -> None:
    """A fixture asked for by name in a string (which a rename does not reach) is defined in
    the suite."""
    suite = _suite()
    missing = {name: where for name, where in suite.asked.items() if name not in suite.defined}
    assert not missing, f"fixtures asked for by a name nothing defines: {missing}"


def test_no_helper_module_sits_flat_in_tests() -> None:
    """Directly in tests/ are only conftest.py and __init__.py; a helper the tests share is a
    module of tests/support."""
    flat = sorted(p.name for p in TESTS.glob("*.py") if p.name not in FLAT_ALLOWED)
    assert not flat, f"move these into tests/support: {flat}"


def test_the_layout_check_sees_a_fixture_defined_twice() -> None:
    """The check itself: a fixture under `name=` and a plain one of the same name are both
    found, and a function that is not a fixture is not."""
    module = ast.parse(
        "import pytest\n"
        "@pytest.fixture(name='team')\n"
        "def _team_fixture(): ...\n"
        "@pytest.fixture\n"
        "def team(): ...\n"
        "def helper(): ...\n"
    )
    names = [_fixture_name(node) for node in _functions(module.body)]
    assert names == ["team", "team", None]
