"""The architecture, checked over the source's syntax trees (nothing is imported).

DESIGN section 4: no package cycles; concrete stores are picked in `bootstrap` only, so no
other module imports one or asks whether an object is one."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "qexport"

# Where concrete stores may be named: the composition root and the adapters themselves.
ADAPTER_PACKAGES = ("store", "storage")
COMPOSITION_ROOT = "bootstrap"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted under qexport ("api.exports")
    target: str  # the imported module, dotted under qexport ("store.exports")
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(base: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    """The absolute module an ImportFrom names, dotted under qexport (None: not qexport)."""
    if node.level == 0:
        module = node.module or ""
        if module != "qexport" and not module.startswith("qexport."):
            return None
        return module.removeprefix("qexport").removeprefix(".")
    parts = base.split(".") if base else []
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
    return ".".join([*parts, *(node.module.split(".") if node.module else [])])


def _exists(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split(".")) if dotted else SRC
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once per test session."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a source file's tree (`ast.walk`), listed once per test session."""
    return tuple(ast.walk(syntax_tree(path)))


@functools.cache
def imports() -> tuple[Import, ...]:
    """Every import of a qexport module in src/qexport: at module level, inside functions and
    under TYPE_CHECKING alike (read once per test session)."""
    return tuple(_imports())


