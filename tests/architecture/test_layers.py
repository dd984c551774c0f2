"""The package's layers, as docs/ARCHITECTURE.md draws them, checked on the source.

A package imports only packages below it: a module imports modules of its own layer or of
the layers below; inside a layer, its packages and root modules (``protocol.log``,
``protocol.replay``, ``engine.commit``) import each other without a cycle, so they too stand
in an order; and no two modules import each other, directly or around a loop.

Every ``import`` statement counts: at module level, inside functions and under
``TYPE_CHECKING`` alike, because each is a dependency someone has to understand, and an
import moved into a function to dodge a cycle is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "deltacommit"

#: Lowest first.  A module may import modules of its own layer or of layers below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("runtime", ("errors", "runtime")),
    ("protocol", ("protocol",)),
    ("io", ("io",)),
    ("engine", ("engine",)),
    ("ops", ("ops",)),
    ("facade", ("table",)),
    ("front ends", ("spark", "cli", "testing", PACKAGE)),
]


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for p in (SRC / PACKAGE).rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its source."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            subs = {f"{prefix}.{a.name}" for a in node.names} & MODULES.keys()
            found |= subs
            if len(subs) < len(node.names):
                found.add(prefix)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def layer_of(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else PACKAGE
    for i, (_, members) in enumerate(LAYERS):
        if top in members:
            return i
    raise AssertionError(f"module {module} is in no layer: add it to LAYERS and to "
                         "docs/ARCHITECTURE.md")


def test_every_module_has_a_layer() -> None:
    for m in MODULES:
        layer_of(m)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = sorted(
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})"
        for m, deps in GRAPH.items() for d in deps
        if layer_of(d) > layer_of(m) and m != PACKAGE)
    assert upward == []


def _cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Strongly connected components of an import graph (Tarjan), largest first: of the
    modules' unless ``graph`` is given."""
    graph = GRAPH if graph is None else graph
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def test_no_import_cycle_at_all() -> None:
    assert _cycles() == []


def unit_of(module: str) -> str:
    """The package or root module of a layer that ``module`` belongs to:
    ``deltacommit.protocol.log.names`` -> ``deltacommit.protocol.log``,
    ``deltacommit.protocol.replay`` -> itself."""
    return ".".join(module.split(".")[:3])


def test_the_packages_and_root_modules_of_a_layer_import_each_other_without_a_cycle() -> None:
    units: dict[str, set[str]] = {}
    for m, deps in GRAPH.items():
        units.setdefault(unit_of(m), set()).update(
            unit_of(d) for d in deps if unit_of(d) != unit_of(m))
    assert _cycles(units) == []


def test_no_module_imports_another_modules_private_names() -> None:
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []
