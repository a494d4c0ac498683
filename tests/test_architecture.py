"""The import structure: layers import downward only, and no modules import each other in a circle.

Layers, bottom up: the core (``sparsekit``'s formats, pruning, arrays, device facts, timing, I/O, ...);
the kernels (``sparsekit.reference``, ``sparsekit.gpu``, ``sparsekit.cpu``); the library above them (``sparsekit.api``, the USpMM search
``sparsekit.tune``, the CLI and its commands, ...); experiments and tutorials on top. The graph is read
from the source (every ``import`` statement, those inside functions too), so a deferred import counts.

Two lists hold the exceptions, each with its reason: :data:`UPWARD` (the upward imports that stay) and
:data:`CIRCLES` (none). A new upward import or circle fails; so does a listed one that is gone (the lists
shrink with the code).
"""
from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sparsekit", "experiments", "tutorials")
KERNELS = ("sparsekit.gpu", "sparsekit.cpu", "sparsekit.reference")
#: sparsekit modules that sit above the kernels (everything else in sparsekit is the core).
ABOVE_KERNELS = ("sparsekit.api", "sparsekit.tune", "sparsekit.sparse24_training", "sparsekit.specialize",
                 "sparsekit.cli", "sparsekit.cli_types", "sparsekit.commands", "sparsekit.bench",
                 "sparsekit.experiment", "sparsekit.testsuite", "sparsekit.__main__", "sparsekit.nn",
                 "sparsekit.torch", "sparsekit.launch")
LEVEL = {"core": 0, "kernels": 1, "library": 2, "top": 3}
#: Upward imports that stay, with their reason: (importer, imported).
UPWARD = {
    ("sparsekit.experiment", "experiments"),     # the registry of `reproduce` discovers the experiments package
    ("sparsekit", "sparsekit.api"),              # the lazy attribute ``sparsekit.spmm`` (loaded on first use)
}
#: Circles that stay (sorted module names): none.
CIRCLES: set[tuple[str, ...]] = set()


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports() -> dict[str, set[str]]:
    mods = modules()
    edges = collections.defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found = {t for t in targets if t in mods and t != name}
            if isinstance(node, ast.ImportFrom) and len(found) > 1:
                found.discard(node.module)        # ``from pkg import module``: the module, not the package face
            edges[name] |= found
    return edges


def layer(name: str) -> str:
    top = name.partition(".")[0]
    if top in ("experiments", "tutorials"):
        return "top"
    if any(name == k or name.startswith(k + ".") for k in KERNELS):
        return "kernels"
    return "library" if any(name == m or name.startswith(m + ".") for m in ABOVE_KERNELS) else "core"


def test_layers_import_downward():
    upward = {(a, b) for a, targets in imports().items() for b in targets if LEVEL[layer(b)] > LEVEL[layer(a)]}
    assert upward - UPWARD == set(), "new upward imports"
    assert UPWARD - upward == set(), "retired: remove them from UPWARD"


def test_no_new_circles():
    edges = imports()
    index, low, stack, on, circles = {}, {}, [], set(), set()

    def visit(v):                                   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.add(tuple(sorted(comp)))

    for v in list(modules()):
        if v not in index:
            visit(v)
    assert circles - CIRCLES == set(), "new circles"
    assert CIRCLES - circles == set(), "retired: remove them from CIRCLES"