def _imports() -> Iterator[Import]:
    for path in sorted(SRC.rglob("*.py")):
        source = _module_name(path)
        for node in nodes(path):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("qexport."):
                        yield Import(source, alias.name.removeprefix("qexport."), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(source, _is_package(path), node)
                if module is None:
                    continue
                for alias in node.names:
                    # `from qexport.api import errors` imports the module api.errors.
                    sub = f"{module}.{alias.name}" if module else alias.name
                    yield Import(source, sub if _exists(sub) else module, node.lineno)


def _unit(module: str) -> str:
    """The top-level package or module a module belongs to ("api", "cli", "bootstrap")."""
    return module.split(".", maxsplit=1)[0] if module else "qexport"


def package_cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one unit (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _path_between(edges: set[tuple[str, str]], group: list[str]) -> str:
    """One cycle through the group's first unit, spelled a -> b -> a."""
    members = set(group)
    start = group[0]
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for a, b in sorted(edges):
                if a != v or b not in members:
                    continue
                if b == start:
                    return " -> ".join([*seen[v], start])
                if b not in seen:
                    seen[b] = [*seen[v], b]
                    nxt.append(b)
        frontier = nxt
    return " <-> ".join(group)


def _allowed_to_name_adapters(module: str) -> bool:
    return module == COMPOSITION_ROOT or _unit(module) in ADAPTER_PACKAGES


def _concrete_store_classes() -> set[str]:
    """The classes defined in store/ and storage/: the concrete adapters."""
    names: set[str] = set()
    for package in ADAPTER_PACKAGES:
        for path in (SRC / package).rglob("*.py"):
            tree = syntax_tree(path)
            names |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return names


def test_there_is_no_cycle_between_packages() -> None:
    """No top-level package (or module) of qexport imports, through any chain, one that
    imports it back: each layer can be read, tested and changed on its own."""
    edges = {
        (_unit(i.source), _unit(i.target)) for i in imports() if _unit(i.source) != _unit(i.target)
    }
    cycles = [_path_between(edges, group) for group in package_cycles(edges)]
    assert cycles == [], f"package cycles: {cycles}"


def test_only_bootstrap_and_the_adapters_import_concrete_stores() -> None:
    """Outside bootstrap.py, store/ and storage/, nothing imports qexport.store.* or
    qexport.storage.*: every other module works through the ports and the container."""
    offending = [
        f"{i.source} (line {i.line}) imports qexport.{i.target}"
        for i in imports()
        if _unit(i.target) in ADAPTER_PACKAGES and not _allowed_to_name_adapters(i.source)
    ]
    assert offending == []


def test_no_isinstance_on_a_store_type_outside_bootstrap() -> None:
    """Nothing outside bootstrap.py (and the adapters themselves) asks whether an object is a
    particular store: a caller that needs more than a port gets it from the container."""
    concrete = _concrete_store_classes()
    offending = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if _allowed_to_name_adapters(module):
            continue
        for node in nodes(path):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
            ):
                continue
            kinds = node.args[1]
            names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            for name in names:
                named = name.attr if isinstance(name, ast.Attribute) else getattr(name, "id", "")
                if named in concrete:
                    offending.append(f"{module} (line {node.lineno}): isinstance(..., {named})")
    assert offending == []


# ---------------------------------------------------------------- the layers
#
# Each top-level package or module of qexport belongs to one layer; a layer may import only
# the layers it names (and itself). docs/architecture.md draws them.
LAYER_OF: dict[str, str] = {
    "domain": "domain",
    "ports": "ports",
    "services": "services",
    **dict.fromkeys(
        ("store", "storage", "sources", "writers", "reports", "deliveries", "previews"),
        "adapters",
    ),
    **dict.fromkeys(
        ("api", "web", "http", "cli", "worker", "scheduler", "app", "demo", "__main__"),
        "entry points",
    ),
    "container": "container",  # what the entry points receive: the ports, wired
    "bootstrap": "composition",  # the one place adapters are chosen and built
    # What every layer above the domain may use: settings, and helpers that know no use case.
    **dict.fromkeys(
        (
            "config",
            "clock",
            "logs",
            "net",  # the egress policy, SMTP URLs, this machine's addresses, trusted proxies
            "private_files",
        ),
        "support",
    ),
    "qexport": "support",  # the package itself (its version)
}
MAY_IMPORT: dict[str, frozenset[str]] = {
    "domain": frozenset(),
    "ports": frozenset({"domain"}),
    "support": frozenset({"domain"}),
    "services": frozenset({"domain", "ports", "support"}),
    "adapters": frozenset({"domain", "ports", "support"}),
    "entry points": frozenset({"domain", "ports", "support", "services", "container"}),
    "container": frozenset({"domain", "ports", "support", "services"}),
    "composition": frozenset({"domain", "ports", "support", "services", "adapters", "container"}),
}
# The arrows against the table that are there today, each to go (issue 31): the test fails
# when one of them is gone and still listed, so the list only shrinks.
KNOWN: frozenset[tuple[str, str]] = frozenset(
    {
        ("services", "sources"),  # URL checks and catalogues: to each source's entry point
        ("reports", "container"),  # take what they need, not the whole container
        ("deliveries", "services"),  # dispatch, approval mail and content: to services
        ("container", "deliveries"),
        ("api", "bootstrap"),
        ("cli", "sources"),
        ("web", "writers"),
        ("worker", "reports"),
        ("worker", "writers"),
        ("demo", "sources"),
    }
)
# Entry points that build the adapters (the composition root's callers), and may import it.
BUILDS: frozenset[tuple[str, str]] = frozenset(
    {("cli", "bootstrap"), ("demo", "bootstrap"), ("app", "api"), ("app", "web")}
)


def _arrows() -> set[tuple[str, str]]:
    return {
        (_unit(i.source), _unit(i.target)) for i in imports() if _unit(i.source) != _unit(i.target)
    }


def _against_the_table(arrow: tuple[str, str]) -> bool:
    a, b = (LAYER_OF[u] for u in arrow)
    return a != b and b not in MAY_IMPORT[a] and arrow not in BUILDS


def test_every_package_has_a_layer() -> None:
    units = {u for arrow in _arrows() for u in arrow}
    assert sorted(units - set(LAYER_OF)) == []


def test_no_new_arrow_against_the_layers() -> None:
    """Domain imports nothing of qexport; ports the domain; services the domain and ports;
    adapters the domain and ports; entry points the services and the composition root;
    only bootstrap the adapters. An arrow against that fails here, naming the imports."""
    arrows = _arrows()
    new = sorted(a for a in arrows if _against_the_table(a) and a not in KNOWN)
    where = [
        f"{i.source} (line {i.line}) imports qexport.{i.target}"
        for i in imports()
        if (_unit(i.source), _unit(i.target)) in new
    ]
    assert where == []


def test_the_known_arrows_are_still_there() -> None:
    """An arrow that is gone leaves the KNOWN list: it only shrinks."""
    arrows = _arrows()
    assert sorted(KNOWN - arrows) == []
    assert sorted(a for a in KNOWN if not _against_the_table(a)) == []


# ---------------------------------------------------------------- one handler per use case
#
# The steps a handler takes, which no door takes itself: a door builds a command and hands it
# to the handler (`services.requests.request`, `services.deciding.decide_request`,
# `services.scheduling`), so that every door asks the same questions.
HANDLER_STEPS: dict[str, frozenset[str]] = {
    "services.requests": frozenset({"record_request", "approved_export"}),
    "services.approvals": frozenset({"decide", "Decider", "Rebuild"}),
    "services.schedules.catalog": frozenset(
        {
            "check_new_schedule",
            "create_schedule",
            "changed_schedule",
            "update_schedule",
            "run_schedule",
            "delete_schedule",
            "set_enabled",
        }
    ),
    "services.schedules.subscriptions": frozenset({"subscribe", "unsubscribe"}),
}


def test_no_entry_point_takes_a_handlers_steps_itself() -> None:
    """Neither imported by name (`from ...catalog import run_schedule`) nor called through
    its module (`catalog.run_schedule(...)`)."""
    offending = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if LAYER_OF.get(_unit(module)) != "entry points":
            continue
        modules: dict[str, str] = {}  # a name the file binds to a module with steps -> it
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, _is_package(path), node) or ""
                steps = HANDLER_STEPS.get(target, frozenset())
                offending += [
                    f"{module} (line {node.lineno}) imports {target}.{alias.name}"
                    for alias in node.names
                    if alias.name in steps
                ]
                for alias in node.names:
                    dotted = f"{target}.{alias.name}".lstrip(".")
                    if dotted in HANDLER_STEPS:
                        modules[alias.asname or alias.name] = dotted
        for node in nodes(path):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.attr in HANDLER_STEPS.get(modules.get(node.value.id, ""), ())
            ):
                where = modules[node.value.id]
                offending.append(f"{module} (line {node.lineno}) calls {where}.{node.attr}")
    assert offending == []
